#include "models/tensor_parallel/gpt.h"

#include "models/autocast_cache.h"
#include "core/flat_tensors.h"

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

// A row-parallel layer's bias, added once to the combined sums, in their dtype (bf16 under
// autocast, as the whole layer's addmm adds it).
torch::Tensor with_bias(const torch::Tensor& combined, const torch::Tensor& bias) {
  return combined + bias.to(combined.scalar_type());
}

bool ends_with(const std::string& text, const std::string& suffix) {
  return text.size() >= suffix.size() && text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

ShardKind gpt_shard_kind(const std::string& name) {
  if (name == "wte.weight" || name == "lm_head.weight") return ShardKind::kRows;
  if (ends_with(name, "attn.c_attn.weight") || ends_with(name, "attn.c_attn.bias")) return ShardKind::kQkvRows;
  if (ends_with(name, "mlp.c_fc.weight") || ends_with(name, "mlp.c_fc.bias")) return ShardKind::kRows;
  if (ends_with(name, "c_proj.weight")) return ShardKind::kColumns;
  return ShardKind::kReplicated;
}

std::string tensor_parallel_obstacle(const GptConfig& config, int degree, int64_t seq_len, bool sequence_parallel) {
  const auto ranks = std::to_string(degree) + (degree == 1 ? " rank" : " ranks");
  if (config.heads % degree != 0) {
    return config.name + "'s " + std::to_string(config.heads) + " attention heads do not split over " + ranks +
           ": the degree must divide the head count";
  }
  if (config.vocabulary % degree != 0) {
    return config.name + "'s vocabulary of " + std::to_string(config.vocabulary) + " (padded) does not split over " +
           ranks + ": the degree must divide it";
  }
  if (sequence_parallel && seq_len % degree != 0) {
    return "sequence parallel splits the " + std::to_string(seq_len) + " tokens of a sequence over " + ranks +
           ": the degree must divide --seq";
  }
  return "";
}

ParallelAttentionImpl::ParallelAttentionImpl(const GptConfig& config, TensorParallelGroup group, bool sequence_parallel)
    : group(group),
      sequence_parallel(sequence_parallel),
      local_heads(config.heads / group.degree),
      head_width(config.width / config.heads),
      width(config.width) {
  c_attn = register_module("c_attn", torch::nn::Linear(width, 3 * local_heads * head_width));
  c_proj = register_module("c_proj", torch::nn::Linear(local_heads * head_width, width));
}

torch::Tensor ParallelAttentionImpl::partial_sums(const torch::Tensor& x) {
  const auto projected = column_parallel(x, c_attn->weight, c_attn->bias, group, sequence_parallel);  // (T, N, 3 h w)
  const auto tokens = projected.size(0), batch = projected.size(1);
  const auto qkv = projected.split(local_heads * head_width, /*dim=*/2);
  // (T, N, heads, head width) to (N, heads, T, head width), as attention takes them.
  const auto as_heads = [&](const torch::Tensor& t) {
    return t.view({tokens, batch, local_heads, head_width}).permute({1, 2, 0, 3});
  };
  const auto q = as_heads(qkv[0]), k = as_heads(qkv[1]), v = as_heads(qkv[2]);
  if (sdpa_backend < 0) sdpa_backend = at::_fused_sdp_choice(q, k, v, {}, 0.0, /*is_causal=*/true);
  const auto y = at::scaled_dot_product_attention(q, k, v, {}, 0.0, /*is_causal=*/true);
  const auto merged = y.permute({2, 0, 1, 3}).reshape({tokens, batch, local_heads * head_width});
  return rows_linear(merged, c_proj->weight);
}

// Row-parallel: partial sums combined first, the (replicated) bias added once after.
torch::Tensor ParallelAttentionImpl::combined(const torch::Tensor& partial) {
  return with_bias(leave_parallel_region(partial, group, sequence_parallel), c_proj->bias);
}

torch::Tensor ParallelAttentionImpl::forward(const torch::Tensor& x) { return combined(partial_sums(x)); }

ParallelMlpImpl::ParallelMlpImpl(const GptConfig& config, TensorParallelGroup group, bool sequence_parallel)
    : group(group), sequence_parallel(sequence_parallel) {
  const auto hidden = 4 * config.width / group.degree;
  c_fc = register_module("c_fc", torch::nn::Linear(config.width, hidden));
  c_proj = register_module("c_proj", torch::nn::Linear(hidden, config.width));
}

torch::Tensor ParallelMlpImpl::partial_sums(const torch::Tensor& x) {
  const auto hidden = torch::gelu(column_parallel(x, c_fc->weight, c_fc->bias, group, sequence_parallel), "tanh");
  return rows_linear(hidden, c_proj->weight);
}

torch::Tensor ParallelMlpImpl::combined(const torch::Tensor& partial) {
  return with_bias(leave_parallel_region(partial, group, sequence_parallel), c_proj->bias);
}

torch::Tensor ParallelMlpImpl::forward(const torch::Tensor& x) { return combined(partial_sums(x)); }

ParallelBlockImpl::ParallelBlockImpl(const GptConfig& config, TensorParallelGroup group, bool sequence_parallel) {
  const auto d = config.width;
  ln_1 = register_module("ln_1", torch::nn::LayerNorm(torch::nn::LayerNormOptions({d})));
  attn = register_module("attn", ParallelAttention(config, group, sequence_parallel));
  ln_2 = register_module("ln_2", torch::nn::LayerNorm(torch::nn::LayerNormOptions({d})));
  mlp = register_module("mlp", ParallelMlp(config, group, sequence_parallel));
}

torch::Tensor ParallelBlockImpl::forward(torch::Tensor x) {
  x = x + attn(ln_1(x));
  return x + mlp(ln_2(x));
}

TensorParallelGptImpl::TensorParallelGptImpl(GPTImpl& whole, TensorParallelGroup group, bool sequence_parallel)
    : config_(whole.config()), group_(group), sequence_parallel_(sequence_parallel) {
  // --checkpoint=blocks: each parallel block is recomputed in the backward, its collectives too.
  set_checkpoint_blocks(whole.checkpoint_blocks());
  const auto obstacle = tensor_parallel_obstacle(config_, group.degree, /*seq_len=*/0, /*sequence_parallel=*/false);
  TORCH_CHECK(obstacle.empty(), obstacle);
  TORCH_CHECK(config_.width % config_.heads == 0, "the width ", config_.width, " does not divide into ",
              config_.heads, " heads");
  const auto d = config_.width;
  wte = register_module("wte", torch::nn::Embedding(config_.vocabulary / group.degree, d));
  wpe = register_module("wpe", torch::nn::Embedding(config_.context, d));
  h = register_module("h", torch::nn::ModuleList());
  for (int64_t layer = 0; layer < config_.layers; ++layer) {
    blocks_.emplace_back(config_, group_, sequence_parallel_);
    h->push_back(blocks_.back());
  }
  ln_f = register_module("ln_f", torch::nn::LayerNorm(torch::nn::LayerNormOptions({d})));
  lm_head = register_module(
      "lm_head", torch::nn::Linear(torch::nn::LinearOptions(d, config_.vocabulary / group.degree).bias(false)));

  torch::NoGradGuard no_grad;
  const auto shards = named_parameters();
  const auto sources = whole.named_parameters();
  TORCH_CHECK(shards.size() == sources.size(), "the tensor-parallel GPT has ", shards.size(),
              " parameters, the whole one ", sources.size());
  for (const auto& source : sources) {
    auto* shard = shards.find(source.key());
    TORCH_CHECK(shard != nullptr, "the tensor-parallel GPT has no parameter ", source.key());
    const auto piece = take_shard(source.value(), gpt_shard_kind(source.key()), group_.rank, group_.degree);
    TORCH_CHECK(piece.sizes() == shard->sizes(), source.key(), "'s shard is ", piece.sizes(), ", its place ",
                shard->sizes());
    shard->copy_(piece);
    if (sequence_parallel_ && gpt_shard_kind(source.key()) == ShardKind::kReplicated) sequence_split_.push_back(*shard);
  }
}

void TensorParallelGptImpl::finish_gradients() {
  if (sequence_split_.empty()) return;
  std::vector<torch::Tensor> gradients;
  for (const auto& parameter : sequence_split_) gradients.push_back(parameter.grad());
  torch::NoGradGuard no_grad;
  for (const auto& indices : indices_by_dtype(gradients)) {
    auto flat = concatenated(gradients, indices);
    all_reduce_sum_in_place(flat, group_);
    const auto parts = split_like(flat, gradients, indices);
    for (size_t k = 0; k < indices.size(); ++k) gradients[indices[k]].copy_(parts[k]);
  }
}

torch::Tensor TensorParallelGptImpl::embed(const torch::Tensor& tokens) {
  const auto sequence = tokens.t();  // (T, N): sequence-first
  const auto local_vocabulary = wte->weight.size(0);
  const auto local_tokens = sequence - group_.rank * local_vocabulary;
  const auto owned = local_tokens.ge(0).logical_and(local_tokens.lt(local_vocabulary));
  // Tokens another rank owns look up row 0 and are zeroed: the sum over ranks is wte(tokens).
  const auto partial = wte(local_tokens.clamp(0, local_vocabulary - 1)).masked_fill(owned.logical_not().unsqueeze(-1), 0.0);
  const auto length = sequence.size(0);
  if (!sequence_parallel_) {
    return reduce_from_tensor_parallel_region(partial, group_) +
           wpe(torch::arange(length, tokens.options())).unsqueeze(1);
  }
  const auto shard_length = length / group_.degree;
  const auto positions = torch::arange(group_.rank * shard_length, (group_.rank + 1) * shard_length, tokens.options());
  return reduce_scatter_to_sequence_parallel_region(partial, group_) + wpe(positions).unsqueeze(1);
}

std::vector<Stage> TensorParallelGptImpl::build_stages() {
  std::vector<Stage> stages;
  stages.push_back({"embed", {wte.ptr(), wpe.ptr()}, [this](const torch::Tensor& tokens) { return embed(tokens); }});
  const auto names = gpt_stage_names(config_);
  for (size_t layer = 0; layer < blocks_.size(); ++layer) {
    auto block = blocks_[layer];
    stages.push_back({names[layer + 1], {block.ptr()}, [block](const torch::Tensor& x) mutable { return block(x); },
                      /*block=*/true});
  }
  stages.push_back({"head", {ln_f.ptr(), lm_head.ptr()}, [this](const torch::Tensor& x) {
                      return column_parallel(ln_f(x), lm_head->weight, {}, group_, sequence_parallel_);
                    }});
  return stages;
}

torch::Tensor TensorParallelGptImpl::forward(torch::Tensor tokens) {
  TORCH_CHECK(!sequence_parallel_ || tokens.size(1) % group_.degree == 0, "sequence parallel over ", group_.degree,
              " ranks needs a sequence length that divides by them, got ", tokens.size(1));
  AutocastScope autocast(tokens.device().type(), autocast_dtype_);
  for (auto& stage : stages()) tokens = stage.forward(tokens);
  return tokens;
}

std::vector<torch::Tensor> TensorParallelGptImpl::forward_halves(const torch::Tensor& tokens,
                                                                 const std::vector<int64_t>& streams) {
  TORCH_CHECK(!checkpoint_blocks(), "the halves' interleaved forward does not recompute blocks (--checkpoint=blocks)");
  TORCH_CHECK(tokens.size(0) % 2 == 0, "the halves' interleaved forward needs an even batch, got ", tokens.size(0));
  TORCH_CHECK(!sequence_parallel_ || tokens.size(1) % group_.degree == 0, "sequence parallel over ", group_.degree,
              " ranks needs a sequence length that divides by them, got ", tokens.size(1));
  AutocastScope autocast(tokens.device().type(), autocast_dtype_);
  // Off: a cast made on one half's stream and read on the other's would race the two streams.
  AutocastCacheSetting no_shared_casts(false);
  const auto halves = tokens.chunk(2, 0);
  // Each step ends at most one collective past its start, so the two halves' collectives
  // alternate on the communicator. Measured on 2 H200s against two alternatives, both slower
  // (docs/STRATEGIES.md): turns of a half's reduce-scatter and next all-gather together, and a
  // communicator of each half's own.
  const auto each_half = [&](const std::function<void(size_t)>& step) { for_each_half(streams, tokens.device(), step); };
  std::vector<torch::Tensor> x(2), partial(2);
  each_half([&](size_t h) { x[h] = embed(halves[h]); });  // ends with its collective
  for (auto& block : blocks_) {
    each_half([&](size_t h) { partial[h] = block->attn->partial_sums(block->ln_1(x[h])); });  // starts with one (sp)
    each_half([&](size_t h) { x[h] = x[h] + block->attn->combined(partial[h]); });
    each_half([&](size_t h) { partial[h] = block->mlp->partial_sums(block->ln_2(x[h])); });  // (sp)
    each_half([&](size_t h) { x[h] = x[h] + block->mlp->combined(partial[h]); });
  }
  std::vector<torch::Tensor> logits(2);
  each_half([&](size_t h) { logits[h] = column_parallel(ln_f(x[h]), lm_head->weight, {}, group_, sequence_parallel_); });
  return logits;
}

torch::Tensor TensorParallelGptImpl::data_parallel_forward(const torch::Tensor&, const std::vector<torch::Device>&) {
  TORCH_CHECK(false, "a tensor-parallel GPT's rank is not replicated by data_parallel");
  return {};
}

std::map<std::string, std::string> TensorParallelGptImpl::forward_facts() const {
  if (blocks_.empty() || blocks_.front()->attn->sdpa_backend < 0) return {};
  // The label's attention kernel, named as GPTImpl names it.
  static const std::map<int64_t, std::string> names = {
      {static_cast<int64_t>(at::SDPBackend::math), "math"},
      {static_cast<int64_t>(at::SDPBackend::flash_attention), "flash_attention"},
      {static_cast<int64_t>(at::SDPBackend::efficient_attention), "efficient_attention"},
      {static_cast<int64_t>(at::SDPBackend::cudnn_attention), "cudnn_attention"}};
  const auto found = names.find(blocks_.front()->attn->sdpa_backend);
  return {{"attention", found != names.end() ? found->second : "unknown"}};
}

std::vector<ShardKind> TensorParallelGptImpl::shard_kinds() {
  std::vector<ShardKind> kinds;
  for (const auto& item : named_parameters()) kinds.push_back(gpt_shard_kind(item.key()));
  return kinds;
}

namespace {

TensorParallelPlan gpt_plan() {
  TensorParallelPlan plan;
  plan.family = "GPT";
  plan.covers = [](const std::string& model) { return find_gpt_config(model) != nullptr; };
  plan.obstacle = [](const std::string& model, int degree, int64_t seq_len, bool sequence_parallel) {
    return tensor_parallel_obstacle(*find_gpt_config(model), degree, seq_len, sequence_parallel);
  };
  plan.shard_kind = gpt_shard_kind;
  plan.halves = true;
  plan.width = [](const std::string& model) { return find_gpt_config(model)->width; };
  plan.shard = [](StagedModel& whole, const TensorParallelGroup& group, bool sequence_parallel) {
    auto* gpt = dynamic_cast<GPTImpl*>(&whole.module());
    TORCH_CHECK(gpt != nullptr, whole.name(), " is not a GPT");
    return std::static_pointer_cast<TensorParallelModel>(
        std::make_shared<TensorParallelGptImpl>(*gpt, group, sequence_parallel));
  };
  return plan;
}

PARBENCH_REGISTER_TENSOR_PARALLEL_PLAN(gpt_plan());

}  // namespace
}  // namespace parbench
