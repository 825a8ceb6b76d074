// The GPT family's tensor-parallel plan (Megatron-style, models/tensor_parallel/layers.h):
// its linear layers hold this rank's shards, QKV and the MLP's fc column-parallel (the
// attention's heads split across ranks), both out projections row-parallel, the token embedding
// and the LM head split by vocabulary, LayerNorms and the position embedding whole. Registered as
// the GPT family's plan (models/tensor_parallel/plan.h).
#pragma once

#include "models/gpt.h"
#include "models/staged_model.h"
#include "models/tensor_parallel/layers.h"
#include "models/tensor_parallel/plan.h"

#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace parbench {

// By the parameter's name in GPTImpl (GPT-2's checkpoint names).
ShardKind gpt_shard_kind(const std::string& parameter_name);

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
class TensorParallelGptImpl : public torch::nn::Module, public TensorParallelModel {
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
  std::vector<torch::Tensor> forward_halves(const torch::Tensor& tokens, const std::vector<int64_t>& streams) override;
  torch::Tensor data_parallel_forward(const torch::Tensor& input, const std::vector<torch::Device>& devices) override;
  std::map<std::string, std::string> forward_facts() const override;

  // After backward, with sequence parallelism: each rank's LayerNorms, row-parallel biases and
  // position embedding saw only its slice of the sequence, so their gradients are summed across
  // ranks (one all-reduce per dtype), as Megatron does. Nothing without it: those gradients are
  // then the same on every rank by construction.
  void finish_gradients() override;
  // The parameters finish_gradients sums (sequence parallelism's replicated ones; else none).
  const std::vector<torch::Tensor>& partial_gradient_parameters() const override { return sequence_split_; }
  std::vector<ShardKind> shard_kinds() override;
  bool has_halves() const override { return true; }

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
