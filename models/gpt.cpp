#include "models/gpt.h"

#include "models/model_traits.h"
#include "models/attention_backend.h"
#include "models/model_zoo.h"

#include <ATen/ops/_fused_sdp_choice.h>
#include <ATen/ops/scaled_dot_product_attention.h>

#include <cmath>

namespace parbench {
namespace {

// GPT-2's 50257 tokens, padded to a multiple of 64.
constexpr int64_t kPaddedVocabulary = 50304;

// `layer` over the last dimension of `x`, applied to x as a matrix of rows: at::linear fuses the
// bias into the matrix product (addmm) for 2-D inputs only; on (N, T, d) it ran as a matmul and
// then a broadcast bias add, 12% of gpt2-medium's bf16 step on an H100.
torch::Tensor rows_linear(torch::nn::Linear& layer, const torch::Tensor& x) {
  auto sizes = x.sizes().vec();
  const auto rows = layer(x.reshape({-1, sizes.back()}));
  sizes.back() = rows.size(1);
  return rows.view(sizes);
}

}  // namespace

const std::vector<GptConfig>& gpt_configs() {
  static const std::vector<GptConfig> configs = {
      {"gpt2-small", 12, 768, 12, kPaddedVocabulary, 1024},
      {"gpt2-medium", 24, 1024, 16, kPaddedVocabulary, 1024},
      {"gpt2-large", 36, 1280, 20, kPaddedVocabulary, 1024},
      // Shapes that do not fit one GPU's model states under AdamW in fp32 (16 bytes a parameter)
      // beside their activations, for the sharded strategies: GPT-2's largest, and GPT-3's 2.7B and
      // 6.7B (their context of 2048).
      {"gpt2-xl", 48, 1600, 25, kPaddedVocabulary, 1024},
      {"gpt-2.7b", 32, 2560, 32, kPaddedVocabulary, 2048},
      {"gpt-6.7b", 32, 4096, 32, kPaddedVocabulary, 2048},
      {"tinygpt", 2, 32, 4, 96, 1024},
  };
  return configs;
}

const GptConfig* find_gpt_config(const std::string& name) {
  for (const auto& config : gpt_configs()) {
    if (config.name == name) return &config;
  }
  return nullptr;
}

double gpt_non_embedding_params(const GptConfig& config) {
  const double d = static_cast<double>(config.width);
  return static_cast<double>(config.layers) * (12 * d * d + 13 * d) + 2 * d + static_cast<double>(config.vocabulary) * d;
}

std::vector<std::string> gpt_stage_names(const GptConfig& config) {
  std::vector<std::string> names = {"embed"};
  for (int64_t layer = 0; layer < config.layers; ++layer) names.push_back("h." + std::to_string(layer));
  names.push_back("head");
  return names;
}

CausalSelfAttentionImpl::CausalSelfAttentionImpl(int64_t width, int64_t heads) : width(width), heads(heads) {
  TORCH_CHECK(width % heads == 0, "the width ", width, " does not divide into ", heads, " heads");
  reset();
}

void CausalSelfAttentionImpl::reset() {
  c_attn = register_module("c_attn", torch::nn::Linear(width, 3 * width));
  c_proj = register_module("c_proj", torch::nn::Linear(width, width));
}

torch::Tensor CausalSelfAttentionImpl::forward(const torch::Tensor& x) {
  const auto batch = x.size(0), tokens = x.size(1);
  const auto qkv = rows_linear(c_attn, x).split(width, /*dim=*/2);
  const auto as_heads = [&](const torch::Tensor& t) { return t.view({batch, tokens, heads, width / heads}).transpose(1, 2); };
  const auto q = as_heads(qkv[0]), k = as_heads(qkv[1]), v = as_heads(qkv[2]);
  // Asked once: the choice depends on the device, dtype and shapes, which stay for a case.
  if (sdpa_backend < 0) sdpa_backend = at::_fused_sdp_choice(q, k, v, {}, 0.0, /*is_causal=*/true);
  const auto y = at::scaled_dot_product_attention(q, k, v, {}, 0.0, /*is_causal=*/true);
  return rows_linear(c_proj, y.transpose(1, 2).reshape({batch, tokens, width}));
}

MlpImpl::MlpImpl(int64_t width) : width(width) { reset(); }

void MlpImpl::reset() {
  c_fc = register_module("c_fc", torch::nn::Linear(width, 4 * width));
  c_proj = register_module("c_proj", torch::nn::Linear(4 * width, width));
}

torch::Tensor MlpImpl::forward(const torch::Tensor& x) {
  return rows_linear(c_proj, torch::gelu(rows_linear(c_fc, x), "tanh"));
}

GptBlockImpl::GptBlockImpl(int64_t width, int64_t heads) : width(width), heads(heads) { reset(); }

void GptBlockImpl::reset() {
  ln_1 = register_module("ln_1", torch::nn::LayerNorm(torch::nn::LayerNormOptions({width})));
  attn = register_module("attn", CausalSelfAttention(width, heads));
  ln_2 = register_module("ln_2", torch::nn::LayerNorm(torch::nn::LayerNormOptions({width})));
  mlp = register_module("mlp", Mlp(width));
}

torch::Tensor GptBlockImpl::forward(torch::Tensor x) {
  x = x + attn(ln_1(x));
  return x + mlp(ln_2(x));
}

GPTImpl::GPTImpl(GptConfig config, bool initialise, torch::Device device)
    : config_(std::move(config)), device_(device) {
  reset();
  if (initialise) initialize_like_gpt2();
}

std::shared_ptr<GPTImpl> GPTImpl::same_architecture() const {
  // On the CPU, as before: a copy's weights are overwritten, and clone() then moves it to its
  // device (data_parallel's clone variant makes one per replica every step).
  return std::make_shared<GPTImpl>(config_, /*initialise=*/false);
}

void GPTImpl::reset() {
  const auto d = config_.width;
  // Each piece to the device as soon as it is made: gpt-6.7b is 27 GB in fp32, one block 0.8 GB.
  wte = register_module("wte", torch::nn::Embedding(config_.vocabulary, d));
  wte->to(device_);
  wpe = register_module("wpe", torch::nn::Embedding(config_.context, d));
  wpe->to(device_);
  h = register_module("h", torch::nn::ModuleList());
  blocks_.clear();
  for (int64_t layer = 0; layer < config_.layers; ++layer) {
    blocks_.emplace_back(d, config_.heads);
    blocks_.back()->to(device_);
    h->push_back(blocks_.back());
  }
  ln_f = register_module("ln_f", torch::nn::LayerNorm(torch::nn::LayerNormOptions({d})));
  ln_f->to(device_);
  lm_head = register_module("lm_head", torch::nn::Linear(torch::nn::LinearOptions(d, config_.vocabulary).bias(false)));
  lm_head->to(device_);
}

// GPT-2's: weights ~ N(0, 0.02), biases 0, the projections into the residual stream scaled by
// 1/sqrt(2 L); LayerNorms keep weight 1 and bias 0. Drawn from the CPU's generator whatever the
// device, one weight at a time, so that a model built on a GPU has the weights it has on the CPU.
void GPTImpl::initialize_like_gpt2() {
  torch::NoGradGuard no_grad;
  const double residual_std = 0.02 / std::sqrt(2.0 * static_cast<double>(config_.layers));
  for (const auto& item : named_parameters()) {
    const auto& name = item.key();
    auto parameter = item.value();
    if (name.find("ln_") != std::string::npos) continue;
    if (parameter.dim() == 1) {
      parameter.zero_();
    } else {
      const bool into_residual = name.size() > 13 && name.compare(name.size() - 13, 13, "c_proj.weight") == 0;
      const double std = into_residual ? residual_std : 0.02;
      if (parameter.is_cpu()) {
        parameter.normal_(0.0, std);
      } else {
        parameter.copy_(torch::empty(parameter.sizes(), parameter.options().device(torch::kCPU)).normal_(0.0, std));
      }
    }
  }
}

std::vector<Stage> GPTImpl::build_stages() {
  std::vector<Stage> stages;
  stages.push_back({"embed", {wte.ptr(), wpe.ptr()}, [this](const torch::Tensor& tokens) {
                      const auto positions = torch::arange(tokens.size(1), tokens.options());
                      return wte(tokens) + wpe(positions);
                    }});
  const auto names = gpt_stage_names(config_);
  for (size_t layer = 0; layer < blocks_.size(); ++layer) {
    auto block = blocks_[layer];
    stages.push_back({names[layer + 1], {block.ptr()}, [block](const torch::Tensor& x) mutable { return block(x); },
                      /*block=*/true});
  }
  stages.push_back({"head", {ln_f.ptr(), lm_head.ptr()}, [this](const torch::Tensor& x) { return lm_head(ln_f(x)); }});
  return stages;
}

double gpt_forward_flops_per_sample(const GptConfig& config, int64_t seq_len) {
  const double tokens = static_cast<double>(seq_len);
  const double attention = 4.0 * static_cast<double>(config.layers) * static_cast<double>(config.width) * tokens;
  return tokens * (2.0 * gpt_non_embedding_params(config) + attention);
}

std::map<std::string, std::string> GPTImpl::forward_facts() const {
  if (blocks_.empty() || blocks_.front()->attn->sdpa_backend < 0) return {};
  return {{"attention", sdpa_backend_name(blocks_.front()->attn->sdpa_backend)}};
}

namespace {

// Each configuration, listed after the image models. Its samples are token sequences up to its
// context; its next-token loss has its vocabulary for classes (fit_config_to_model).
std::vector<ModelInfo> gpt_models() {
  std::vector<ModelInfo> models;
  int position = 30;
  for (const auto& config : gpt_configs()) {
    declare_transformer_shape(config.name, {gpt_non_embedding_params(config), config.layers, config.heads,
                                            config.width / config.heads});
    models.push_back(ModelInfo::named(config.name)
                         .listed_at(position++)
                         .takes_tokens(config.vocabulary, config.context)
                         .with_stages(gpt_stage_names(config))
                         .with_forward_flops([config](int64_t seq_len, int64_t /*num_classes*/) {
                           return gpt_forward_flops_per_sample(config, seq_len);
                         })
                         // Linear layers and attention's products: cuBLAS's TF32 switch decides them.
                         .fp32_runs_on(Fp32Engine::kCublasMatmul)
                         .built_by([config](int64_t /*num_classes*/, torch::Device device) -> ModelPtr {
                           return std::make_shared<GPTImpl>(config, /*initialise=*/true, device);
                         }));
  }
  return models;
}

PARBENCH_REGISTER_MODEL(gpt_models());

}  // namespace
}  // namespace parbench
