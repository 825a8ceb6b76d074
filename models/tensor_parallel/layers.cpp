#include "models/tensor_parallel/layers.h"

#include "models/autocast_cache.h"
#include "core/flat_tensors.h"
#include "models/token_cross_entropy.h"

#ifdef PARBENCH_WITH_CUDA
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

#include <ATen/SDPBackend.h>
#include <ATen/autocast_mode.h>
#include <ATen/ops/_fused_sdp_choice.h>
#include <ATen/ops/scaled_dot_product_attention.h>

namespace parbench {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// The ring algorithms' bytes per rank (docs/METRICS.md): the whole tensor is `bytes`; ring_factor
// 2 for an all-reduce, 1 for an all-gather or a reduce-scatter.
void tally(const TensorParallelGroup& group, double bytes, double ring_factor) {
  if (group.tally == nullptr || group.degree <= 1) return;
  const double sent = ring_factor * (group.degree - 1) / group.degree * bytes;
  group.tally->bytes += sent;
  if (ring_factor == 1.0) group.tally->gather_scatter_bytes += sent;
  group.tally->calls += 1;
}

// Issues and waits for one collective on `x`'s device, timed by the group's clock if it has one.
template <class Collective>
void timed(const TensorParallelGroup& group, const torch::Tensor& x, const Collective& collective) {
  if (group.clock != nullptr) group.clock->before(x);
  collective();
  if (group.clock != nullptr) group.clock->after(x);
}

torch::Tensor all_reduce_sum(const torch::Tensor& x, const TensorParallelGroup& group) {
  auto reduced = x.contiguous().clone();
  all_reduce_sum_in_place(reduced, group);
  return reduced;
}

// A collective issued and not yet waited for: its result, and its work (none on one rank).
struct Started {
  torch::Tensor result;
  c10::intrusive_ptr<c10d::Work> work;
};

// Issues a reduce-scatter (sum) of `x` along dimension 0 and tallies it.
Started start_reduce_scatter_first_dim(const torch::Tensor& x, const TensorParallelGroup& group) {
  TORCH_CHECK(x.size(0) % group.degree == 0, "a reduce-scatter over ", group.degree, " ranks needs a first dimension ",
              "that divides by them, got ", x.size(0));
  if (group.degree == 1) return {x.clone(), {}};
  auto input = x.contiguous();
  auto sizes = input.sizes().vec();
  sizes[0] /= group.degree;
  auto output = torch::empty(sizes, input.options());
  tally(group, static_cast<double>(input.nbytes()), 1.0);
  return {output, group.backend->_reduce_scatter_base(output, input)};
}

// Issues an all-reduce (sum) of `contiguous` in place and tallies it.
Started start_all_reduce_sum_in_place(torch::Tensor& contiguous, const TensorParallelGroup& group) {
  if (group.degree == 1) return {contiguous, {}};
  TORCH_CHECK(contiguous.is_contiguous(), "an all-reduce in place needs a contiguous tensor");
  tally(group, static_cast<double>(contiguous.nbytes()), 2.0);
  std::vector<at::Tensor> tensors{contiguous};
  return {contiguous, group.backend->allreduce(tensors)};
}

torch::Tensor reduce_scatter_first_dim(const torch::Tensor& x, const TensorParallelGroup& group) {
  if (group.degree == 1) return start_reduce_scatter_first_dim(x, group).result;
  Started started;
  timed(group, x, [&] {
    started = start_reduce_scatter_first_dim(x, group);
    started.work->wait();
  });
  return started.result;
}

// The process group travels through autograd's context as an address: these functions live
// only within one step of one strategy, which outlives them.
void save_group(AutogradContext* ctx, const TensorParallelGroup* group) {
  ctx->saved_data["group"] = static_cast<int64_t>(reinterpret_cast<intptr_t>(group));
}
const TensorParallelGroup& saved_group(AutogradContext* ctx) {
  return *reinterpret_cast<const TensorParallelGroup*>(static_cast<intptr_t>(ctx->saved_data["group"].toInt()));
}

struct ReduceFromTensorParallelRegion : torch::autograd::Function<ReduceFromTensorParallelRegion> {
  static torch::Tensor forward(AutogradContext*, const torch::Tensor& x, const TensorParallelGroup* group) {
    return all_reduce_sum(x, *group);
  }
  static variable_list backward(AutogradContext*, variable_list gradients) {
    return {gradients[0], torch::Tensor()};
  }
};

struct ReduceScatterToSequenceParallelRegion : torch::autograd::Function<ReduceScatterToSequenceParallelRegion> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, const TensorParallelGroup* group) {
    save_group(ctx, group);
    return reduce_scatter_first_dim(x, *group);
  }
  static variable_list backward(AutogradContext* ctx, variable_list gradients) {
    return {all_gather_first_dim(gradients[0], saved_group(ctx)), torch::Tensor()};
  }
};

// Megatron's vocab_parallel_cross_entropy, as one autograd function: forward reduces across
// ranks, backward is local. As token_cross_entropy (models/token_cross_entropy.h), the fp32
// work goes chunk by chunk and only the logits (in their own dtype) and one fp32 value per token
// are kept: each rank's log-sum-exp over its columns, all-gathered and combined into the whole
// vocabulary's (a log-sum-exp of the ranks' own, so no maxima need to travel first).
struct VocabParallelCrossEntropy : torch::autograd::Function<VocabParallelCrossEntropy> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& local_logits, const torch::Tensor& targets,
                               const TensorParallelGroup* group) {
    const int64_t tokens = local_logits.size(0), local_vocabulary = local_logits.size(1);
    const auto local_log_sum_exp = row_log_sum_exp(local_logits);
    const auto log_sum_exp = at::logsumexp(all_gather_first_dim(local_log_sum_exp.unsqueeze(0), *group), {0});
    const auto local_targets = targets - group->rank * local_vocabulary;
    const auto owned = local_targets.ge(0).logical_and(local_targets.lt(local_vocabulary));
    const auto safe_targets = local_targets.clamp(0, local_vocabulary - 1);
    auto target_logits = local_logits.gather(1, safe_targets.unsqueeze(1))
                             .squeeze(1)
                             .to(torch::kFloat32)
                             .masked_fill(owned.logical_not(), 0.0)
                             .contiguous();
    all_reduce_sum_in_place(target_logits, *group);
    ctx->save_for_backward({local_logits, safe_targets, owned, log_sum_exp});
    return (log_sum_exp - target_logits).sum().div(static_cast<double>(tokens));
  }
  static variable_list backward(AutogradContext* ctx, variable_list gradients) {
    const auto saved = ctx->get_saved_variables();
    const auto& local_logits = saved[0];
    // softmax over the whole vocabulary on this rank's columns, minus one where it owns the target
    const auto scale = gradients[0].to(torch::kFloat32) / static_cast<double>(local_logits.size(0));
    return {softmax_minus_one_hot(local_logits, saved[3], saved[1], saved[2].to(torch::kFloat32), scale),
            torch::Tensor(), torch::Tensor()};
  }
};

// A column-parallel linear layer (Megatron's ColumnParallelLinear with its asynchronous
// gradient communication): the input enters the tensor-parallel region (sequence parallel:
// all-gathered along the sequence) and each rank applies its rows of the weight. Backward
// starts the input gradient's collective (an all-reduce of the ranks' partial sums; sequence
// parallel: a reduce-scatter back to the sequence shards) and computes the weight's gradient
// while it runs on NCCL's stream, waiting only before handing the input gradient on. As two
// autograd nodes (f, then the linear layer) the collective would start after both gradients.
// Under autocast the caller casts the input, and the weight and bias are cast here, as
// autocast's linear would.
struct ColumnParallelLinear : torch::autograd::Function<ColumnParallelLinear> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, const torch::Tensor& weight,
                               const torch::Tensor& bias, const TensorParallelGroup* group, bool sequence_parallel) {
    save_group(ctx, group);
    ctx->saved_data["sequence_parallel"] = sequence_parallel;
    ctx->saved_data["weight_dtype"] = static_cast<int64_t>(weight.scalar_type());
    // No bias: an empty tensor (autograd functions take no undefined inputs).
    const bool has_bias = bias.numel() > 0;
    ctx->saved_data["bias_dtype"] = static_cast<int64_t>(bias.scalar_type());
    ctx->saved_data["has_bias"] = has_bias;
    const auto whole = sequence_parallel ? all_gather_first_dim(x, *group) : x;
    const auto dtype = whole.scalar_type();
    const auto rows = whole.reshape({-1, whole.size(-1)});
    const auto cast_weight = weight.to(dtype);
    const auto output = has_bias ? at::addmm(bias.to(dtype), rows, cast_weight.t()) : at::mm(rows, cast_weight.t());
    ctx->save_for_backward({rows, cast_weight});
    auto sizes = whole.sizes().vec();
    sizes.back() = output.size(1);
    ctx->saved_data["input_sizes"] = x.sizes().vec();
    return output.view(sizes);
  }
  static variable_list backward(AutogradContext* ctx, variable_list gradients) {
    const auto& group = saved_group(ctx);
    const bool sequence_parallel = ctx->saved_data["sequence_parallel"].toBool();
    const auto saved = ctx->get_saved_variables();
    const auto& rows = saved[0];
    const auto& cast_weight = saved[1];
    const auto output_gradient = gradients[0].reshape({-1, gradients[0].size(-1)});
    auto input_gradient = output_gradient.mm(cast_weight);  // (rows, d): this rank's partial sums
    auto whole_sizes = ctx->saved_data["input_sizes"].toIntVector();
    if (sequence_parallel) whole_sizes[0] *= group.degree;
    input_gradient = input_gradient.view(whole_sizes);
    const auto started = sequence_parallel ? start_reduce_scatter_first_dim(input_gradient, group)
                                           : start_all_reduce_sum_in_place(input_gradient, group);
    const auto weight_gradient =
        output_gradient.t().mm(rows).to(static_cast<c10::ScalarType>(ctx->saved_data["weight_dtype"].toInt()));
    torch::Tensor bias_gradient;
    if (ctx->saved_data["has_bias"].toBool()) {
      bias_gradient = output_gradient.sum(0).to(static_cast<c10::ScalarType>(ctx->saved_data["bias_dtype"].toInt()));
    }
    // The clock times the compute stream's wait: the communication the weight gradient did not hide.
    if (started.work) timed(group, started.result, [&] { started.work->wait(); });
    return {started.result, weight_gradient, bias_gradient, torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

// `layer` on x as a matrix of rows (gpt.cpp's rows_linear: addmm fuses the bias for 2-D inputs only).
torch::Tensor rows_linear(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias) {
  auto sizes = x.sizes().vec();
  const auto rows = torch::nn::functional::linear(x.reshape({-1, sizes.back()}), weight, bias);
  sizes.back() = rows.size(1);
  return rows.view(sizes);
}

// A column-parallel layer on x: the whole sequence on every rank. Under autocast the input is
// cast first, as the layer would cast it, so that the gather and the gradient's all-reduce or
// reduce-scatter move bf16, as Megatron's do, not LayerNorm's fp32.
torch::Tensor column_parallel(torch::Tensor x, const torch::Tensor& weight, const torch::Tensor& bias,
                              const TensorParallelGroup& group, bool sequence_parallel) {
  const auto device_type = x.device().type();
  if (at::autocast::is_autocast_enabled(device_type)) x = x.to(at::autocast::get_autocast_dtype(device_type));
  return ColumnParallelLinear::apply(x, weight, bias.defined() ? bias : torch::empty({0}, weight.options()), &group,
                                     sequence_parallel);
}

// Out of a row-parallel layer: its partial sums combined (sequence parallel: this rank's shard of them).
torch::Tensor leave_parallel_region(const torch::Tensor& x, const TensorParallelGroup& group, bool sequence_parallel) {
  return sequence_parallel ? reduce_scatter_to_sequence_parallel_region(x, group)
                           : reduce_from_tensor_parallel_region(x, group);
}

torch::Tensor reduce_from_tensor_parallel_region(const torch::Tensor& x, const TensorParallelGroup& group) {
  return ReduceFromTensorParallelRegion::apply(x, &group);
}
torch::Tensor reduce_scatter_to_sequence_parallel_region(const torch::Tensor& x, const TensorParallelGroup& group) {
  return ReduceScatterToSequenceParallelRegion::apply(x, &group);
}

void all_reduce_sum_in_place(torch::Tensor& contiguous, const TensorParallelGroup& group) {
  if (group.degree == 1) return;
  timed(group, contiguous, [&] { start_all_reduce_sum_in_place(contiguous, group).work->wait(); });
}

torch::Tensor all_gather_first_dim(const torch::Tensor& x, const TensorParallelGroup& group) {
  if (group.degree == 1) return x.clone();
  auto input = x.contiguous();
  auto sizes = input.sizes().vec();
  sizes[0] *= group.degree;
  auto output = torch::empty(sizes, input.options());
  tally(group, static_cast<double>(output.nbytes()), 1.0);
  timed(group, input, [&] { group.backend->_allgather_base(output, input)->wait(); });
  return output;
}

torch::Tensor vocab_parallel_cross_entropy(const torch::Tensor& local_logits, const torch::Tensor& targets,
                                           const TensorParallelGroup& group) {
  TORCH_CHECK(local_logits.dim() == 2 && targets.dim() == 1 && targets.size(0) == local_logits.size(0),
              "vocab_parallel_cross_entropy takes (tokens, V/w) logits and (tokens) targets, got ",
              local_logits.sizes(), " and ", targets.sizes());
  return VocabParallelCrossEntropy::apply(local_logits, targets, &group);
}

void for_each_half(const std::vector<int64_t>& streams, torch::Device device, const std::function<void(size_t)>& step) {
  for (size_t half = 0; half < 2; ++half) {
    if (streams.empty()) {
      step(half);
      continue;
    }
#ifdef PARBENCH_WITH_CUDA
    const c10::cuda::CUDAStreamGuard on_its_stream(
        c10::cuda::CUDAStream::unpack3(streams[half], device.index(), c10::DeviceType::CUDA));
    step(half);
#else
    (void)device;
    TORCH_CHECK(false, "streams for the halves need a CUDA build");
#endif
  }
}

torch::Tensor take_shard(const torch::Tensor& whole, ShardKind kind, int rank, int degree) {
  switch (kind) {
    case ShardKind::kReplicated: return whole.clone();
    case ShardKind::kRows: return whole.chunk(degree, 0)[rank].clone();
    case ShardKind::kColumns: return whole.chunk(degree, 1)[rank].clone();
    case ShardKind::kQkvRows: return whole.unflatten(0, {3, whole.size(0) / 3}).chunk(degree, 1)[rank].flatten(0, 1).clone();
  }
  return whole.clone();
}

torch::Tensor gather_shards(const torch::Tensor& shard, ShardKind kind, const TensorParallelGroup& group) {
  switch (kind) {
    case ShardKind::kReplicated: return shard;
    case ShardKind::kRows: return all_gather_first_dim(shard, group);
    case ShardKind::kColumns: return all_gather_first_dim(shard.t(), group).t().contiguous();
    case ShardKind::kQkvRows: {
      // Rank-major [q_0 k_0 v_0 q_1 k_1 v_1 ...] into [q k v].
      const auto gathered = all_gather_first_dim(shard, group);
      return gathered.unflatten(0, {group.degree, 3, shard.size(0) / 3}).transpose(0, 1).flatten(0, 2).contiguous();
    }
  }
  return shard;
}

}  // namespace parbench
