#include "models/llama.h"

#include "models/model_traits.h"
#include "models/attention_backend.h"
#include "models/model_zoo.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/ops/_fused_sdp_choice.h>
#include <ATen/ops/scaled_dot_product_attention.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <map>
#include <deque>
#include <mutex>
#include <stdexcept>

namespace parbench {
namespace {

constexpr int64_t kLlama3Vocabulary = 128256;
constexpr int64_t kLlama3Context = 131072;

uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

uint64_t fnv1a(const std::string& text) {
  uint64_t hash = 0xcbf29ce484222325ULL;
  for (unsigned char c : text) hash = (hash ^ c) * 0x100000001b3ULL;
  return hash;
}

constexpr int64_t kLow32 = 0xFFFFFFFFLL;

// A 32-bit integer hash of every element of x (int64 holding values below 2^32), in place. The
// multipliers are below 2^31, so no product leaves int64: the same integers on every device.
void mix32(torch::Tensor& x) {
  x.bitwise_xor_(x.bitwise_right_shift(16));
  x.mul_(int64_t{0x7feb352d}).bitwise_and_(kLow32);
  x.bitwise_xor_(x.bitwise_right_shift(15));
  x.mul_(int64_t{0x31848bab}).bitwise_and_(kLow32);
  x.bitwise_xor_(x.bitwise_right_shift(16));
}

bool ends_with(const std::string& text, const std::string& end) {
  return text.size() >= end.size() && text.compare(text.size() - end.size(), end.size(), end) == 0;
}

}  // namespace

const std::vector<LlamaConfig>& llama_configs() {
  static const std::vector<LlamaConfig> configs = [] {
    // The public shapes (Hugging Face's config.json of each): Llama 3.2 1B and 3B tie the head to
    // the embedding and scale rotary positions by 32, Llama 3.1 8B and 70B untie it and scale by 8.
    const auto llama = [](std::string name, int64_t width, int64_t layers, int64_t heads, int64_t kv_heads, int64_t ffn,
                          bool tied, double rope_factor) {
      LlamaConfig config;
      config.name = std::move(name);
      config.width = width;
      config.layers = layers;
      config.heads = heads;
      config.kv_heads = kv_heads;
      config.ffn = ffn;
      config.vocabulary = kLlama3Vocabulary;
      config.context = kLlama3Context;
      config.tied = tied;
      config.rope_scaling = Llama3RopeScaling{rope_factor, 1, 4, 8192};
      return config;
    };
    std::vector<LlamaConfig> all = {
        llama("llama3-1b", 2048, 16, 32, 8, 8192, /*tied=*/true, 32),
        llama("llama3-3b", 3072, 28, 24, 8, 8192, /*tied=*/true, 32),
        llama("llama3-8b", 4096, 32, 32, 8, 14336, /*tied=*/false, 8),
        llama("llama3-70b", 8192, 80, 64, 8, 28672, /*tied=*/false, 8),
    };
    // For CPU tests: grouped-query attention (2 heads per kv head), and a rotary scaling whose
    // original context of 256 puts one frequency in each of its three bands.
    auto tiny = llama("tinyllama", 64, 2, 8, 4, 128, /*tied=*/false, 8);
    tiny.vocabulary = 128;
    tiny.context = 2048;
    tiny.rope_scaling->original_context = 256;
    all.push_back(tiny);
    return all;
  }();
  return configs;
}

namespace {

// The configurations register_llama_model added (--model-config), kept for the model's lifetime:
// a deque, so that the addresses find_llama_config hands out stay valid as more are added.
std::deque<LlamaConfig>& registered_llama_configs() {
  static std::deque<LlamaConfig> configs;
  return configs;
}
std::mutex& registered_llama_configs_mutex() {
  static std::mutex mutex;
  return mutex;
}

}  // namespace

const LlamaConfig* find_llama_config(const std::string& name) {
  for (const auto& config : llama_configs()) {
    if (config.name == name) return &config;
  }
  std::lock_guard<std::mutex> lock(registered_llama_configs_mutex());
  for (const auto& config : registered_llama_configs()) {
    if (config.name == name) return &config;
  }
  return nullptr;
}

std::string llama_config_problem(const LlamaConfig& c) {
  const std::vector<std::pair<const char*, int64_t>> sizes = {
      {"hidden_size", c.width},        {"num_hidden_layers", c.layers}, {"num_attention_heads", c.heads},
      {"num_key_value_heads", c.kv_heads}, {"intermediate_size", c.ffn}, {"vocab_size", c.vocabulary},
      {"max_position_embeddings", c.context}};
  for (const auto& [field, value] : sizes) {
    if (value < 1) return std::string(field) + " is " + std::to_string(value) + " (must be at least 1)";
  }
  if (c.head_dim < 0) return "head_dim is " + std::to_string(c.head_dim) + " (must be at least 1)";
  if (c.head_dim == 0 && c.width % c.heads != 0) {
    return "num_attention_heads " + std::to_string(c.heads) + " does not divide hidden_size " + std::to_string(c.width) +
           " (give head_dim, or heads that divide the width)";
  }
  if (c.head_size() % 2 != 0) return "the head size " + std::to_string(c.head_size()) + " is odd (rotary embeddings rotate pairs)";
  if (c.heads % c.kv_heads != 0) {
    return "num_key_value_heads " + std::to_string(c.kv_heads) + " does not divide num_attention_heads " +
           std::to_string(c.heads) + " (each kv head serves a whole group of query heads)";
  }
  if (!(c.rope_theta > 0)) return "rope_theta must be above 0";
  if (!(c.norm_eps > 0)) return "rms_norm_eps must be above 0";
  if (c.rope_scaling) {
    const auto& s = *c.rope_scaling;
    if (!(s.factor > 0) || !(s.low_freq_factor > 0) || !(s.high_freq_factor > s.low_freq_factor) || s.original_context < 1) {
      return "rope_scaling needs factor > 0, 0 < low_freq_factor < high_freq_factor and "
             "original_max_position_embeddings >= 1";
    }
  }
  return "";
}

namespace {

// The parameters of one block's matrices.
double block_matrix_params(const LlamaConfig& c) {
  const double d = static_cast<double>(c.width), q = static_cast<double>(c.heads * c.head_size()),
               kv = static_cast<double>(c.kv_heads * c.head_size());
  return d * q + 2 * d * kv + q * d + 3 * d * static_cast<double>(c.ffn);
}

}  // namespace

double llama_non_embedding_params(const LlamaConfig& c) {
  const double d = static_cast<double>(c.width);
  return static_cast<double>(c.layers) * (block_matrix_params(c) + 2 * d) + d +
         (c.tied ? 0.0 : static_cast<double>(c.vocabulary) * d);
}

double llama_params(const LlamaConfig& c) {
  return llama_non_embedding_params(c) + static_cast<double>(c.vocabulary) * static_cast<double>(c.width);
}

std::vector<std::string> llama_stage_names(const LlamaConfig& config) {
  std::vector<std::string> names = {"embed"};
  for (int64_t layer = 0; layer < config.layers; ++layer) names.push_back("layers." + std::to_string(layer));
  names.push_back("head");
  return names;
}

double llama_forward_flops_per_sample(const LlamaConfig& c, int64_t seq_len) {
  const double tokens = static_cast<double>(seq_len);
  const double head = c.tied ? static_cast<double>(c.vocabulary) * static_cast<double>(c.width) : 0.0;
  const double attention = 4.0 * static_cast<double>(c.layers) * static_cast<double>(c.heads * c.head_size()) * tokens;
  return tokens * (2.0 * (llama_non_embedding_params(c) + head) + attention);
}

std::vector<double> llama_inverse_frequencies(const LlamaConfig& c) {
  const int64_t dim = c.head_size();
  std::vector<double> inverse;
  for (int64_t i = 0; i < dim; i += 2) {
    // As Hugging Face: theta ** (i / dim) in fp32 arithmetic's order.
    inverse.push_back(1.0 / std::pow(c.rope_theta, static_cast<double>(i) / static_cast<double>(dim)));
  }
  if (!c.rope_scaling) return inverse;
  const auto& s = *c.rope_scaling;
  const double original = static_cast<double>(s.original_context);
  const double low_freq_wavelen = original / s.low_freq_factor, high_freq_wavelen = original / s.high_freq_factor;
  for (auto& frequency : inverse) {
    const double wavelen = 2 * M_PI / frequency;
    if (wavelen > low_freq_wavelen) {
      frequency /= s.factor;
    } else if (wavelen >= high_freq_wavelen) {
      const double smooth = (original / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
      frequency = (1 - smooth) * frequency / s.factor + smooth * frequency;
    }
  }
  return inverse;
}

torch::Tensor seeded_normal(uint64_t seed, const std::string& name, int64_t count, double std, torch::Device device) {
  TORCH_CHECK(count < (int64_t{1} << 32), "seeded_normal draws at most 2^32 values per tensor, asked for ", count);
  // Four keys per tensor, one per uniform of the sum.
  uint64_t state = seed ^ fnv1a(name);
  int64_t keys[4][2];
  for (auto& key : keys) {
    const uint64_t value = splitmix64(state);
    key[0] = static_cast<int64_t>(value & 0xFFFFFFFFULL);
    key[1] = static_cast<int64_t>(value >> 32);
  }
  // Each uniform is 24 bits, 0 .. 2^24 - 1: the sum of four has mean 2 (2^24 - 1) and variance
  // 4 ((2^24)^2 - 1) / 12.
  const double span = 16777216.0;
  const double mean = 2 * (span - 1), deviation = std::sqrt((span * span - 1) / 3);
  const double scale = std / deviation;
  auto result = torch::empty({count}, torch::TensorOptions().dtype(torch::kFloat).device(device));
  constexpr int64_t kChunk = int64_t{1} << 24;
  const auto integers = torch::TensorOptions().dtype(torch::kLong).device(device);
  for (int64_t start = 0; start < count; start += kChunk) {
    const int64_t n = std::min(kChunk, count - start);
    const auto index = torch::arange(start, start + n, integers);
    auto sum = torch::zeros({n}, integers);
    for (const auto& key : keys) {
      auto u = index.bitwise_xor(key[0]);
      mix32(u);
      u.bitwise_xor_(key[1]);
      mix32(u);
      sum.add_(u.bitwise_right_shift(8));
    }
    // Exact integers in double, one correctly rounded product, then rounded to fp32: the same
    // bits on a CPU and a GPU.
    result.slice(0, start, start + n).copy_(((sum.to(torch::kDouble) - mean) * scale).to(torch::kFloat));
  }
  return result;
}

void llama_initialise(torch::nn::Module& module, int64_t layers, uint64_t seed) {
  torch::NoGradGuard no_grad;
  const double residual_std = 0.02 / std::sqrt(2.0 * static_cast<double>(layers));
  for (const auto& item : module.named_parameters()) {
    const auto& name = item.key();
    auto parameter = item.value();
    if (ends_with(name, "norm.weight")) {
      parameter.fill_(1.0);
      continue;
    }
    const bool into_residual = ends_with(name, "o_proj.weight") || ends_with(name, "down_proj.weight");
    const auto values = seeded_normal(seed, name, parameter.numel(), into_residual ? residual_std : 0.02, parameter.device());
    parameter.copy_(values.view(parameter.sizes()));
  }
}

LlamaLinearImpl::LlamaLinearImpl(int64_t in, int64_t out, torch::Device device) : in(in), out(out), device(device) {
  reset();
}

void LlamaLinearImpl::reset() {
  weight = register_parameter("weight", torch::empty({out, in}, torch::TensorOptions().device(device)));
}

torch::Tensor LlamaLinearImpl::forward(const torch::Tensor& x) { return torch::nn::functional::linear(x, weight); }

LlamaEmbeddingImpl::LlamaEmbeddingImpl(int64_t vocabulary, int64_t width, torch::Device device)
    : vocabulary(vocabulary), width(width), device(device) {
  reset();
}

void LlamaEmbeddingImpl::reset() {
  weight = register_parameter("weight", torch::empty({vocabulary, width}, torch::TensorOptions().device(device)));
}

torch::Tensor LlamaEmbeddingImpl::forward(const torch::Tensor& tokens) { return torch::embedding(weight, tokens); }

RmsNormImpl::RmsNormImpl(int64_t width, double eps, torch::Device device) : width(width), eps(eps), device(device) {
  reset();
}

void RmsNormImpl::reset() { weight = register_parameter("weight", torch::ones({width}, torch::TensorOptions().device(device))); }

torch::Tensor RmsNormImpl::forward(const torch::Tensor& x) {
  const auto statistics_dtype = x.scalar_type() == torch::kDouble ? torch::kDouble : torch::kFloat;
  const auto h = x.to(statistics_dtype);
  const auto normalised = h * torch::rsqrt(h.pow(2).mean(-1, /*keepdim=*/true) + eps);
  return weight * normalised.to(x.scalar_type());
}

LlamaAttentionImpl::LlamaAttentionImpl(const LlamaConfig& config, torch::Device device) : config(config), device(device) {
  reset();
}

void LlamaAttentionImpl::reset() {
  const auto d = config.width, hd = config.head_size();
  q_proj = register_module("q_proj", LlamaLinear(d, config.heads * hd, device));
  k_proj = register_module("k_proj", LlamaLinear(d, config.kv_heads * hd, device));
  v_proj = register_module("v_proj", LlamaLinear(d, config.kv_heads * hd, device));
  o_proj = register_module("o_proj", LlamaLinear(config.heads * hd, d, device));
  const auto frequencies = llama_inverse_frequencies(config);
  inv_freq = register_buffer("inv_freq", torch::tensor(frequencies, torch::kDouble).to(torch::kFloat).to(device));
}

namespace {

// The second half of each head's features, negated, before the first: Hugging Face's rotation.
torch::Tensor rotate_half(const torch::Tensor& x) {
  const auto half = x.size(-1) / 2;
  return torch::cat({-x.slice(-1, half), x.slice(-1, 0, half)}, -1);
}

}  // namespace

torch::Tensor llama_rotary(const torch::Tensor& x, const torch::Tensor& inv_freq, int64_t first_position) {
  const auto tokens = x.size(-2);
  // Angles at the tokens' absolute positions, in fp32 (fp64 for an fp64 model), as Hugging Face's.
  const auto positions = torch::arange(first_position, first_position + tokens,
                                       torch::TensorOptions().dtype(inv_freq.scalar_type()).device(x.device()));
  const auto angles = positions.unsqueeze(1) * inv_freq.unsqueeze(0);
  const auto both = torch::cat({angles, angles}, -1);  // (tokens, head_dim)
  return x * both.cos().to(x.scalar_type()) + rotate_half(x) * both.sin().to(x.scalar_type());
}

torch::Tensor LlamaAttentionImpl::forward(const torch::Tensor& x, int64_t first_position) {
  const auto batch = x.size(0), tokens = x.size(1), hd = config.head_size();
  auto q = q_proj(x).view({batch, tokens, config.heads, hd}).transpose(1, 2);
  auto k = k_proj(x).view({batch, tokens, config.kv_heads, hd}).transpose(1, 2);
  const auto v = v_proj(x).view({batch, tokens, config.kv_heads, hd}).transpose(1, 2);
  q = llama_rotary(q, inv_freq, first_position);
  k = llama_rotary(k, inv_freq, first_position);
  const bool grouped = config.kv_heads != config.heads;
  // Asked once: the choice depends on the device, dtype and shapes, which stay for a case.
  if (sdpa_backend < 0) {
    sdpa_backend = at::_fused_sdp_choice(q, k, v, {}, 0.0, /*is_causal=*/true, std::nullopt, /*enable_gqa=*/grouped);
  }
  const auto y = at::scaled_dot_product_attention(q, k, v, {}, 0.0, /*is_causal=*/true, std::nullopt,
                                                  /*enable_gqa=*/grouped);
  return o_proj(y.transpose(1, 2).reshape({batch, tokens, config.heads * hd}));
}

LlamaMlpImpl::LlamaMlpImpl(int64_t width, int64_t ffn, torch::Device device) : width(width), ffn(ffn), device(device) {
  reset();
}

void LlamaMlpImpl::reset() {
  gate_proj = register_module("gate_proj", LlamaLinear(width, ffn, device));
  up_proj = register_module("up_proj", LlamaLinear(width, ffn, device));
  down_proj = register_module("down_proj", LlamaLinear(ffn, width, device));
}

torch::Tensor LlamaMlpImpl::forward(const torch::Tensor& x) { return down_proj(torch::silu(gate_proj(x)) * up_proj(x)); }

LlamaBlockImpl::LlamaBlockImpl(const LlamaConfig& config, torch::Device device) : config(config), device(device) {
  reset();
}

void LlamaBlockImpl::reset() {
  input_layernorm = register_module("input_layernorm", RmsNorm(config.width, config.norm_eps, device));
  self_attn = register_module("self_attn", LlamaAttention(config, device));
  post_attention_layernorm = register_module("post_attention_layernorm", RmsNorm(config.width, config.norm_eps, device));
  mlp = register_module("mlp", LlamaMlp(config.width, config.ffn, device));
}

torch::Tensor LlamaBlockImpl::forward(torch::Tensor x, int64_t first_position) {
  x = x + self_attn(input_layernorm(x), first_position);
  return x + mlp(post_attention_layernorm(x));
}

LlamaBodyImpl::LlamaBodyImpl(const LlamaConfig& config, torch::Device device) : config(config), device(device) {
  reset();
}

void LlamaBodyImpl::reset() {
  embed_tokens = register_module("embed_tokens", LlamaEmbedding(config.vocabulary, config.width, device));
  layers = register_module("layers", torch::nn::ModuleList());
  blocks.clear();
  for (int64_t layer = 0; layer < config.layers; ++layer) {
    blocks.emplace_back(config, device);
    layers->push_back(blocks.back());
  }
  norm = register_module("norm", RmsNorm(config.width, config.norm_eps, device));
}

LlamaImpl::LlamaImpl(LlamaConfig config, bool initialise, torch::Device device)
    : config_(std::move(config)), device_(device) {
  const auto problem = llama_config_problem(config_);
  if (!problem.empty()) throw std::invalid_argument(config_.name + ": " + problem);
  reset();
  // The seed torch::manual_seed last set: the weights depend on it and the parameters' names alone.
  if (initialise) llama_initialise(*this, config_.layers, at::detail::getDefaultCPUGenerator().current_seed());
}

std::shared_ptr<LlamaImpl> LlamaImpl::same_architecture() const {
  // On the CPU, uninitialised: a copy's weights are overwritten, and clone() then moves it.
  return std::make_shared<LlamaImpl>(config_, /*initialise=*/false);
}

void LlamaImpl::reset() {
  model = register_module("model", LlamaBody(config_, device_));
  if (!config_.tied) lm_head = register_module("lm_head", LlamaLinear(config_.width, config_.vocabulary, device_));
}

torch::Tensor LlamaImpl::head_weight() const { return config_.tied ? model->embed_tokens->weight : lm_head->weight; }

std::vector<Stage> LlamaImpl::build_stages() {
  std::vector<Stage> stages;
  auto embed = model->embed_tokens;
  stages.push_back({"embed", {embed.ptr()}, [embed](const torch::Tensor& tokens) mutable { return embed(tokens); }});
  const auto names = llama_stage_names(config_);
  for (size_t layer = 0; layer < model->blocks.size(); ++layer) {
    auto block = model->blocks[layer];
    stages.push_back({names[layer + 1], {block.ptr()}, [block](const torch::Tensor& x) mutable { return block(x); },
                      /*block=*/true});
  }
  auto norm = model->norm;
  if (config_.tied) {
    // The head reads the embedding's weight: the two stages share it (models/model_traits.h).
    stages.push_back({"head", {norm.ptr()}, [this, norm](const torch::Tensor& x) mutable {
                        return torch::nn::functional::linear(norm(x), model->embed_tokens->weight);
                      }});
  } else {
    auto head = lm_head;
    stages.push_back({"head", {norm.ptr(), head.ptr()}, [norm, head](const torch::Tensor& x) mutable { return head(norm(x)); }});
  }
  return stages;
}

std::map<std::string, std::string> LlamaImpl::forward_facts() const {
  if (model->blocks.empty() || model->blocks.front()->self_attn->sdpa_backend < 0) return {};
  return {{"attention", sdpa_backend_name(model->blocks.front()->self_attn->sdpa_backend)}};
}

std::string llama_config_json(const LlamaConfig& c) {
  nlohmann::ordered_json json;
  json["architectures"] = {"LlamaForCausalLM"};
  json["model_type"] = "llama";
  json["hidden_size"] = c.width;
  json["intermediate_size"] = c.ffn;
  json["num_hidden_layers"] = c.layers;
  json["num_attention_heads"] = c.heads;
  json["num_key_value_heads"] = c.kv_heads;
  json["head_dim"] = c.head_size();
  json["vocab_size"] = c.vocabulary;
  json["max_position_embeddings"] = c.context;
  json["rope_theta"] = c.rope_theta;
  json["rms_norm_eps"] = c.norm_eps;
  json["tie_word_embeddings"] = c.tied;
  json["hidden_act"] = "silu";
  json["attention_bias"] = false;
  json["mlp_bias"] = false;
  if (c.rope_scaling) {
    json["rope_scaling"] = {{"rope_type", "llama3"},
                            {"factor", c.rope_scaling->factor},
                            {"low_freq_factor", c.rope_scaling->low_freq_factor},
                            {"high_freq_factor", c.rope_scaling->high_freq_factor},
                            {"original_max_position_embeddings", c.rope_scaling->original_context}};
  } else {
    json["rope_scaling"] = nullptr;
  }
  return json.dump(2);
}

namespace {

ModelInfo llama_model_info(const LlamaConfig& config, int position) {
  return ModelInfo::named(config.name)
      .listed_at(position)
      .takes_tokens(config.vocabulary, config.context)
      .with_stages(llama_stage_names(config))
      .with_forward_flops([config](int64_t seq_len, int64_t /*num_classes*/) {
        return llama_forward_flops_per_sample(config, seq_len);
      })
      .fp32_runs_on(Fp32Engine::kCublasMatmul)
      .built_by([config](int64_t /*num_classes*/, torch::Device device) -> ModelPtr {
        return std::make_shared<LlamaImpl>(config, /*initialise=*/true, device);
      });
}

void declare_traits(const LlamaConfig& config) {
  declare_transformer_shape(config.name, {llama_non_embedding_params(config), config.layers, config.heads, config.head_size()});
  if (config.tied) {
    declare_shared_stage_weights(config.name, "its output head is its token embedding's weight (tie_word_embeddings), "
                                              "shared by its first and last stages");
  }
}

// The Llama-3 family, listed after the GPTs; a configuration file's models after them.
constexpr int kFirstPosition = 50;
constexpr int kConfigFilePosition = 90;

std::vector<ModelInfo> llama_models() {
  std::vector<ModelInfo> models;
  int position = kFirstPosition;
  for (const auto& config : llama_configs()) {
    declare_traits(config);
    models.push_back(llama_model_info(config, position++));
  }
  return models;
}

PARBENCH_REGISTER_MODEL(llama_models());

}  // namespace

void register_llama_model(const LlamaConfig& config) {
  const auto problem = llama_config_problem(config);
  if (!problem.empty()) throw std::invalid_argument(problem);
  // The same configuration again (options read twice in one process) is the model already there.
  static std::mutex mutex;
  static std::map<std::string, std::string> registered;  // name: configuration, as JSON
  std::lock_guard<std::mutex> lock(mutex);
  const auto json = llama_config_json(config);
  if (const auto found = registered.find(config.name); found != registered.end() && found->second == json) return;
  if (ModelRegistry::instance().find(config.name) != nullptr) {
    throw std::invalid_argument("a model named '" + config.name + "' exists already");
  }
  ModelRegistry::instance().add(llama_model_info(config, kConfigFilePosition));
  declare_traits(config);
  registered[config.name] = json;
  std::lock_guard<std::mutex> configs_lock(registered_llama_configs_mutex());
  registered_llama_configs().push_back(config);
}

}  // namespace parbench
