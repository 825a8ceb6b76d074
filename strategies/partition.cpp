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
const char kTutorialCut[] = "stem,layer1,layer2|layer3,layer4,head";

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

const StageGroup* find_group(const std::vector<StageGroup>& groups, const std::string& name) {
  for (const auto& group : groups) {
    if (group.name == name) return &group;
  }
  return nullptr;
}

// "stem, layer1 (layer1.0..layer1.2), ..., head": the stages in order, each group's by its name.
std::string stages_in_order(const std::vector<std::string>& stage_names, const std::vector<StageGroup>& groups) {
  std::vector<std::string> items;
  for (size_t i = 0; i < stage_names.size();) {
    const auto group = std::find_if(groups.begin(), groups.end(), [&](const StageGroup& g) {
      return !g.stages.empty() && g.stages.front() == stage_names[i];
    });
    if (group == groups.end()) {
      items.push_back(stage_names[i++]);
      continue;
    }
    const auto& members = group->stages;
    items.push_back(group->name + " (" + members.front() +
                    (members.size() > 1 ? ".." + members.back() : std::string()) + ")");
    i += members.size();
  }
  return joined(items);
}

// The tutorial's cut where the model is a ResNet: stem, layer1..layer4's blocks, head.
bool tutorial_cut_fits(const std::vector<std::string>& stage_names, const std::vector<StageGroup>& groups) {
  std::vector<std::string> expected = {"stem"};
  std::vector<std::string> group_names;
  for (const auto& group : groups) {
    group_names.push_back(group.name);
    expected.insert(expected.end(), group.stages.begin(), group.stages.end());
  }
  expected.push_back("head");
  return group_names == std::vector<std::string>{"layer1", "layer2", "layer3", "layer4"} && stage_names == expected;
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

std::string format_cut(const Cut& cut, const std::vector<StageGroup>& groups) {
  return joined(cut, "|", [&](const std::vector<std::string>& part) {
    std::vector<std::string> names;
    for (size_t i = 0; i < part.size();) {
      const auto whole_group = std::find_if(groups.begin(), groups.end(), [&](const StageGroup& group) {
        return !group.stages.empty() && i + group.stages.size() <= part.size() &&
               std::equal(group.stages.begin(), group.stages.end(), part.begin() + static_cast<std::ptrdiff_t>(i));
      });
      if (whole_group == groups.end()) {
        names.push_back(part[i++]);
      } else {
        names.push_back(whole_group->name);
        i += whole_group->stages.size();
      }
    }
    return joined(names, ",");
  });
}

Cut parse_cut(const std::string& spec, const std::vector<std::string>& stage_names, size_t num_parts,
              const std::vector<StageGroup>& groups) {
  const auto bad = [&](const std::string& what) {
    return std::invalid_argument("bad --cut '" + spec + "': " + what + " (stages in order: " +
                                 stages_in_order(stage_names, groups) +
                                 (groups.empty() ? "" : "; a group's name stands for its stages") +
                                 "; parts separated by '|')");
  };
  Cut cut;
  size_t next_stage = 0;
  for (const auto& part : split(spec, '|')) {
    std::vector<std::string> names;
    for (const auto& name : split(part, ',')) {
      if (name.empty()) continue;
      std::vector<std::string> members = {name};
      if (std::find(stage_names.begin(), stage_names.end(), name) == stage_names.end()) {
        const auto* group = find_group(groups, name);
        if (!group) throw bad("unknown stage '" + name + "'");
        members = group->stages;
      }
      for (const auto& member : members) {
        if (next_stage >= stage_names.size() || stage_names[next_stage] != member) {
          throw bad("'" + name + "' is out of order, repeated, or skips '" +
                    (next_stage < stage_names.size() ? stage_names[next_stage] : name) + "'");
        }
        ++next_stage;
        names.push_back(member);
      }
    }
    if (names.empty()) throw bad("part " + std::to_string(cut.size()) + " has no stage");
    cut.push_back(names);
  }
  if (next_stage != stage_names.size()) throw bad("stage '" + stage_names[next_stage] + "' is in no part");
  if (cut.size() != num_parts) {
    throw bad(std::to_string(cut.size()) + " parts where " + std::to_string(num_parts) + " are asked for");
  }
  return cut;
}

Cut balanced_cut(const std::vector<std::string>& stage_names, const std::vector<double>& stage_seconds,
                 size_t num_parts) {
  const size_t n = stage_names.size();
  if (num_parts == 0 || num_parts > n) {
    throw std::invalid_argument("cannot cut " + std::to_string(n) + " stages into " + std::to_string(num_parts) +
                                " parts: every part needs a stage");
  }
  std::vector<double> prefix(n + 1, 0.0);
  for (size_t i = 0; i < n; ++i) prefix[i + 1] = prefix[i] + stage_seconds[i];
  // best[k][i]: the smallest possible slowest part when stages [0, i) go to k parts.
  const double kInf = std::numeric_limits<double>::infinity();
  std::vector<std::vector<double>> best(num_parts + 1, std::vector<double>(n + 1, kInf));
  std::vector<std::vector<size_t>> start(num_parts + 1, std::vector<size_t>(n + 1, 0));
  best[0][0] = 0;
  for (size_t k = 1; k <= num_parts; ++k) {
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
  Cut cut(num_parts);
  size_t end = n;
  for (size_t k = num_parts; k >= 1; --k) {
    const size_t begin = start[k][end];
    cut[k - 1].assign(stage_names.begin() + begin, stage_names.begin() + end);
    end = begin;
  }
  return cut;
}

Cut choose_cut(StagedModel& model, size_t num_parts, const RunConfig& config, int64_t measure_batch,
               torch::Device device) {
  const auto stage_names = names_of(model.stages());
  const auto groups = model.stage_groups();
  if (num_parts > stage_names.size()) {
    throw std::invalid_argument(model.name() + " has " + std::to_string(stage_names.size()) +
                                " stages, fewer than the " + std::to_string(num_parts) + " stages asked for");
  }
  std::string spec = staged_options(config).cut;
  if (spec.empty()) spec = num_parts == 2 && tutorial_cut_fits(stage_names, groups) ? kTutorialCut : "balanced";
  return spec == "balanced"
             ? balanced_cut(stage_names, stage_seconds_once(model, config, measure_batch, device), num_parts)
             : parse_cut(spec, stage_names, num_parts, groups);
}

std::vector<Partition> partition_model(StagedModel& model, const std::vector<torch::Device>& devices,
                                       const RunConfig& config, int64_t measure_batch, Cut* cut_used) {
  const Cut cut = choose_cut(model, devices.size(), config, measure_batch, devices.front());
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
