#include "benchmarks/cases.h"

#include "benchmarks/advise.h"
#include "benchmarks/batch_source.h"
#include "benchmarks/device_stats.h"
#include "benchmarks/distributed_runner.h"
#include "benchmarks/graphed_step.h"
#include "benchmarks/mfu.h"
#include "benchmarks/outcomes.h"
#include "benchmarks/profile_companion.h"
#include "core/device_timer.h"
#include "core/text.h"
#include "models/model_zoo.h"
#include "strategies/pipeline_schedule.h"

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

namespace parbench {
namespace {

std::string base_name(const std::string& strategy, const RunConfig& config, int64_t batch, DataMode data) {
  return "train/" + strategy + "/" + config.model + "/batch:" + std::to_string(batch) + sample_part(config) +
         "/precision:" + to_string(config.precision) + "/data:" + to_string(data);
}

std::string format_number(double value) {
  char text[32];
  std::snprintf(text, sizeof text, "%g", value);
  return text;
}

std::string join_ids(const std::vector<int>& ids) {
  return joined(ids, ",", [](int id) { return std::to_string(id); });
}

// "/devices:0,0" where --devices places the case other than on GPUs 0..gpus-1, whose names stay
// as they were.
std::string devices_part(const CaseSpec& spec) {
  for (size_t i = 0; i < spec.gpu_ids.size(); ++i) {
    if (spec.gpu_ids[i] != static_cast<int>(i)) return "/devices:" + join_ids(spec.gpu_ids);
  }
  return "";
}

// "single, ddp": the strategies whose step can be captured in a CUDA graph.
std::string capturable_names() {
  std::vector<std::string> names;
  for (const auto* info : StrategyRegistry::instance().all()) {
    if (info->graph_capturable) names.push_back(info->name);
  }
  return joined(names);
}

std::vector<int64_t> split_sizes_for(const Options& options, int64_t batch) {
  std::vector<int64_t> sizes = options.split_sizes;
  if (sizes.empty()) {
    // The default sweep leaves out splits beyond the batch: each is one micro-batch, the same
    // case as the full batch. Splits the user names run as named.
    for (auto split : tutorial_split_sizes()) {
      if (split < batch) sizes.push_back(split);
    }
    sizes.push_back(batch);
  }
  std::set<int64_t> unique(sizes.begin(), sizes.end());
  return {unique.begin(), unique.end()};
}

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

// A test hook (docs/DISTRIBUTED.md): PARBENCH_TEST_FAIL_CASE=NAME makes the case of that name
// fail at set-up, as an exception or an out-of-memory error would.
void fail_if_test_hook_names(const std::string& case_name) {
  const char* name = std::getenv("PARBENCH_TEST_FAIL_CASE");
  if (name != nullptr && case_name == name) throw std::runtime_error("failing on purpose (PARBENCH_TEST_FAIL_CASE)");
}

// Set-up, warm-up and, for a graphed case, the capture: everything before the timed steps.
std::unique_ptr<PreparedCase> make_prepared_case(const CaseSpec& spec, const Options& options) {
  fail_if_test_hook_names(spec.name);
  const auto devices = case_devices(spec);
  reset_peak_memory(devices);
  auto fresh = std::make_unique<PreparedCase>();
  fresh->name = spec.name;
  fresh->strategy = spec.strategy->create();
  const auto config = spec.config;
  fresh->strategy->setup([&config] { return make_model(config.model, config.num_classes); }, devices, config);
  fresh->source = std::make_unique<BatchSource>(spec.config, spec.config.batch_size, spec.data,
                                                fresh->strategy->input_device(), fresh->strategy->target_device());
  for (const auto& parameter : fresh->strategy->model().module().parameters()) fresh->params += parameter.numel();
  fresh->forward_flops_per_sample = fresh->strategy->model().forward_flops_per_sample(sample_size(spec.config));
  for (int step = 0; step < options.warmup_steps; ++step) fresh->step();
  if (spec.cuda_graph) fresh->graphed = std::make_unique<GraphedStep>(*fresh->strategy, fresh->source->next());
  synchronize_devices(devices);
  return fresh;
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
  if (wants_profile(spec, options)) profile = profile_companion().profile(spec.name);
  // The GEMM probe, before the case holds its memory (once per GPU and math in a process).
  std::optional<ComputePeaks> peaks;
  if (const auto devices = case_devices(spec); all_cuda(devices)) {
    peaks = measure_compute_peaks(devices.front(), peak_math(spec.config.precision, is_language_model(spec.config.model)));
  }
  prepared = make_prepared_case(spec, options);
  prepared->profile = std::move(profile);
  prepared->peaks = std::move(peaks);
  return *prepared;
}

// The cases of one strategy on one set-up (`spec`: model, batch, image, precision, data,
// graph), one per value of the strategy's own options.
void add_strategy_cases(CaseSpec spec, const Options& options, int visible_gpus, std::vector<CaseSpec>& cases) {
  const auto& strategy = *spec.strategy;
  spec.gpus = strategy.min_devices > 1 || strategy.distributed ? multi_device_count(options, visible_gpus) : 1;
  if (!options.devices.empty()) spec.gpu_ids.assign(options.devices.begin(), options.devices.begin() + spec.gpus);
  // Without GPUs every case runs on CPU devices (docs/JSON.md: devices=cpu).
  if (spec.cuda_graph && visible_gpus == 0) {
    spec.skip_reason = "CUDA graphs need a GPU, 0 visible";
  } else if (spec.gpus < strategy.min_devices) {
    spec.wants_more_gpus = true;
    spec.skip_reason = "needs " + std::to_string(strategy.min_devices) + " devices, --devices names " +
                       std::to_string(spec.gpus);
  } else if (strategy.distributed && !shared_gpu_placement(spec).empty()) {
    spec.skip_reason = "ddp's NCCL ranks cannot share a GPU (--devices repeats one)";
  } else if (visible_gpus > 0 && spec.gpu_ids.empty() && spec.gpus > visible_gpus) {
    spec.wants_more_gpus = true;
    spec.skip_reason = "needs " + std::to_string(spec.gpus) + " GPUs, " + std::to_string(visible_gpus) + " visible";
  }
  const auto batch = spec.config.batch_size;
  const auto base = base_name(strategy.name, spec.config, batch, spec.data) + devices_part(spec);
  const auto gpus = "/gpus:" + std::to_string(spec.gpus);
  const std::string graph = spec.cuda_graph ? "/graph:on" : "";

  if (spec.cuda_graph && !strategy.graph_capturable) {
    // Listed as skipped only when no case without a graph was asked for.
    if (options.cuda_graphs.size() > 1) return;
    spec.skip_reason = strategy.name + " cannot be captured in a CUDA graph (" + capturable_names() + " can)";
    spec.name = (strategy.min_devices > 1 ? base + gpus : base) + graph;
    cases.push_back(spec);
  } else if (strategy.name == "pipeline") {
    for (auto split : split_sizes_for(options, batch)) {
      for (const auto& schedule : options.schedules) {
        const bool interleaved = schedule_info(schedule).uses_chunks;
        for (auto chunks : interleaved ? options.chunks : std::vector<int64_t>{1}) {
          for (auto lanes : options.stage_lanes) {
            CaseSpec variant = spec;
            variant.config.split_size = split;
            variant.config.schedule = schedule;
            variant.config.chunks = static_cast<int>(chunks);
            variant.config.stage_lanes = static_cast<int>(lanes);
            // One lane is the default and keeps the names that baselines already hold.
            const auto lanes_part = lanes == 1 ? std::string() : "/lanes:" + std::to_string(lanes);
            const auto chunks_part = interleaved ? "/chunks:" + std::to_string(chunks) : std::string();
            variant.name = base + gpus + "/split:" + std::to_string(split) + "/schedule:" + schedule + chunks_part +
                           lanes_part + graph;
            if (interleaved && chunks > 1 && micro_batch_count(batch, split) % spec.gpus != 0 &&
                variant.skip_reason.empty()) {
              variant.skip_reason = "interleaved-1f1b needs the micro-batches to be a multiple of the devices";
            }
            cases.push_back(variant);
          }
        }
      }
    }
  } else if (strategy.name == "data_parallel") {
    for (const auto& replicate : options.dp_replicates) {
      CaseSpec variant = spec;
      variant.config.dp_replicate = replicate;
      variant.name = base + gpus + "/replicate:" + replicate + graph;
      // LibTorch's data_parallel builds replicas on the host every step and gathers CUDA tensors only.
      if (replicate == "clone" && spec.cuda_graph) {
        if (options.cuda_graphs.size() > 1) continue;  // listed only when graphs alone were asked for
        variant.skip_reason = "data_parallel replicate:clone cannot be captured in a CUDA graph (it builds its "
                              "replicas on the host every step)";
      } else if (replicate == "clone" && visible_gpus == 0) {
        variant.skip_reason = "needs GPUs, 0 visible (LibTorch's data_parallel gathers CUDA tensors only)";
      }
      cases.push_back(variant);
    }
  } else if (strategy.distributed) {
    for (auto bucket : options.bucket_mibs) {
      for (bool overlap : options.overlaps) {
        for (const auto& scaling : options.scalings) {
          CaseSpec ranked = spec;
          ranked.config.bucket_mib = bucket;
          ranked.config.overlap = overlap;
          ranked.scaling = scaling;
          if (scaling == "weak") {
            ranked.global_batch = batch * ranked.gpus;
          } else {
            ranked.config.batch_size = batch / ranked.gpus;
            if (batch % ranked.gpus != 0 && ranked.skip_reason.empty()) {
              ranked.skip_reason = "strong scaling needs a batch divisible by " + std::to_string(ranked.gpus) + " ranks";
            }
          }
          ranked.name = base + gpus + "/bucket_mib:" + format_number(bucket) + "/overlap:" + (overlap ? "on" : "off") +
                        "/scaling:" + scaling + graph;
          cases.push_back(ranked);
        }
      }
    }
  } else {
    spec.name = (strategy.min_devices > 1 ? base + gpus : base) + graph;
    cases.push_back(spec);
  }
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
  return std::to_string(spec.gpu_ids.size()) + " " + spec.strategy->device_role + " on " +
         std::to_string(distinct.size()) + (distinct.size() == 1 ? " GPU" : " GPUs");
}

void check_devices(const Options& options, int visible_gpus) {
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
    if (!StrategyRegistry::instance().get(name).distributed) continue;
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
  const bool pipeline = spec.config.split_size > 0;
  const nlohmann::ordered_json timeline = {
      {"case", spec.name},
      {"schedule", pipeline ? spec.config.schedule : "gpipe"},
      {"devices", spec.gpus},
      {"micro_batches", pipeline ? micro_batch_count(spec.config.batch_size, spec.config.split_size) : 1},
      {"chunks", pipeline && schedule_info(spec.config.schedule).uses_chunks ? spec.config.chunks : 1},
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
    if (const auto predicted = predict_staged_case(spec)) {
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
  return visible_gpus > 0 ? std::max(visible_gpus, 2) : kCpuStandInDevices;
}

std::vector<CaseSpec> build_cases(const Options& options, int visible_gpus) {
  auto& registry = StrategyRegistry::instance();
  std::vector<const StrategyInfo*> strategies;
  if (options.strategies.empty()) {
    strategies = registry.all();
  } else {
    for (const auto& name : options.strategies) strategies.push_back(&registry.get(name));
  }

  std::vector<CaseSpec> cases;
  for (const auto* strategy : strategies) {
    for (const auto& model : options.models) {
      for (auto batch : options.batch_sizes) {
        // A language model's samples are sequences (--seq), an image model's images (--image).
        const bool language_model = is_language_model(model);
        for (auto sample : language_model ? options.seq_lens : options.image_sizes) {
          for (auto precision : options.precisions) {
            for (auto data : options.data_modes) {
              for (bool graph : options.cuda_graphs) {
                CaseSpec spec;
                spec.strategy = strategy;
                spec.data = data;
                spec.cuda_graph = graph;
                spec.config.model = model;
                spec.config.batch_size = batch;
                (language_model ? spec.config.seq_len : spec.config.image_size) = sample;
                spec.config.precision = precision;
                spec.config.loss = options.loss;
                fit_config_to_model(spec.config);
                spec.config.cut = options.cut;
                spec.global_batch = batch;
                add_strategy_cases(spec, options, visible_gpus, cases);
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

void set_device_counters(benchmark::State& state, const std::vector<double>& peak_bytes,
                         const std::vector<double>& busy_seconds, double step_seconds) {
  constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
  for (size_t i = 0; i < peak_bytes.size(); ++i) state.counters["peak_mem_gib_dev" + std::to_string(i)] = peak_bytes[i] / kGiB;
  for (size_t i = 0; i < busy_seconds.size(); ++i) {
    const double busy = std::min(1.0, busy_seconds[i] / step_seconds);
    state.counters["busy_frac_dev" + std::to_string(i)] = busy;
    state.counters["bubble_frac_dev" + std::to_string(i)] = 1.0 - busy;
  }
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

void set_training_counters(benchmark::State& state, const CaseSpec& spec, double seconds, int64_t steps,
                           double params, double forward_flops_per_sample) {
  const double samples = static_cast<double>(steps) * spec.global_batch;
  state.SetItemsProcessed(static_cast<int64_t>(samples));
  state.counters["step_ms"] = seconds / steps * 1e3;
  // Training is counted as 3 forwards (docs/METRICS.md).
  state.counters["tflops"] = 3.0 * forward_flops_per_sample * samples / seconds / 1e12;
  state.counters["params"] = params;
  state.counters["batch"] = static_cast<double>(spec.global_batch);
  if (is_language_model(spec.config.model)) {
    state.counters["seq"] = static_cast<double>(spec.config.seq_len);
    state.counters["tokens_per_second"] = samples * static_cast<double>(spec.config.seq_len) / seconds;
  } else {
    state.counters["image"] = static_cast<double>(spec.config.image_size);
  }
  state.counters["gpus"] = spec.gpus;
  if (spec.strategy->name == "pipeline") state.counters["split_size"] = static_cast<double>(spec.config.split_size);
  if (spec.predicted_step_ms) {
    state.counters["predicted_step_ms"] = *spec.predicted_step_ms;
    state.counters["predicted_rank"] = spec.predicted_rank;
  }
}

int64_t fixed_iterations(const CaseSpec& spec, const Options& options) {
  if (options.iterations > 0) return options.iterations;
  return spec.strategy->distributed ? kDefaultDistributedIterations : 0;
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

void run_local_case(benchmark::State& state, const CaseSpec& spec, const Options& options) {
  try {
    auto& prepared = prepare(spec, options);
    const auto& devices = prepared.strategy->devices();
    DeviceTimer timer(devices, options.timer);
    double seconds = 0;
    for (auto _ : state) {
      timer.start();
      for (int step = 0; step < options.steps_per_iteration; ++step) prepared.step();
      const double elapsed = timer.stop();
      state.SetIterationTime(elapsed);
      seconds += elapsed;
    }
    synchronize_devices(devices);
    const int64_t steps = state.iterations() * options.steps_per_iteration;
    set_training_counters(state, spec, seconds, steps, prepared.params, prepared.forward_flops_per_sample);
    set_device_counters(state, peak_memory_bytes(devices), prepared.profile.busy_seconds.value_or(std::vector<double>{}),
                        seconds / static_cast<double>(steps));
    for (const auto& [name, value] : prepared.strategy->counters()) state.counters[name] = value;
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
          progress.case_started(spec.name);
          if (spec.strategy->distributed) {
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
