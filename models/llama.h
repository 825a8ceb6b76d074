// Llama-3-style decoders: a token embedding, pre-norm blocks of RMSNorm, grouped-query causal
// self-attention with rotary positions and a SwiGLU feed-forward, a final RMSNorm and an output
// head, untied from the embedding unless the configuration ties them. No biases, no dropout.
// Parameter names are Hugging Face's LlamaForCausalLM's (model.embed_tokens, model.layers.N.
// self_attn.q_proj, ..., mlp.gate_proj/up_proj/down_proj (w1, w3, w2), model.norm, lm_head), so
// its checkpoints load by name; rotary embeddings rotate halves of each head, as that
// implementation does.
#pragma once

#include "models/staged_model.h"

#include <optional>
#include <string>
#include <vector>

namespace parbench {

// Llama 3.1's "llama3" rope_scaling: long wavelengths stretched by `factor`, short ones kept,
// those between blended.
struct Llama3RopeScaling {
  double factor = 8;
  double low_freq_factor = 1;
  double high_freq_factor = 4;
  int64_t original_context = 8192;  // original_max_position_embeddings
};

struct LlamaConfig {
  std::string name;
  int64_t layers = 0;
  int64_t width = 0;  // hidden_size
  int64_t heads = 0;
  int64_t kv_heads = 0;
  int64_t ffn = 0;  // intermediate_size
  int64_t vocabulary = 0;
  int64_t context = 0;   // max_position_embeddings: the longest sequence
  int64_t head_dim = 0;  // 0: width / heads
  double rope_theta = 500000;
  double norm_eps = 1e-5;
  bool tied = false;  // the output head is the token embedding's weight
  std::optional<Llama3RopeScaling> rope_scaling;

  int64_t head_size() const { return head_dim > 0 ? head_dim : width / heads; }
};

// llama3-1b, llama3-3b, llama3-8b, llama3-70b and tinyllama (for CPU tests).
const std::vector<LlamaConfig>& llama_configs();
// The configuration of that name, built in or registered from a config file, or null.
const LlamaConfig* find_llama_config(const std::string& name);

// Why the configuration cannot be built ("" where it can): a size below 1, heads that do not
// divide the width (without a head_dim), kv heads that do not divide the heads.
std::string llama_config_problem(const LlamaConfig& config);

// Every parameter but the token embedding: the blocks, the final norm and an untied head.
double llama_non_embedding_params(const LlamaConfig& config);
// Every parameter.
double llama_params(const LlamaConfig& config);

// Stage names: embed, layers.0 ... layers.<layers-1>, head.
std::vector<std::string> llama_stage_names(const LlamaConfig& config);

// Per sequence of seq_len tokens: seq_len x (2 x the matrices' parameters, the head's included
// tied or not, + 4 x layers x heads x head_dim x seq_len), a third of training's FLOPs
// (docs/METRICS.md).
double llama_forward_flops_per_sample(const LlamaConfig& config, int64_t seq_len);

// The rotary inverse frequencies (head_dim / 2 of them) as Hugging Face computes them, Llama 3.1's
// scaling applied where the configuration has it.
std::vector<double> llama_inverse_frequencies(const LlamaConfig& config);

// Rotary embedding of x (..., tokens, head_dim), its tokens at absolute positions first_position,
// first_position + 1, ...: each feature pair (i, i + head_dim / 2) rotated by position x
// inv_freq[i], angles computed in inv_freq's dtype and applied in x's.
torch::Tensor llama_rotary(const torch::Tensor& x, const torch::Tensor& inv_freq, int64_t first_position);

// Registers `config` in the model registry (models/model_zoo.h) under its name, with its shape and
// any shared weights (models/model_traits.h). Throws std::invalid_argument for a configuration
// llama_config_problem refuses, or a name already taken.
void register_llama_model(const LlamaConfig& config);

// The configuration as a Hugging Face config.json of a LlamaForCausalLM.
std::string llama_config_json(const LlamaConfig& config);

// A weight without a bias, made on `device` and left uninitialised (llama_initialise draws it):
// LibTorch's Linear and Embedding draw their own initialisation on the host first, which for an
// 8B model takes minutes.
struct LlamaLinearImpl : torch::nn::Cloneable<LlamaLinearImpl> {
  LlamaLinearImpl(int64_t in, int64_t out, torch::Device device);
  void reset() override;
  torch::Tensor forward(const torch::Tensor& x);

  int64_t in, out;
  torch::Device device;
  torch::Tensor weight;  // (out, in)
};
TORCH_MODULE(LlamaLinear);

struct LlamaEmbeddingImpl : torch::nn::Cloneable<LlamaEmbeddingImpl> {
  LlamaEmbeddingImpl(int64_t vocabulary, int64_t width, torch::Device device);
  void reset() override;
  torch::Tensor forward(const torch::Tensor& tokens);

  int64_t vocabulary, width;
  torch::Device device;
  torch::Tensor weight;  // (vocabulary, width)
};
TORCH_MODULE(LlamaEmbedding);

struct RmsNormImpl : torch::nn::Cloneable<RmsNormImpl> {
  RmsNormImpl(int64_t width, double eps, torch::Device device);
  void reset() override;
  // Statistics in fp32 (fp64 for fp64 inputs), the result in the input's dtype times the weight.
  torch::Tensor forward(const torch::Tensor& x);

  int64_t width;
  double eps;
  torch::Device device;
  torch::Tensor weight;
};
TORCH_MODULE(RmsNorm);

struct LlamaAttentionImpl : torch::nn::Cloneable<LlamaAttentionImpl> {
  LlamaAttentionImpl(const LlamaConfig& config, torch::Device device);
  void reset() override;
  // x (batch, tokens, width) at absolute positions first_position, first_position + 1, ...: a
  // slice of a sequence keeps its true positions.
  torch::Tensor forward(const torch::Tensor& x, int64_t first_position = 0);

  LlamaConfig config;
  torch::Device device;
  LlamaLinear q_proj{nullptr}, k_proj{nullptr}, v_proj{nullptr}, o_proj{nullptr};
  torch::Tensor inv_freq;  // buffer (head_dim / 2), fp32
  // at::SDPBackend that scaled_dot_product_attention chose for the first forward (-1: none yet).
  int64_t sdpa_backend = -1;
};
TORCH_MODULE(LlamaAttention);

struct LlamaMlpImpl : torch::nn::Cloneable<LlamaMlpImpl> {
  LlamaMlpImpl(int64_t width, int64_t ffn, torch::Device device);
  void reset() override;
  torch::Tensor forward(const torch::Tensor& x);  // down(silu(gate(x)) * up(x)): w2(silu(w1 x) * w3 x)

  int64_t width, ffn;
  torch::Device device;
  LlamaLinear gate_proj{nullptr}, up_proj{nullptr}, down_proj{nullptr};
};
TORCH_MODULE(LlamaMlp);

struct LlamaBlockImpl : torch::nn::Cloneable<LlamaBlockImpl> {
  LlamaBlockImpl(const LlamaConfig& config, torch::Device device);
  void reset() override;
  torch::Tensor forward(torch::Tensor x, int64_t first_position = 0);

  LlamaConfig config;
  torch::Device device;
  RmsNorm input_layernorm{nullptr}, post_attention_layernorm{nullptr};
  LlamaAttention self_attn{nullptr};
  LlamaMlp mlp{nullptr};
};
TORCH_MODULE(LlamaBlock);

// Hugging Face's LlamaModel: the embedding, the blocks and the final norm ("model." in names).
struct LlamaBodyImpl : torch::nn::Cloneable<LlamaBodyImpl> {
  LlamaBodyImpl(const LlamaConfig& config, torch::Device device);
  void reset() override;

  LlamaConfig config;
  torch::Device device;
  LlamaEmbedding embed_tokens{nullptr};
  torch::nn::ModuleList layers{nullptr};
  RmsNorm norm{nullptr};
  std::vector<LlamaBlock> blocks;
};
TORCH_MODULE(LlamaBody);

class LlamaImpl : public StagedModule<LlamaImpl> {
 public:
  // initialise: false leaves the weights as LibTorch made them (for copies whose weights are
  // overwritten). device: where the parameters live; each weight is drawn there, once, by
  // llama_initialise, and has the same value on every device.
  explicit LlamaImpl(LlamaConfig config, bool initialise = true, torch::Device device = torch::kCPU);
  void reset() override;
  std::shared_ptr<LlamaImpl> same_architecture() const;

  std::string name() const override { return config_.name; }
  const LlamaConfig& config() const { return config_; }
  std::vector<Stage> build_stages() override;
  // attention=<flash_attention|efficient_attention|cudnn_attention|math>
  std::map<std::string, std::string> forward_facts() const override;

  // The output head's weight: lm_head's, or the token embedding's where tied.
  torch::Tensor head_weight() const;

  LlamaBody model{nullptr};
  LlamaLinear lm_head{nullptr};  // null where tied

 private:
  LlamaConfig config_;
  torch::Device device_;
};
TORCH_MODULE(Llama);

// Draws every parameter of `module` where it lives: RMSNorm weights 1, the other weights
// ~ N(0, 0.02) (those into the residual stream, o_proj and down_proj, 0.02 / sqrt(2 layers)).
// Each weight is drawn once, from a counter-based generator keyed by `seed` and the parameter's
// name, in integer arithmetic and one correctly rounded scaling, so its values are the same on
// every device, in every process and whatever else was drawn before (approximately normal: the
// Irwin-Hall sum of four uniforms, bounded at 3.46 standard deviations).
void llama_initialise(torch::nn::Module& module, int64_t layers, uint64_t seed);

// `count` values of the generator above for (seed, name), mean 0 and standard deviation `std`,
// as fp32 on `device`.
torch::Tensor seeded_normal(uint64_t seed, const std::string& name, int64_t count, double std, torch::Device device);

}  // namespace parbench
