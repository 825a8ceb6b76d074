// Megatron-style tensor parallelism for models/gpt.h's GPT (Shoeybi et al. 2019, and Korthikanti
// et al. 2022 for sequence parallelism), the pieces the tensor_parallel strategy
// (strategies/tensor_parallel/tensor_parallel.cpp) trains with:
// - the collectives as autograd functions around c10d (never torch's _c10d_functional_autograd,
//   whose C++ implementations PyTorch removed): Megatron's f (identity forward, all-reduce
//   backward) and g (all-reduce forward, identity backward), and for sequence parallelism the
//   all-gather whose backward is a reduce-scatter and the reduce-scatter whose backward is an
//   all-gather;
// - a GPT whose linear layers hold this rank's shards: QKV and the MLP's fc column-parallel (the
//   attention's heads split across ranks), both out projections row-parallel, the token
//   embedding and the LM head split by vocabulary, LayerNorms and the position embedding whole;
// - a cross-entropy over vocabulary-split logits that never gathers them.
// Activations run sequence-first, (T, N, d), as Megatron's do: sequence shards are then
// contiguous slices of the first dimension, which c10d's all-gather and reduce-scatter
// concatenate along.
#pragma once

#include "models/gpt.h"
#include "models/staged_model.h"
#include "strategies/distributed/collective_clock.h"

#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace parbench {

// The bytes one rank sends per step, by the ring algorithms' counts (docs/METRICS.md,
// "tensor_parallel"): an all-reduce of N bytes 2(w-1)/w N, an all-gather or reduce-scatter
// whose whole tensor is N bytes (w-1)/w N. Kept by the collectives below as they are issued.
struct CollectiveTally {
  double bytes = 0;
  double gather_scatter_bytes = 0;  // of `bytes`, the all-gathers' and reduce-scatters'
  int64_t calls = 0;
  void clear() { *this = {}; }
};

// The process group the shards are split over, and where its collectives are tallied and timed.
struct TensorParallelGroup {
  c10d::Backend* backend = nullptr;  // not owned
  int rank = 0;
  int degree = 1;
  CollectiveTally* tally = nullptr;  // optional
  CollectiveClock* clock = nullptr;  // optional
};

// The collectives leaving a row-parallel layer, as autograd functions (dimension 0 is the one
// split or gathered). Entering a column-parallel layer (f, or the sequence-parallel all-gather)
// is part of that layer's own autograd function, which overlaps its backward collective.
// g: all-reduce (sum) forward, identity backward.
torch::Tensor reduce_from_tensor_parallel_region(const torch::Tensor& x, const TensorParallelGroup& group);
// Sequence parallel: reduce-scatter (sum) along dimension 0 forward, all-gather backward.
torch::Tensor reduce_scatter_to_sequence_parallel_region(const torch::Tensor& x, const TensorParallelGroup& group);

// Plain collectives, outside autograd (each waits for its result; on GPUs, the current stream does).
void all_reduce_sum_in_place(torch::Tensor& contiguous, const TensorParallelGroup& group);
torch::Tensor all_gather_first_dim(const torch::Tensor& x, const TensorParallelGroup& group);

// Mean next-token cross-entropy over logits split by vocabulary: `local_logits` (tokens, V/w),
// this rank's columns [rank V/w, (rank+1) V/w) of the whole (tokens, V) logits, any float type
// (computed in fp32, chunk by chunk); `targets` (tokens) indices into the whole vocabulary.
// Megatron's: each token's log-sum-exp (an all-gather of every rank's over its own columns,
// combined) and target logit (an all-reduce) are combined across ranks, so no rank holds more
// than its columns; the gradient is softmax minus one-hot on each rank's own columns, no
// communication. Every rank returns the same loss.
torch::Tensor vocab_parallel_cross_entropy(const torch::Tensor& local_logits, const torch::Tensor& targets,
                                           const TensorParallelGroup& group);

// Runs `step` for half 0, then half 1, each on its own stream: `streams` holds a CUDA stream id
// per half on `device` (empty: both on the current stream).
void for_each_half(const std::vector<int64_t>& streams, torch::Device device, const std::function<void(size_t)>& step);

// How a GPT parameter is split across ranks.
enum class ShardKind {
  kReplicated,  // whole on every rank: LayerNorms, the position embedding, row-parallel biases
  kRows,        // dimension 0 in degree pieces: wte, lm_head, c_fc's weight and bias
  kColumns,     // dimension 1 in degree pieces: both c_proj weights (row-parallel layers)
  kQkvRows,     // c_attn: each of q, k and v split by rows (by heads), this rank's three stacked
};

// By the parameter's name in GPTImpl (GPT-2's checkpoint names).
ShardKind shard_kind(const std::string& parameter_name);

// This rank's shard of a whole parameter (a copy).
torch::Tensor take_shard(const torch::Tensor& whole, ShardKind kind, int rank, int degree);

// The whole parameter from every rank's shard (a collective: every rank calls it, in the same
// order); a replicated tensor is returned as it is.
torch::Tensor gather_shards(const torch::Tensor& shard, ShardKind kind, const TensorParallelGroup& group);

// Why `degree` ranks cannot split a GPT of this shape ("" : they can): the heads, the
// vocabulary and, with sequence parallelism, the sequence length must divide by it.
std::string tensor_parallel_obstacle(const GptConfig& config, int degree, int64_t seq_len, bool sequence_parallel);

struct ParallelAttentionImpl : torch::nn::Module {
  ParallelAttentionImpl(const GptConfig& config, TensorParallelGroup group, bool sequence_parallel);
  torch::Tensor forward(const torch::Tensor& x);  // (T or T/w, N, d), as the block's residual
  // The row-parallel projection's partial sums, before they are combined across ranks (forward
  // is their combination plus the bias): the halves' interleaved forward issues the two apart.
  torch::Tensor partial_sums(const torch::Tensor& x);
  torch::Tensor combined(const torch::Tensor& partial_sums);

  TensorParallelGroup group;
  bool sequence_parallel;
  int64_t local_heads, head_width, width;
  torch::nn::Linear c_attn{nullptr}, c_proj{nullptr};
  int64_t sdpa_backend = -1;  // at::SDPBackend of the first forward (-1: none yet)
};
TORCH_MODULE(ParallelAttention);

struct ParallelMlpImpl : torch::nn::Module {
  ParallelMlpImpl(const GptConfig& config, TensorParallelGroup group, bool sequence_parallel);
  torch::Tensor forward(const torch::Tensor& x);
  torch::Tensor partial_sums(const torch::Tensor& x);  // as ParallelAttentionImpl's
  torch::Tensor combined(const torch::Tensor& partial_sums);

  TensorParallelGroup group;
  bool sequence_parallel;
  torch::nn::Linear c_fc{nullptr}, c_proj{nullptr};
};
TORCH_MODULE(ParallelMlp);

struct ParallelBlockImpl : torch::nn::Module {
  ParallelBlockImpl(const GptConfig& config, TensorParallelGroup group, bool sequence_parallel);
  torch::Tensor forward(torch::Tensor x);

  torch::nn::LayerNorm ln_1{nullptr}, ln_2{nullptr};
  ParallelAttention attn{nullptr};
  ParallelMlp mlp{nullptr};
};
TORCH_MODULE(ParallelBlock);

// One rank's part of a GPT: its parameters carry GPTImpl's names in GPTImpl's order, each this
// rank's shard (shard_kind), so that its parameters line up one to one with the whole model's.
// forward takes the whole batch's tokens (N, T) and returns this rank's vocabulary columns of
// the logits, sequence-first: (T, N, V/w).
class TensorParallelGptImpl : public torch::nn::Module, public StagedModel {
 public:
  // Shards of `whole`'s current parameters, on the CPU (move the module where it trains).
  TensorParallelGptImpl(GPTImpl& whole, TensorParallelGroup group, bool sequence_parallel);

  std::string name() const override { return config_.name; }
  std::vector<Stage> build_stages() override;
  torch::nn::Module& module() override { return *this; }
  torch::Tensor forward(torch::Tensor tokens) override;

  // The forward of the batch's tokens (N, T) cut into two halves of N/2 sequences, each on its own
  // stream (`streams`, a CUDA stream id per half; empty off GPUs: both on the current one), their
  // operations issued alternately, one collective of each at a time: while one half's
  // collective runs, the other half's compute between its own collectives can. Returns each
  // half's vocabulary columns of its logits, sequence-first (T, N/2, V/w). Not with checkpointing.
  std::vector<torch::Tensor> forward_halves(const torch::Tensor& tokens, const std::vector<int64_t>& streams);
  torch::Tensor data_parallel_forward(const torch::Tensor& input, const std::vector<torch::Device>& devices) override;
  std::map<std::string, std::string> forward_facts() const override;

  // After backward, with sequence parallelism: each rank's LayerNorms, row-parallel biases and
  // position embedding saw only its slice of the sequence, so their gradients are summed across
  // ranks (one all-reduce per dtype), as Megatron does. Nothing without it: those gradients are
  // then the same on every rank by construction.
  void finish_gradients();

  const GptConfig& config() const { return config_; }
  bool sequence_parallel() const { return sequence_parallel_; }

  torch::nn::Embedding wte{nullptr}, wpe{nullptr};
  torch::nn::ModuleList h{nullptr};
  torch::nn::LayerNorm ln_f{nullptr};
  torch::nn::Linear lm_head{nullptr};

 private:
  torch::Tensor embed(const torch::Tensor& tokens);

  GptConfig config_;
  TensorParallelGroup group_;
  bool sequence_parallel_;
  std::vector<ParallelBlock> blocks_;
  std::vector<torch::Tensor> sequence_split_;  // sequence parallel: the replicated parameters
};

}  // namespace parbench
