#include "models/model_zoo.h"

#include "core/text.h"
#include "models/gpt.h"
#include "models/resnet.h"
#include "models/tiny_cnn.h"

#include <ATen/autocast_mode.h>

#include <stdexcept>

namespace parbench {

AutocastScope::AutocastScope(c10::DeviceType device_type, std::optional<c10::ScalarType> dtype)
    : device_type_(device_type) {
  if (!dtype) return;
  active_ = true;
  was_enabled_ = at::autocast::is_autocast_enabled(device_type_);
  previous_dtype_ = at::autocast::get_autocast_dtype(device_type_);
  at::autocast::set_autocast_enabled(device_type_, true);
  at::autocast::set_autocast_dtype(device_type_, *dtype);
  at::autocast::increment_nesting();
}

AutocastScope::~AutocastScope() {
  if (!active_) return;
  // Leaving the outermost scope drops the cached casts of the weights, as Python's autocast does.
  if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
  at::autocast::set_autocast_enabled(device_type_, was_enabled_);
  at::autocast::set_autocast_dtype(device_type_, previous_dtype_);
}

void copy_named_tensors(const torch::OrderedDict<std::string, torch::Tensor>& source,
                        const torch::OrderedDict<std::string, torch::Tensor>& target,
                        const std::optional<torch::Device>& device) {
  TORCH_CHECK(source.keys() == target.keys(), "clone: the copy's tensors are not named as the original's");
  for (const auto& item : source) {
    const auto& tensor = item.value();
    // The dictionaries hold handles to the modules' own tensors: set_data replaces their contents.
    auto data = device && tensor.device() != *device ? tensor.to(*device) : tensor.clone();
    auto handle = target[item.key()];
    handle.set_data(data);
    handle.set_requires_grad(tensor.requires_grad());
  }
}

std::vector<std::string> model_names() {
  std::vector<std::string> names;
  for (const auto& variant : resnet_variants()) names.push_back(variant.name);
  names.push_back("tinycnn");
  for (const auto& config : gpt_configs()) names.push_back(config.name);
  return names;
}

const GptConfig* find_gpt_config(const std::string& name) {
  for (const auto& config : gpt_configs()) {
    if (config.name == name) return &config;
  }
  return nullptr;
}

bool is_language_model(const std::string& name) { return find_gpt_config(name) != nullptr; }

void fit_config_to_model(RunConfig& config) {
  const auto* gpt = find_gpt_config(config.model);
  if (gpt == nullptr) return;
  config.loss = LossKind::kCrossEntropy;
  config.num_classes = gpt->vocabulary;
}

void check_sequence_length(const std::string& model, int64_t seq_len) {
  const auto* gpt = find_gpt_config(model);
  if (gpt != nullptr && seq_len > gpt->context) {
    throw std::invalid_argument("--seq=" + std::to_string(seq_len) + " is longer than " + model + "'s context (at most " +
                                std::to_string(gpt->context) + " tokens)");
  }
}

ModelPtr make_model(const std::string& name, int64_t num_classes) {
  for (const auto& variant : resnet_variants()) {
    if (variant.name == name) return std::make_shared<ResNetImpl>(variant, num_classes);
  }
  if (name == "tinycnn") return std::make_shared<TinyCnnImpl>(num_classes);
  if (const auto* gpt = find_gpt_config(name)) return std::make_shared<GPTImpl>(*gpt);
  throw std::invalid_argument("unknown model '" + name + "' (allowed: " + joined(model_names()) + ")");
}

}  // namespace parbench
