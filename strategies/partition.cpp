#include "strategies/partition.h"

#include "strategies/stage_timing.h"

#include "core/text.h"
#include "strategies/training.h"

#include <algorithm>
#include <limits>
#include <set>
#include <sstream>
#include <stdexcept>

namespace parbench {
namespace {

// PyTorch's model-parallel tutorial: stem to layer2 on the first GPU, the rest on the second.
const Cut kTutorialCut = {{"stem", "layer1", "layer2"}, {"layer3", "layer4", "head"}};

std::vector<std::string> split(const std::string& text, char separator) {
  std::vector<std::string> parts;
  std::stringstream stream(text);
  std::string part;
  while (std::getline(stream, part, separator)) parts.push_back(part);
  if (!text.empty() && text.back() == separator) parts.emplace_back();
  return parts;
}

std::vector<std::string> names_of(const std::vector<Stage>& stages) {
  std::vector<std::string> names;
  for (const auto& stage : stages) names.push_back(stage.name);
  return names;
}

}  // namespace

torch::Tensor Partition::forward(torch::Tensor x) const {
  for (const auto& stage : stages) x = stage.forward(x);
  return x;
}

std::vector<torch::Tensor> Partition::parameters() const {
  std::vector<torch::Tensor> parameters;
  for (const auto& stage : stages) {
    for (const auto& module : stage.modules) {
      for (const auto& parameter : module->parameters()) parameters.push_back(parameter);
    }
  }
  return parameters;
}

std::string format_cut(const Cut& cut) {
  return joined(cut, "|", [](const std::vector<std::string>& part) { return joined(part, ","); });
}

Cut parse_cut(const std::string& spec, const std::vector<std::string>& stage_names, size_t num_devices) {
  const auto bad = [&](const std::string& what) {
    return std::invalid_argument("bad --cut '" + spec + "': " + what + " (stages in order: " +
                                 joined(stage_names) + "; devices separated by '|')");
  };
  Cut cut;
  size_t next_stage = 0;
  for (const auto& part : split(spec, '|')) {
    std::vector<std::string> names;
    for (const auto& name : split(part, ',')) {
      if (name.empty()) continue;
      auto it = std::find(stage_names.begin(), stage_names.end(), name);
      if (it == stage_names.end()) throw bad("unknown stage '" + name + "'");
      const size_t index = it - stage_names.begin();
      if (index != next_stage) {
        throw bad("stage '" + name + "' is out of order, repeated, or skips '" +
                  (next_stage < stage_names.size() ? stage_names[next_stage] : name) + "'");
      }
      ++next_stage;
      names.push_back(name);
    }
    if (names.empty()) throw bad("device " + std::to_string(cut.size()) + " has no stage");
    cut.push_back(names);
  }
  if (next_stage != stage_names.size()) throw bad("stage '" + stage_names[next_stage] + "' is on no device");
  if (cut.size() != num_devices) {
    throw bad(std::to_string(cut.size()) + " parts for " + std::to_string(num_devices) + " devices");
  }
  return cut;
}

Cut balanced_cut(const std::vector<std::string>& stage_names, const std::vector<double>& stage_seconds,
                 size_t num_devices) {
  const size_t n = stage_names.size();
  if (num_devices == 0 || num_devices > n) {
    throw std::invalid_argument("cannot cut " + std::to_string(n) + " stages across " +
                                std::to_string(num_devices) + " devices: every device needs a stage");
  }
  std::vector<double> prefix(n + 1, 0.0);
  for (size_t i = 0; i < n; ++i) prefix[i + 1] = prefix[i] + stage_seconds[i];
  // best[k][i]: the smallest possible slowest part when stages [0, i) go to k devices.
  const double kInf = std::numeric_limits<double>::infinity();
  std::vector<std::vector<double>> best(num_devices + 1, std::vector<double>(n + 1, kInf));
  std::vector<std::vector<size_t>> start(num_devices + 1, std::vector<size_t>(n + 1, 0));
  best[0][0] = 0;
  for (size_t k = 1; k <= num_devices; ++k) {
    for (size_t i = k; i <= n; ++i) {
      for (size_t j = k - 1; j < i; ++j) {
        const double slowest = std::max(best[k - 1][j], prefix[i] - prefix[j]);
        if (slowest < best[k][i]) {
          best[k][i] = slowest;
          start[k][i] = j;
        }
      }
    }
  }
  Cut cut(num_devices);
  size_t end = n;
  for (size_t k = num_devices; k >= 1; --k) {
    const size_t begin = start[k][end];
    cut[k - 1].assign(stage_names.begin() + begin, stage_names.begin() + end);
    end = begin;
  }
  return cut;
}

std::vector<Partition> partition_model(StagedModel& model, const std::vector<torch::Device>& devices,
                                       const RunConfig& config, int64_t measure_batch, Cut* cut_used) {
  const auto stage_names = names_of(model.stages());
  if (devices.size() > stage_names.size()) {
    throw std::invalid_argument(model.name() + " has " + std::to_string(stage_names.size()) +
                                " stages, fewer than the " + std::to_string(devices.size()) + " devices asked for");
  }
  std::string spec = config.cut;
  if (spec.empty()) {
    const bool tutorial_fits = devices.size() == 2 && stage_names == std::vector<std::string>{
                                   "stem", "layer1", "layer2", "layer3", "layer4", "head"};
    spec = tutorial_fits ? format_cut(kTutorialCut) : "balanced";
  }
  Cut cut = spec == "balanced"
                ? balanced_cut(stage_names, measure_stage_seconds(model, config, measure_batch, devices.front()),
                               devices.size())
                : parse_cut(spec, stage_names, devices.size());

  auto stages = model.stages();
  std::vector<Partition> partitions;
  size_t next = 0;
  for (size_t part = 0; part < cut.size(); ++part) {
    Partition partition{devices[part], {}};
    for (size_t i = 0; i < cut[part].size(); ++i, ++next) {
      for (auto& module : stages[next].modules) module->to(devices[part]);
      partition.stages.push_back(stages[next]);
    }
    partitions.push_back(std::move(partition));
  }
  prepare_model(model, config.precision);
  if (cut_used) *cut_used = cut;
  return partitions;
}

}  // namespace parbench
