// The Llama family's tensor-parallel plan (Megatron's, as torchtitan's parallelize for Llama 3
// applies it): q, k and v column-parallel by heads (each rank holds heads/degree query heads and
// kv_heads/degree kv heads, so a rank's query heads read its own kv heads), the SwiGLU's w1 and
// w3 column-parallel, o_proj and w2 (down_proj) row-parallel, the token embedding and the output
// head split by vocabulary, the RMSNorms whole. With sequence parallelism the norms and residual
// adds run on 1/degree of the sequence; the rotary embedding always sees the whole sequence (the
// column-parallel layers gather it first), so every token keeps its absolute position.
// Activations run sequence-first, (T, N, d), as the GPT's plan runs them.
#pragma once

#include "models/llama.h"
#include "models/staged_model.h"
#include "models/tensor_parallel/layers.h"
#include "models/tensor_parallel/plan.h"

#include <torch/torch.h>

#include <string>
#include <vector>

namespace parbench {

// How a Llama parameter is split across ranks, by its name (Hugging Face's).
ShardKind llama_shard_kind(const std::string& parameter_name);

// Why `degree` ranks cannot split this Llama ("" : they can): the heads, the kv heads, the
// feed-forward width and the vocabulary must divide by it, and with sequence parallelism the
// sequence length.
std::string llama_tensor_parallel_obstacle(const LlamaConfig& config, int degree, int64_t seq_len,
                                           bool sequence_parallel);

// One rank's part of a Llama: its parameters carry LlamaImpl's names in LlamaImpl's order, each
// this rank's shard, so that they line up one to one with the whole model's. forward takes the
// whole batch's tokens (N, T) and returns this rank's vocabulary columns of the logits,
// sequence-first: (T, N, V/w).
class TensorParallelLlamaImpl : public torch::nn::Module, public TensorParallelModel {
 public:
  // Shards of `whole`'s current parameters, on the CPU (move the module where it trains).
  TensorParallelLlamaImpl(LlamaImpl& whole, TensorParallelGroup group, bool sequence_parallel);

  std::string name() const override { return config_.name; }
  std::vector<Stage> build_stages() override;
  torch::nn::Module& module() override { return *this; }
  torch::Tensor forward(torch::Tensor tokens) override;
  std::map<std::string, std::string> forward_facts() const override;

  // After backward, with sequence parallelism: the norms' gradients summed across ranks.
  void finish_gradients() override;
  const std::vector<torch::Tensor>& partial_gradient_parameters() const override { return sequence_split_; }
  std::vector<ShardKind> shard_kinds() override;

  LlamaBody model{nullptr};      // this rank's shards, under the whole model's names
  LlamaLinear lm_head{nullptr};  // null where the head is the embedding's weight

 private:
  torch::Tensor embed(const torch::Tensor& tokens);
  torch::Tensor block(LlamaBlock& layer, torch::Tensor x);
  torch::Tensor head(const torch::Tensor& x);

  LlamaConfig config_;  // the whole model's
  TensorParallelGroup group_;
  bool sequence_parallel_;
  int64_t sdpa_backend_ = -1;
  std::vector<torch::Tensor> sequence_split_;
};

}  // namespace parbench
