#include "benchmarks/cases/cases.h"

#include "benchmarks/advise/advise.h"
#include "benchmarks/run/batch_source.h"
#include "benchmarks/measure/device_stats.h"
#include "benchmarks/run/distributed_runner.h"
#include "benchmarks/measure/graphed_step.h"
#include "benchmarks/measure/memory.h"
#include "benchmarks/measure/mfu.h"
#include "benchmarks/measure/noise_rule.h"
#include "benchmarks/output/outcomes.h"
#include "benchmarks/run/profile_companion.h"
#include "benchmarks/config/test_hooks.h"
#include "core/device_timer.h"
#include "core/statistics.h"
#include "core/text.h"
#include "models/model_zoo.h"
#include "strategies/optimizer.h"
#include "strategies/pipeline_schedule.h"
#include "strategies/staged_options.h"
#include "strategies/training.h"

#include <nlohmann/json.hpp>

#ifdef PARBENCH_WITH_CUDA
#include <c10/cuda/CUDACachingAllocator.h>
#endif

#include <algorithm>
#include <cctype>
#include <cstring>
#include <fstream>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <set>
#include <thread>

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
                         option.unnamed_value().empty() || value != option.unnamed_value()});
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

namespace {

// A set-up strategy kept across Google Benchmark's calls of one case (its repetitions), so
// set-up and warm-up happen once per case.
struct PreparedCase {
  std::string name;
  std::unique_ptr<Strategy> strategy;
  std::unique_ptr<BatchSource> source;
  std::unique_ptr<GraphedStep> graphed;  // set when the case replays a captured step
  double params = 0;
  double forward_flops_per_sample = 0;
  std::optional<ComputePeaks> peaks;  // GPUs only
  CaseProfile profile;  // from the profile companion
  // GPUs: the allocator before the set-up, and between two warm-up steps where the step is then
  // captured (an eager case's is read after its timed steps).
  std::vector<AllocatorStats> before_setup, before_capture;

  void step() { train_step(*strategy, graphed.get(), source->next()); }
};

std::unique_ptr<PreparedCase>& prepared_case() {
  static std::unique_ptr<PreparedCase> prepared;
  return prepared;
}

void release_prepared_case() {
  prepared_case().reset();
#ifdef PARBENCH_WITH_CUDA
  if (torch::cuda::is_available()) c10::cuda::CUDACachingAllocator::emptyCache();
#endif
}

// Set-up, warm-up and, for a graphed case, the capture: everything before the timed steps.
std::unique_ptr<PreparedCase> make_prepared_case(const CaseSpec& spec, const Options& options) {
  test_hooks::at_case_setup(spec.name);
  test_hooks::at_case_batch(spec.config.batch_size);
  const auto devices = case_devices(spec);
  reset_peak_memory(devices);
  auto fresh = std::make_unique<PreparedCase>();
  fresh->before_setup = allocator_stats(devices);
  fresh->name = spec.name;
  fresh->strategy = spec.strategy->create();
  const auto config = spec.config;
  fresh->strategy->setup([&config] { return make_case_model(config); }, devices, config);
  fresh->source = std::make_unique<BatchSource>(spec.config, spec.config.batch_size, spec.data,
                                                fresh->strategy->input_device(), fresh->strategy->target_device());
  for (const auto& parameter : fresh->strategy->model().module().parameters()) fresh->params += parameter.numel();
  fresh->forward_flops_per_sample =
      ModelRegistry::instance().get(config.model).forward_flops_per_sample(sample_size(config), config.num_classes);
  for (int step = 0; step < options.warmup_steps; ++step) fresh->step();
  if (spec.cuda_graph && options.warmup_steps > 0) {
    synchronize_devices(devices);
    fresh->before_capture = allocator_stats(devices);
  }
  if (spec.cuda_graph) fresh->graphed = std::make_unique<GraphedStep>(*fresh->strategy, fresh->source->next());
  synchronize_devices(devices);
  return fresh;
}

// The noise rule's state of each case, by benchmark name.
std::map<std::string, std::optional<NoiseTracker>>& noise_trackers() {
  static std::map<std::string, std::optional<NoiseTracker>> trackers;
  return trackers;
}

ProfileCompanion& profile_companion() {
  static ProfileCompanion companion;
  return companion;
}

PreparedCase& prepare(const CaseSpec& spec, const Options& options) {
  auto& prepared = prepared_case();
  if (prepared && prepared->name == spec.name) return *prepared;
  release_prepared_case();
  // Asked before this process sets the case up, so that the two never hold it at once.
  CaseProfile profile;
  if (wants_profile(spec, options)) profile = profile_companion().profile(spec.name, fields_json(spec.fields).dump());
  // The GEMM probe, before the case holds its memory (once per GPU and math in a process).
  std::optional<ComputePeaks> peaks;
  if (const auto devices = case_devices(spec); all_cuda(devices)) {
    peaks = measure_compute_peaks(
        devices.front(), peak_math(spec.config.precision, ModelRegistry::instance().get(spec.config.model).fp32_engine));
  }
  prepared = make_prepared_case(spec, options);
  prepared->profile = std::move(profile);
  prepared->peaks = std::move(peaks);
  return *prepared;
}

}  // namespace

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

bool wants_profile(const CaseSpec& spec, const Options& options) {
  return (options.busy_profile && all_cuda(case_devices(spec))) || !options.trace_dir.empty();
}

std::string trace_path(const std::string& dir, const std::string& case_name, const std::string& suffix) {
  std::string file = case_name;
  for (auto& character : file) {
    if (!std::isalnum(static_cast<unsigned char>(character)) && character != '.' && character != '-') character = '_';
  }
  return dir + "/" + file + suffix + ".trace.json";
}

// The simulator's step for a traced pipeline case, beside its trace: the predicted timeline the
// report draws under the measured one (docs/JSON.md, "Traces").
void write_predicted_timeline(const CaseSpec& spec, const SimulatedStep& step, const std::string& path) {
  nlohmann::ordered_json actions = nlohmann::ordered_json::array();
  for (const auto& placed : step.actions) {
    const auto op = placed.action.op;
    actions.push_back({{"device", placed.device},
                       {"stage", placed.action.stage},
                       {"op", op == StageOp::kForward ? "F" : op == StageOp::kBackwardWeight ? "W" : "B"},
                       {"micro_batch", placed.action.micro_batch},
                       {"start_ms", placed.start_ms},
                       {"end_ms", placed.end_ms}});
  }
  const auto staged = pipeline_options(spec.config);
  const bool pipeline = staged.split_size > 0;
  const nlohmann::ordered_json timeline = {
      {"case", spec.name},
      {"schedule", pipeline ? staged.schedule : "gpipe"},
      {"devices", spec.gpus},
      {"micro_batches", pipeline ? micro_batch_count(spec.config.batch_size, staged.split_size) : 1},
      {"chunks", pipeline && schedule_info(staged.schedule).uses_chunks ? staged.chunks : 1},
      {"step_ms", step.step_ms},
      {"bubble_fraction", step.bubble_fraction},
      {"actions", actions}};
  std::ofstream file(path);
  file << timeline.dump(1) << "\n";
  if (!file) throw std::runtime_error("cannot write " + path);
}

CaseProfile profile_case(const CaseSpec& spec, const Options& options) {
  CaseProfile profile;
  const auto devices = case_devices(spec);
  auto prepared = make_prepared_case(spec, options);
  if (options.busy_profile) profile.busy_seconds = measure_busy_seconds(devices, [&] { prepared->step(); });
  if (!options.trace_dir.empty()) {
    profile.trace_path = trace_path(options.trace_dir, spec.name);
    save_step_trace(devices, [&] { prepared->step(); }, profile.trace_path);
  }
  prepared.reset();
#ifdef PARBENCH_WITH_CUDA
  if (torch::cuda::is_available()) c10::cuda::CUDACachingAllocator::emptyCache();
#endif
  if (!profile.trace_path.empty()) {
    if (const auto predicted = simulate_case(spec)) {
      auto path = profile.trace_path;
      path.replace(path.size() - std::strlen(".trace.json"), std::string::npos, ".predicted.json");
      write_predicted_timeline(spec, *predicted, path);
    }
  }
  return profile;
}

void stop_profile_companion() { profile_companion().stop(); }

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

std::string device_kind(torch::Device device) { return c10::DeviceTypeName(device.type(), /*lower_case=*/true); }

std::string format_label(const std::map<std::string, std::string>& facts) {
  std::string label;
  for (const auto& [key, value] : facts) label += (label.empty() ? "" : ";") + key + "=" + value;
  return label;
}

benchmark::UserCounters device_counters(const std::vector<double>& peak_bytes, const std::vector<double>& busy_seconds,
                                        double step_seconds) {
  constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
  benchmark::UserCounters counters;
  for (size_t i = 0; i < peak_bytes.size(); ++i) counters["peak_mem_gib_dev" + std::to_string(i)] = peak_bytes[i] / kGiB;
  for (size_t i = 0; i < busy_seconds.size(); ++i) {
    const double busy = std::min(1.0, busy_seconds[i] / step_seconds);
    counters["busy_frac_dev" + std::to_string(i)] = busy;
    counters["bubble_frac_dev" + std::to_string(i)] = 1.0 - busy;
  }
  return counters;
}

void set_device_counters(benchmark::State& state, const std::vector<double>& peak_bytes,
                         const std::vector<double>& busy_seconds, double step_seconds) {
  for (const auto& [name, value] : device_counters(peak_bytes, busy_seconds, step_seconds)) state.counters[name] = value;
}

std::vector<int> clock_device_indices(const std::vector<torch::Device>& devices) {
  std::vector<int> indices;
  for (const auto& device : devices) indices.push_back(device.is_cuda() ? device.index() : -1);
  return indices;
}

std::vector<std::optional<RepetitionClocks>> repetition_clocks(const std::vector<std::optional<ClockSample>>& before,
                                                               const std::vector<std::optional<ClockSample>>& after) {
  std::vector<std::optional<RepetitionClocks>> clocks(after.size());
  for (size_t i = 0; i < after.size(); ++i) {
    if (after[i]) clocks[i] = RepetitionClocks::from(i < before.size() && before[i] ? *before[i] : ClockSample{}, *after[i]);
  }
  return clocks;
}

void set_clock_counters(benchmark::State& state, const std::vector<std::optional<RepetitionClocks>>& devices,
                        double throttle_threshold) {
  bool sampled = false, any_throttled = false;
  for (size_t i = 0; i < devices.size(); ++i) {
    if (!devices[i]) continue;
    sampled = true;
    const auto& clocks = *devices[i];
    const auto suffix = "_dev" + std::to_string(i);
    if (clocks.sm_clock_mhz) state.counters["sm_clock_mhz" + suffix] = *clocks.sm_clock_mhz;
    if (clocks.sm_clock_max_mhz) state.counters["sm_clock_max_mhz" + suffix] = *clocks.sm_clock_max_mhz;
    if (clocks.power_w) state.counters["power_w" + suffix] = *clocks.power_w;
    if (clocks.temperature_c) state.counters["temperature_c" + suffix] = *clocks.temperature_c;
    if (clocks.reasons) state.counters["throttle_reasons" + suffix] = static_cast<double>(*clocks.reasons);
    any_throttled = any_throttled || throttled(clocks, throttle_threshold);
  }
  if (sampled) state.counters["throttled"] = any_throttled ? 1 : 0;
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

TrainingCounters training_counters(const CaseSpec& spec, double seconds, int64_t steps, double params,
                                   double forward_flops_per_sample) {
  TrainingCounters result;
  auto& counters = result.counters;
  const double samples = static_cast<double>(steps) * spec.global_batch;
  result.samples = samples;
  counters["step_ms"] = seconds / steps * 1e3;
  // Training is counted as 3 forwards (docs/METRICS.md).
  counters["tflops"] = 3.0 * forward_flops_per_sample * samples / seconds / 1e12;
  counters["params"] = params;
  counters["batch"] = static_cast<double>(spec.global_batch);
  if (is_language_model(spec.config.model)) {
    counters["seq"] = static_cast<double>(spec.config.seq_len);
    counters["tokens_per_second"] = samples * static_cast<double>(spec.config.seq_len) / seconds;
  } else {
    counters["image"] = static_cast<double>(spec.config.image_size);
  }
  counters["gpus"] = spec.gpus;
  for (const auto& option : spec.strategy->options()) {
    const auto value = spec.config.options.find(option.field());
    if (!option.counter().empty() && value != spec.config.options.end()) counters[option.counter()] = std::stod(value->second);
  }
  if (spec.predicted_step_ms) counters["predicted_step_ms"] = *spec.predicted_step_ms;
  // A case with its memory predicted alone (checkpointed) is ranked too.
  if (spec.predicted_step_ms || !spec.predicted_peak_bytes.empty()) counters["predicted_rank"] = spec.predicted_rank;
  for (size_t i = 0; i < spec.predicted_peak_bytes.size(); ++i) {
    counters["predicted_peak_gib_dev" + std::to_string(i)] = spec.predicted_peak_bytes[i] / (1024.0 * 1024.0 * 1024.0);
  }
  if (spec.fit) {
    counters["fit_batch"] = static_cast<double>(spec.fit->largest_batch);
    if (spec.fit->oom_batch) counters["fit_oom_batch"] = static_cast<double>(*spec.fit->oom_batch);
    counters["fit_step"] = static_cast<double>(spec.fit->step);
    counters["fit_probes"] = spec.fit->probes;
  }
  return result;
}

void set_training_counters(benchmark::State& state, const CaseSpec& spec, double seconds, int64_t steps,
                           double params, double forward_flops_per_sample) {
  const auto training = training_counters(spec, seconds, steps, params, forward_flops_per_sample);
  state.SetItemsProcessed(static_cast<int64_t>(training.samples));
  for (const auto& [name, value] : training.counters) state.counters[name] = value;
}

benchmark::UserCounters stall_counters(const std::vector<double>& iteration_seconds) {
  benchmark::UserCounters counters;
  if (iteration_seconds.empty()) return counters;
  const double middle = median(iteration_seconds);
  const double slowest = *std::max_element(iteration_seconds.begin(), iteration_seconds.end());
  const double ratio = middle > 0 ? slowest / middle : 1.0;
  counters["iteration_max_over_median"] = ratio;
  // Only where set: a counter that is 0 in every repetition has a mean of 0, and Google Benchmark
  // writes its coefficient of variation, 0/0, as NaN, which is not JSON.
  if (iteration_seconds.size() >= kStallMinIterations && ratio >= kStallRatio) counters["stalled"] = 1.0;
  return counters;
}

int64_t fixed_iterations(const CaseSpec& spec, const Options& options) {
  if (options.iterations > 0) return options.iterations;
  return spec.strategy->is_distributed() ? kDefaultDistributedIterations : 0;
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

RunProgress::RunProgress(size_t cases_to_run, bool print) : cases_to_run_(cases_to_run), print_(print) {}

void RunProgress::case_started(const std::string& name) {
  if (name == current_) return;
  current_ = name;
  ++started_;
  if (!print_) return;
  const auto clock = [](double seconds) {
    const auto whole = static_cast<long long>(seconds + 0.5);
    char text[32];
    std::snprintf(text, sizeof text, "%02lld:%02lld:%02lld", whole / 3600, whole / 60 % 60, whole % 60);
    return std::string(text);
  };
  const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - run_start_).count();
  const size_t finished = started_ - 1;
  const std::string left =
      finished > 0 ? ", about " + clock(elapsed / finished * static_cast<double>(cases_to_run_ - finished)) + " left" : "";
  std::fprintf(stderr, "[%zu/%zu %s%s] %s\n", started_, cases_to_run_, clock(elapsed).c_str(), left.c_str(), name.c_str());
}

// The memory breakdown after the timed steps (benchmarks/measure/memory.h), the devices synchronised.
static benchmark::UserCounters case_memory_counters(const PreparedCase& prepared, const std::vector<torch::Device>& devices) {
  AllocatorWindow window;
  window.before_setup = prepared.before_setup;
  window.now = allocator_stats(devices, /*release_cublas_workspaces=*/!prepared.graphed);
  window.between_steps = prepared.graphed ? prepared.before_capture : window.now;
  for (const auto& device : devices) window.batch_bytes.push_back(prepared.source->held_bytes_on(device));
  return memory_counters(model_state_bytes(*prepared.strategy), window);
}

void run_local_case(benchmark::State& state, const CaseSpec& spec, const Options& options) {
  const auto rule = noise_rule(options);
  const auto key = benchmark_name(spec.name, fixed_iterations(spec, options));
  std::optional<NoiseTracker>& noise = noise_trackers()[key];
  if (rule && !noise) noise.emplace(*rule);
  if (noise && noise->stopped()) return skip_stopped_repetition(state);
  try {
    auto& prepared = prepare(spec, options);
    const auto& devices = prepared.strategy->devices();
    DeviceTimer timer(devices, options.timer);
    auto& sampler = ClockSampler::instance();
    const auto gpus = clock_device_indices(devices);
    // Outside the timed steps: before the first start event, after the last stop has completed.
    const auto before = sampler.sample(gpus);
    double seconds = 0;
    std::vector<double> iteration_seconds;
    const int stall_ms = test_hooks::stall_ms();
    for (auto _ : state) {
      timer.start();
      if (stall_ms > 0 && iteration_seconds.size() == 1) std::this_thread::sleep_for(std::chrono::milliseconds(stall_ms));
      for (int step = 0; step < options.steps_per_iteration; ++step) prepared.step();
      const double elapsed = timer.stop();
      state.SetIterationTime(elapsed);
      seconds += elapsed;
      iteration_seconds.push_back(elapsed);
    }
    synchronize_devices(devices);
    const auto after = sampler.sample(gpus);
    set_clock_counters(state, repetition_clocks(before, after), options.throttle_threshold);
    if (noise) {
      noise->add(state.iterations(), seconds / static_cast<double>(state.iterations()));
      noise_outcomes()[key] = noise->outcome();
    }
    const int64_t steps = state.iterations() * options.steps_per_iteration;
    set_training_counters(state, spec, seconds, steps, prepared.params, prepared.forward_flops_per_sample);
    set_device_counters(state, peak_memory_bytes(devices), prepared.profile.busy_seconds.value_or(std::vector<double>{}),
                        seconds / static_cast<double>(steps));
    for (const auto& [name, value] : case_memory_counters(prepared, devices)) state.counters[name] = value;
    for (const auto& [name, value] : prepared.strategy->counters()) state.counters[name] = value;
    for (const auto& [name, value] : stall_counters(iteration_seconds)) state.counters[name] = value;
    auto facts = prepared.strategy->describe();
    for (const auto& [name, value] : prepared.strategy->model().forward_facts()) facts[name] = value;
    if (prepared.peaks) add_mfu(*prepared.peaks, state.counters["tflops"] * 1e12, distinct_gpus(spec), state.counters, facts);
    facts["devices"] = device_kind(devices.front());
    if (const auto placement = shared_gpu_placement(spec); !placement.empty()) facts["placement"] = placement;
    if (!prepared.profile.trace_path.empty()) facts["trace"] = prepared.profile.trace_path;
    state.SetLabel(format_label(facts));
  } catch (const std::exception& error) {
    release_prepared_case();
    std::string message = error.what();
    message = message.substr(0, message.find('\n'));  // c10::Error appends a C++ backtrace
    state.SkipWithError(message.c_str());
  }
}

void register_cases(const std::vector<CaseSpec>& cases, const Options& options, RunProgress& progress) {
  for (const auto& spec : cases) {
    auto* benchmark = benchmark::RegisterBenchmark(
        spec.name.c_str(), [spec, &options, &progress](benchmark::State& state) {
          if (!spec.skip_reason.empty()) {
            state.SkipWithError(skipped_message(spec.skip_reason).c_str());
            return;
          }
          if (spec.fit && !spec.fit->failure.empty()) {
            state.SkipWithError(("--fit=batch: " + spec.fit->failure).c_str());
            return;
          }
          progress.case_started(spec.name);
          if (spec.strategy->is_distributed()) {
            run_distributed_case(state, spec, options);
          } else {
            run_local_case(state, spec, options);
          }
        });
    benchmark->UseManualTime()->Unit(benchmark::kMillisecond);
    if (const auto iterations = fixed_iterations(spec, options); iterations > 0) benchmark->Iterations(iterations);
  }
}

}  // namespace parbench
