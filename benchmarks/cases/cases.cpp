#include "benchmarks/cases/cases.h"

#include "core/text.h"
#include "models/model_zoo.h"
#include "strategies/optimizer.h"
#include "strategies/staged_options.h"
#include "strategies/training.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <set>
#include <stdexcept>

namespace parbench {
namespace {

std::string join_ids(const std::vector<int>& ids) {
  return joined(ids, ",", [](int id) { return std::to_string(id); });
}

// The names of the strategies whose step can be captured in a CUDA graph, comma-separated, in
// listing order.
std::string capturable_names() {
  std::vector<std::string> names;
  for (const auto* info : StrategyRegistry::instance().all()) {
    if (info->is_graph_capturable()) names.push_back(info->name());
  }
  return joined(names);
}

// Whether a strategy's cases run on several devices (ddp: ranks), and so name their count.
bool uses_several_devices(const StrategyInfo& strategy) { return strategy.min_devices() > 1 || strategy.is_distributed(); }

// A case's set-up before its strategy's options: config, devices (`devices` of them for a
// strategy that uses several), and what the placement rules out.
CaseSpec set_up_case(const StrategyInfo& strategy, const std::string& model, int64_t batch, int64_t sample,
                     Precision precision, DataMode data, OptimizerKind optimizer, Checkpointing checkpoint,
                     bool graph, int devices,
                     const Options& options,
                     int visible_gpus) {
  CaseSpec spec;
  spec.strategy = &strategy;
  spec.data = data;
  spec.cuda_graph = graph;
  // A language model's samples are sequences (--seq), an image model's images (--image).
  spec.config.model = model;
  spec.config.batch_size = batch;
  (is_language_model(model) ? spec.config.seq_len : spec.config.image_size) = sample;
  spec.config.precision = precision;
  spec.config.optimizer = optimizer;
  spec.config.checkpoint = checkpoint;
  spec.config.loss = options.loss;
  fit_config_to_model(spec.config);
  set_cut(spec.config, options.cut);
  spec.gpus = uses_several_devices(strategy) ? devices : 1;
  spec.config.devices = spec.gpus;
  if (!options.devices.empty()) spec.gpu_ids.assign(options.devices.begin(), options.devices.begin() + spec.gpus);
  // Without GPUs every case runs on CPU devices (docs/JSON.md: devices=cpu).
  if (spec.cuda_graph && visible_gpus == 0) {
    spec.skip_reason = "CUDA graphs need a GPU, 0 visible";
  } else if (spec.gpus < strategy.min_devices()) {
    spec.wants_more_gpus = true;
    spec.skip_reason = "needs " + std::to_string(strategy.min_devices()) + " devices, --devices names " +
                       std::to_string(spec.gpus);
  } else if (strategy.is_distributed() && !shared_gpu_placement(spec).empty()) {
    spec.skip_reason = strategy.name() + "'s NCCL ranks cannot share a GPU (--devices repeats one)";
  } else if (visible_gpus > 0 && spec.gpu_ids.empty() && spec.gpus > visible_gpus) {
    spec.wants_more_gpus = true;
    spec.skip_reason = "needs " + std::to_string(spec.gpus) + " GPUs, " + std::to_string(visible_gpus) + " visible";
  }
  spec.fields = {{"strategy", strategy.name()},
                 {"model", model},
                 {"batch", std::to_string(batch), true},
                 {is_language_model(model) ? "seq" : "image", std::to_string(sample), true},
                 {"precision", to_string(precision)},
                 {"data", to_string(data)}};
  // SGD, the default, is left out of the name and the fields, so that names from before the
  // choice stay as they were.
  if (optimizer != OptimizerKind::kSgd) spec.fields.push_back({"optimizer", to_string(optimizer)});
  if (checkpoint != Checkpointing::kOff) spec.fields.push_back({"checkpoint", to_string(checkpoint)});
  // --devices other than GPUs 0..gpus-1 is named; the names of cases on those stay as they were.
  for (size_t i = 0; i < spec.gpu_ids.size(); ++i) {
    if (spec.gpu_ids[i] != static_cast<int>(i)) {
      spec.fields.push_back({"devices", join_ids(spec.gpu_ids)});
      break;
    }
  }
  if (uses_several_devices(strategy)) spec.fields.push_back({"gpus", std::to_string(spec.gpus), true});
  return spec;
}

void add_option(CaseSpec& spec, const StrategyOption& option, const std::string& value) {
  option.apply_to(spec.config, value, spec.gpus);
  spec.config.options[option.field()] = value;
  spec.fields.push_back({option.field(), value, option.kind() != StrategyOption::Kind::kChoice,
                         option.named(value)});
}

// Its global batch, and its name from its fields (graph last).
void name_case(CaseSpec& spec) {
  spec.global_batch = spec.strategy->is_distributed() ? spec.config.batch_size * spec.gpus : spec.config.batch_size;
  spec.fields.push_back({"graph", spec.cuda_graph ? "on" : "off", false, spec.cuda_graph});
  spec.name = case_name(spec.fields);
}

// Applies the strategy's skip rule to a case with every option applied, and names it; false for
// a case left out (only the CUDA graph stands in its way, and its eager twin runs too).
bool finish_case(CaseSpec& spec, int64_t named_batch, const Options& options, int visible_gpus) {
  const auto& strategy = *spec.strategy;
  const CaseConditions conditions{spec.config, named_batch, spec.gpus, visible_gpus, spec.cuda_graph};
  if (const auto obstacle = strategy.obstacle_in(conditions)) {
    if (obstacle->capture_only && options.cuda_graphs.size() > 1) return false;
    if (spec.skip_reason.empty() || obstacle->capture_only) spec.skip_reason = obstacle->reason;
  }
  name_case(spec);
  return true;
}

// Every combination of the strategy's options from `next` on, each option's values as its
// values_for gives them for the case so far, the first option outermost.
void add_option_combinations(const CaseSpec& spec, size_t next, int64_t named_batch, const Options& options,
                             int visible_gpus, std::vector<CaseSpec>& cases) {
  const auto& strategy_options = spec.strategy->options();
  if (next == strategy_options.size()) {
    CaseSpec finished = spec;
    if (finish_case(finished, named_batch, options, visible_gpus)) cases.push_back(std::move(finished));
    return;
  }
  const auto& option = strategy_options[next];
  const auto [given, defaulted] = option_values(options, option);
  const auto values = option.values(given, defaulted, spec.config);
  if (values.empty()) return add_option_combinations(spec, next + 1, named_batch, options, visible_gpus, cases);
  for (const auto& value : values) {
    CaseSpec variant = spec;
    add_option(variant, option, value);
    add_option_combinations(variant, next + 1, named_batch, options, visible_gpus, cases);
  }
}

// The cases of one strategy on one set-up, one per combination of the strategy's own options.
void add_strategy_cases(CaseSpec spec, const Options& options, int visible_gpus, std::vector<CaseSpec>& cases) {
  const auto& strategy = *spec.strategy;
  const auto named_batch = spec.config.batch_size;
  if (spec.cuda_graph && !strategy.is_graph_capturable()) {
    // Listed once, without its options, and only when no case without a graph was asked for.
    if (options.cuda_graphs.size() > 1) return;
    // No options applied: its skip rule, which reads them, does not apply.
    spec.skip_reason = strategy.name() + " cannot be captured in a CUDA graph (" + capturable_names() + " can)";
    name_case(spec);
    cases.push_back(spec);
    return;
  }
  add_option_combinations(spec, 0, named_batch, options, visible_gpus, cases);
}

}  // namespace

std::string case_name(const std::vector<CaseField>& fields) {
  std::string name = "train";
  for (const auto& field : fields) {
    if (!field.named) continue;
    const bool path_element = field.key == "strategy" || field.key == "model";
    name += "/" + (path_element ? field.text : field.key + ":" + field.text);
  }
  return name;
}

nlohmann::ordered_json fields_json(const std::vector<CaseField>& fields) {
  nlohmann::ordered_json json = nlohmann::ordered_json::object();
  for (const auto& field : fields) {
    json[field.key] = field.number ? nlohmann::ordered_json::parse(field.text) : nlohmann::ordered_json(field.text);
  }
  return json;
}

CaseSpec case_from_fields(const nlohmann::json& fields, const Options& options, int visible_gpus) {
  const auto text = [&fields](const std::string& key) {
    const auto& value = fields.at(key);
    return value.is_string() ? value.get<std::string>() : value.dump();
  };
  try {
    const auto& strategy = StrategyRegistry::instance().get(text("strategy"));
    const auto model = text("model");
    const auto named_batch = std::stoll(text("batch"));
    // The count its fields name: a scaling run (--gpus=LIST) has cases at several.
    const int devices = fields.contains("gpus") ? static_cast<int>(std::stoll(text("gpus")))
                                                : multi_device_count(options, visible_gpus);
    auto spec = set_up_case(strategy, model, named_batch, std::stoll(text(is_language_model(model) ? "seq" : "image")),
                            precision_from(text("precision")), data_mode_from(text("data")),
                            fields.contains("optimizer") ? optimizer_from(text("optimizer")) : OptimizerKind::kSgd,
                            fields.contains("checkpoint") ? checkpointing_from(text("checkpoint")) : Checkpointing::kOff,
                            text("graph") == "on", devices, options, visible_gpus);
    for (const auto& option : strategy.options()) {
      if (fields.contains(option.field())) add_option(spec, option, text(option.field()));
    }
    finish_case(spec, named_batch, options, visible_gpus);
    // --fit=batch's case (benchmarks/advise/fit.h): named so, its batch the one found.
    if (fields.contains("fit")) {
      spec.fields.push_back({"fit", text("fit")});
      spec.name = case_name(spec.fields);
    }
    return spec;
  } catch (const nlohmann::json::exception& error) {
    throw std::invalid_argument(std::string("case fields ") + fields.dump() + ": " + error.what());
  } catch (const std::logic_error& error) {  // std::stoll's and the registry's
    throw std::invalid_argument(std::string("case fields ") + fields.dump() + ": " + error.what());
  }
}

// Without GPUs every device of a case is the CPU (multi-device cases then run on CPU stand-ins).
std::vector<torch::Device> case_devices(const CaseSpec& spec) {
  if (!torch::cuda::is_available()) return std::vector<torch::Device>(static_cast<size_t>(spec.gpus), torch::kCPU);
  std::vector<torch::Device> devices;
  for (int i = 0; i < spec.gpus; ++i) {
    const int gpu = spec.gpu_ids.empty() ? i : spec.gpu_ids[static_cast<size_t>(i)];
    devices.emplace_back(torch::kCUDA, static_cast<c10::DeviceIndex>(gpu));
  }
  return devices;
}

std::string shared_gpu_placement(const CaseSpec& spec) {
  const std::set<int> distinct(spec.gpu_ids.begin(), spec.gpu_ids.end());
  if (distinct.size() == spec.gpu_ids.size()) return "";
  return std::to_string(spec.gpu_ids.size()) + " " + spec.strategy->device_role() + " on " +
         std::to_string(distinct.size()) + (distinct.size() == 1 ? " GPU" : " GPUs");
}

void check_devices(const Options& options, int visible_gpus) {
  if (!options.gpu_counts.empty() && visible_gpus > 0 && options.gpu_counts.front() > visible_gpus) {
    throw UsageError("--gpus=" + joined(options.gpu_counts, ",", [](int count) { return std::to_string(count); }) +
                     " asks for more GPUs than the " + std::to_string(visible_gpus) +
                     " visible at every count (a count above them is skipped; give at least one of 1 to " +
                     std::to_string(visible_gpus) + ")");
  }
  if (options.devices.empty()) return;
  const auto flag = "--devices=" + join_ids(options.devices);
  if (visible_gpus == 0) {
    throw UsageError(flag + " names GPUs, but none is visible (without GPUs, multi-device cases run on " +
                     std::to_string(kCpuStandInDevices) + " CPU devices)");
  }
  for (auto gpu : options.devices) {
    if (gpu >= visible_gpus) {
      throw UsageError(flag + ": GPU " + std::to_string(gpu) + " is not visible (visible: 0 to " +
                       std::to_string(visible_gpus - 1) + ")");
    }
  }
  if (options.gpus > 0 && options.gpus != static_cast<int>(options.devices.size())) {
    throw UsageError("--gpus=" + std::to_string(options.gpus) + " and " + flag + " disagree on the number of devices "
                     "(leave --gpus out)");
  }
  if (std::set<int>(options.devices.begin(), options.devices.end()).size() == options.devices.size()) return;
  for (const auto& name : options.strategies) {
    if (!StrategyRegistry::instance().get(name).is_distributed()) continue;
    throw UsageError(flag + " repeats a GPU, but " + name + " runs one NCCL rank per GPU and ranks cannot share one "
                     "(give distinct GPUs, or leave " + name + " out of --strategies)");
  }
}

int multi_device_count(const Options& options, int visible_gpus) {
  if (!options.devices.empty()) return static_cast<int>(options.devices.size());
  if (options.gpus > 0) return options.gpus;
  if (!options.gpu_counts.empty()) return options.gpu_counts.back();
  return visible_gpus > 0 ? std::max(visible_gpus, 2) : kCpuStandInDevices;
}

std::vector<int> strategy_device_counts(const StrategyInfo& strategy, const Options& options, int visible_gpus) {
  if (!uses_several_devices(strategy)) return {1};
  if (options.gpu_counts.empty()) return {multi_device_count(options, visible_gpus)};
  std::vector<int> counts;
  for (auto count : options.gpu_counts) {
    if (count >= strategy.min_devices()) counts.push_back(count);
  }
  return counts;
}

std::vector<CaseSpec> build_cases(const Options& options, int visible_gpus) {
  auto& registry = StrategyRegistry::instance();
  std::vector<const StrategyInfo*> strategies;
  if (options.strategies.empty()) {
    strategies = registry.default_run();
  } else {
    for (const auto& name : options.strategies) strategies.push_back(&registry.get(name));
  }

  std::vector<CaseSpec> cases;
  for (const auto* strategy : strategies) {
    for (const auto& model : options.models) {
      for (auto batch : options.batch_sizes) {
        for (auto sample : is_language_model(model) ? options.seq_lens : options.image_sizes) {
          for (auto precision : options.precisions) {
            for (auto data : options.data_modes) {
              for (auto optimizer : options.optimizers) {
                for (auto checkpoint : options.checkpoints) {
                  for (bool graph : options.cuda_graphs) {
                    for (int devices : strategy_device_counts(*strategy, options, visible_gpus)) {
                      add_strategy_cases(set_up_case(*strategy, model, batch, sample, precision, data, optimizer,
                                                     checkpoint, graph, devices, options, visible_gpus),
                                         options, visible_gpus, cases);
                    }
                  }
                }
              }
            }
          }
        }
      }
    }
  }
  return cases;
}

std::string sample_part(const RunConfig& config) {
  if (is_language_model(config.model)) return "/seq:" + std::to_string(config.seq_len);
  return "/image:" + std::to_string(config.image_size);
}

int64_t sample_size(const RunConfig& config) {
  return is_language_model(config.model) ? config.seq_len : config.image_size;
}

int distinct_gpus(const CaseSpec& spec) {
  if (spec.gpu_ids.empty()) return spec.gpus;
  return static_cast<int>(std::set<int>(spec.gpu_ids.begin(), spec.gpu_ids.end()).size());
}

std::string benchmark_name(const std::string& case_name, int64_t fixed_iterations) {
  return case_name + (fixed_iterations > 0 ? "/iterations:" + std::to_string(fixed_iterations) : "") + "/manual_time";
}

CaseFilter::CaseFilter(std::string filter) {
  if (filter.empty() || filter == "all") filter = ".";
  if (filter.front() == '-') {
    negated_ = true;
    filter.erase(0, 1);
  }
  try {
    expression_ = std::regex(filter, std::regex::extended);
  } catch (const std::regex_error& error) {
    throw UsageError("--benchmark_filter=" + filter + " is not a valid extended regular expression: " + error.what());
  }
}

bool CaseFilter::selects(const std::string& benchmark_name) const {
  return std::regex_search(benchmark_name, expression_) != negated_;
}

}  // namespace parbench
