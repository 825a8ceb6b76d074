#include "models/model_zoo.h"

#include "core/text.h"
#include "models/activation_checkpoint.h"

#include <ATen/autocast_mode.h>

#include <algorithm>
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

std::vector<Stage> StagedModel::stages() {
  auto stages = build_stages();
  if (!checkpoint_blocks_) return stages;
  for (auto& stage : stages) {
    if (!stage.block) continue;
    // The stage's own forward, recomputed in the backward under the autocast it ran under.
    stage.forward = [forward = std::move(stage.forward)](const torch::Tensor& input) {
      return checkpointed_forward(forward, input);
    };
  }
  return stages;
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

ModelInfo ModelInfo::named(std::string name) {
  ModelInfo info;
  info.name = std::move(name);
  return info;
}

ModelInfo& ModelInfo::listed_at(int position) {
  order = position;
  return *this;
}

ModelInfo& ModelInfo::takes_images(int64_t channels, int64_t min_side) {
  sample = SampleShape{};
  sample.kind = SampleShape::Kind::kImage;
  sample.channels = channels;
  sample.min_side = min_side;
  return *this;
}

ModelInfo& ModelInfo::takes_tokens(int64_t vocabulary, int64_t context) {
  sample = SampleShape{};
  sample.kind = SampleShape::Kind::kTokens;
  sample.vocabulary = vocabulary;
  sample.context = context;
  return *this;
}

ModelInfo& ModelInfo::with_stages(std::vector<std::string> names, std::vector<StageGroup> groups) {
  stage_names = std::move(names);
  stage_groups = std::move(groups);
  return *this;
}

ModelInfo& ModelInfo::with_forward_flops(FlopsFunction flops) {
  forward_flops_per_sample = std::move(flops);
  return *this;
}

ModelInfo& ModelInfo::fp32_runs_on(Fp32Engine engine) {
  fp32_engine = engine;
  return *this;
}

ModelInfo& ModelInfo::built_by(Builder builder) {
  build = std::move(builder);
  return *this;
}

ModelRegistry& ModelRegistry::instance() {
  static ModelRegistry registry;
  return registry;
}

namespace {

// Why a declaration cannot be used, or "".
std::string declaration_problem(const ModelInfo& info) {
  if (info.name.empty()) return "has no name";
  if (info.stage_names.empty()) return "declares no stages";
  if (!info.forward_flops_per_sample) return "declares no forward FLOPs";
  if (!info.build) return "declares no builder";
  const auto& sample = info.sample;
  if (sample.kind == SampleShape::Kind::kImage && (sample.channels < 1 || sample.min_side < 1)) {
    return "declares images of " + std::to_string(sample.channels) + " channels and a smallest side of " +
           std::to_string(sample.min_side) + " (both must be at least 1)";
  }
  if (sample.kind == SampleShape::Kind::kTokens && (sample.vocabulary < 1 || sample.context < 1)) {
    return "declares tokens of a vocabulary of " + std::to_string(sample.vocabulary) + " and a context of " +
           std::to_string(sample.context) + " (both must be at least 1)";
  }
  // A group is a run of consecutive stages: the cut and the label read it so.
  for (const auto& group : info.stage_groups) {
    const auto first = group.stages.empty()
                           ? info.stage_names.end()
                           : std::find(info.stage_names.begin(), info.stage_names.end(), group.stages.front());
    const auto available = static_cast<size_t>(info.stage_names.end() - first);
    if (first == info.stage_names.end() || available < group.stages.size() ||
        !std::equal(group.stages.begin(), group.stages.end(), first)) {
      return "declares group '" + group.name + "', which is not a run of its consecutive stages";
    }
  }
  return "";
}

}  // namespace

bool ModelRegistry::add(ModelInfo info) {
  const auto problem = declaration_problem(info);
  if (!problem.empty()) throw std::logic_error("model '" + info.name + "' " + problem);
  const std::string name = info.name;
  // Two models under one name would leave one of them silently unreachable.
  if (!models_.emplace(name, std::move(info)).second) throw std::logic_error("model '" + name + "' is registered twice");
  return true;
}

bool ModelRegistry::add(std::vector<ModelInfo> infos) {
  for (auto& info : infos) add(std::move(info));
  return true;
}

const ModelInfo* ModelRegistry::find(const std::string& name) const {
  const auto found = models_.find(name);
  return found == models_.end() ? nullptr : &found->second;
}

const ModelInfo& ModelRegistry::get(const std::string& name) const {
  const auto* info = find(name);
  if (info == nullptr) throw std::invalid_argument("unknown model '" + name + "' (allowed: " + joined(names()) + ")");
  return *info;
}

std::vector<const ModelInfo*> ModelRegistry::all() const {
  std::vector<const ModelInfo*> result;
  for (const auto& entry : models_) result.push_back(&entry.second);
  // The map keeps names in order, so equal positions list by name.
  std::stable_sort(result.begin(), result.end(), [](auto* a, auto* b) { return a->order < b->order; });
  return result;
}

std::vector<std::string> ModelRegistry::names() const {
  std::vector<std::string> result;
  for (const auto* info : all()) result.push_back(info->name);
  return result;
}

std::vector<std::string> model_names() { return ModelRegistry::instance().names(); }

bool is_language_model(const std::string& name) {
  const auto* info = ModelRegistry::instance().find(name);
  return info != nullptr && info->language_model();
}

void check_sequence_length(const std::string& model, int64_t seq_len) {
  const auto* info = ModelRegistry::instance().find(model);
  if (info != nullptr && info->language_model() && seq_len > info->sample.context) {
    throw std::invalid_argument("--seq=" + std::to_string(seq_len) + " is longer than " + model + "'s context (at most " +
                                std::to_string(info->sample.context) + " tokens)");
  }
}

ModelPtr make_model(const std::string& name, int64_t num_classes, torch::Device device) {
  return ModelRegistry::instance().get(name).build(num_classes, device);
}

}  // namespace parbench
