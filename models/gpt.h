// A decoder-only GPT as GPT-2 builds it: token and position embeddings, pre-LayerNorm blocks of
// causal self-attention and a GELU MLP, a final LayerNorm and an LM head. Parameter names are
// GPT-2 checkpoints' (wte, wpe, h.N.ln_1, h.N.attn.c_attn, ..., ln_f, lm_head); the linear
// layers hold their weights as (out, in), transposed from GPT-2's Conv1D. Two differences from
// GPT-2, so that stages own their parameters and the matrices tile well (docs/STRATEGIES.md):
// the head is untied from the token embedding, and the vocabulary is padded from 50257 to 50304
// (a multiple of 64). No dropout: every step does the same work.
#pragma once

#include "models/staged_model.h"

namespace parbench {

struct GptConfig {
  std::string name;
  int64_t layers = 0;
  int64_t width = 0;  // d_model
  int64_t heads = 0;
  int64_t vocabulary = 0;
  int64_t context = 0;  // positions the model has embeddings for: the longest sequence
};

// gpt2-small, gpt2-medium, gpt2-large, gpt2-xl, gpt-2.7b, gpt-6.7b and tinygpt (for CPU tests).
const std::vector<GptConfig>& gpt_configs();

// The configuration of that name, or null.
const GptConfig* find_gpt_config(const std::string& name);

// Parameters other than the token and position embeddings: N in the training FLOPs per token
// 6N + 12 L d T (docs/METRICS.md). Per block 12 d^2 + 13 d, the final LayerNorm 2 d, the
// untied head V d (no bias).
double gpt_non_embedding_params(const GptConfig& config);

// Stage names: embed, h.0 ... h.<layers-1>, head.
std::vector<std::string> gpt_stage_names(const GptConfig& config);

// Per sequence of seq_len tokens: seq_len x (2 N + 4 L d seq_len), a third of the
// (6 N + 12 L d T) per token that training counts (docs/METRICS.md).
double gpt_forward_flops_per_sample(const GptConfig& config, int64_t seq_len);

struct CausalSelfAttentionImpl : torch::nn::Cloneable<CausalSelfAttentionImpl> {
  CausalSelfAttentionImpl(int64_t width, int64_t heads);
  void reset() override;
  torch::Tensor forward(const torch::Tensor& x);

  int64_t width, heads;
  torch::nn::Linear c_attn{nullptr}, c_proj{nullptr};
  // at::SDPBackend that scaled_dot_product_attention chose for the first forward (-1: none yet).
  int64_t sdpa_backend = -1;
};
TORCH_MODULE(CausalSelfAttention);

struct MlpImpl : torch::nn::Cloneable<MlpImpl> {
  explicit MlpImpl(int64_t width);
  void reset() override;
  torch::Tensor forward(const torch::Tensor& x);

  int64_t width;
  torch::nn::Linear c_fc{nullptr}, c_proj{nullptr};
};
TORCH_MODULE(Mlp);

struct GptBlockImpl : torch::nn::Cloneable<GptBlockImpl> {
  GptBlockImpl(int64_t width, int64_t heads);
  void reset() override;
  torch::Tensor forward(torch::Tensor x);

  int64_t width, heads;
  torch::nn::LayerNorm ln_1{nullptr}, ln_2{nullptr};
  CausalSelfAttention attn{nullptr};
  Mlp mlp{nullptr};
};
TORCH_MODULE(GptBlock);

class GPTImpl : public StagedModule<GPTImpl> {
 public:
  // initialise: false skips GPT-2's weight initialisation (for copies whose weights are overwritten).
  // device: where the parameters live. Each piece (an embedding, a block, the head) is moved
  // there as it is made, and each weight drawn on the host one at a time, so a model larger than
  // the host's memory can still be built on a GPU; the weights do not depend on the device.
  explicit GPTImpl(GptConfig config, bool initialise = true, torch::Device device = torch::kCPU);
  void reset() override;
  std::shared_ptr<GPTImpl> same_architecture() const;

  std::string name() const override { return config_.name; }
  const GptConfig& config() const { return config_; }
  std::vector<Stage> build_stages() override;
  // attention=<flash_attention|efficient_attention|cudnn_attention|math>: the kernel
  // scaled_dot_product_attention chose.
  std::map<std::string, std::string> forward_facts() const override;

  torch::nn::Embedding wte{nullptr}, wpe{nullptr};
  torch::nn::ModuleList h{nullptr};
  torch::nn::LayerNorm ln_f{nullptr};
  torch::nn::Linear lm_head{nullptr};

 private:
  void initialize_like_gpt2();

  GptConfig config_;
  torch::Device device_;
  std::vector<GptBlock> blocks_;
};
TORCH_MODULE(GPT);

}  // namespace parbench
