// The pieces every model's tensor-parallel plan is built from (Megatron-LM's, Shoeybi et al. 2019,
// and Korthikanti et al. 2022 for sequence parallelism):
// - the collectives as autograd functions around c10d (never torch's _c10d_functional_autograd,
//   whose C++ implementations PyTorch removed): Megatron's f (identity forward, all-reduce
//   backward) and g (all-reduce forward, identity backward), and for sequence parallelism the
//   all-gather whose backward is a reduce-scatter and the reduce-scatter whose backward is an
//   all-gather;
// - column-parallel and row-parallel layers, the shards of a parameter and their gathering;
// - a cross-entropy over vocabulary-split logits that never gathers them.
// Activations run sequence-first, (T, N, d), as Megatron's do: sequence shards are then
// contiguous slices of the first dimension, which c10d's all-gather and reduce-scatter
// concatenate along. Each model's plan (models/tensor_parallel/gpt.h, llama.h) assembles its layers from these.
#pragma once

#include "core/collective_clock.h"

#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/torch.h>

#include <cstdint>
#include <functional>
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

// A column-parallel linear layer on x (Megatron's ColumnParallelLinear, with its backward's
// collective overlapping the weight gradient): every rank's rows of `weight` (and `bias`, where
// defined) applied to the whole input (sequence parallel: x is this rank's sequence shard,
// all-gathered first). Under autocast the input is cast first, so that the collectives move
// bf16.
torch::Tensor column_parallel(torch::Tensor x, const torch::Tensor& weight, const torch::Tensor& bias,
                              const TensorParallelGroup& group, bool sequence_parallel);
// A linear layer without bias on x as a matrix of rows (a row-parallel layer's partial sums).
torch::Tensor rows_linear(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias = {});
// Out of a row-parallel layer: its partial sums combined (sequence parallel: this rank's shard of them).
torch::Tensor leave_parallel_region(const torch::Tensor& x, const TensorParallelGroup& group, bool sequence_parallel);

// How a parameter is split across ranks (each model's plan says which of its parameters is which).
enum class ShardKind {
  kReplicated,  // whole on every rank: LayerNorms, the position embedding, row-parallel biases
  kRows,        // dimension 0 in degree pieces: wte, lm_head, c_fc's weight and bias
  kColumns,     // dimension 1 in degree pieces: both c_proj weights (row-parallel layers)
  kQkvRows,     // c_attn: each of q, k and v split by rows (by heads), this rank's three stacked
};

// This rank's shard of a whole parameter (a copy).
torch::Tensor take_shard(const torch::Tensor& whole, ShardKind kind, int rank, int degree);

// The whole parameter from every rank's shard (a collective: every rank calls it, in the same
// order); a replicated tensor is returned as it is.
torch::Tensor gather_shards(const torch::Tensor& shard, ShardKind kind, const TensorParallelGroup& group);

}  // namespace parbench
