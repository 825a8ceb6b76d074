#include "benchmarks/run/case_runner.h"

#include "benchmarks/advise/advise.h"
#include "benchmarks/config/test_hooks.h"
#include "benchmarks/measure/device_stats.h"
#include "benchmarks/measure/graphed_step.h"
#include "benchmarks/measure/memory.h"
#include "benchmarks/measure/mfu.h"
#include "benchmarks/measure/noise_rule.h"
#include "benchmarks/output/counters.h"
#include "benchmarks/output/outcomes.h"
#include "benchmarks/run/batch_source.h"
#include "benchmarks/run/distributed_runner.h"
#include "benchmarks/run/profile_companion.h"
#include "core/counter_table.h"
#include "benchmarks/run/threads.h"
#include "core/device_timer.h"
#include "core/text.h"
#include "models/model_zoo.h"
#include "strategies/optimizer.h"
#include "strategies/pipeline_schedule.h"
#include "strategies/staged_options.h"
#include "strategies/training.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <thread>

namespace parbench {

namespace {

PARBENCH_DECLARE_COUNTER(Counter("setup_s").unit("s").lower_is_better()
                             .means("the strategy's set-up: the model built, placed and sharded on its devices, "
                                    "until they are idle (a distributed case: per rank)"));

// A set-up strategy kept across Google Benchmark's calls of one case (its repetitions), so
// set-up and warm-up happen once per case.
struct PreparedCase {
  std::string name;
  std::unique_ptr<Strategy> strategy;
  std::unique_ptr<BatchSource> source;
  std::unique_ptr<GraphedStep> graphed;  // set when the case replays a captured step
  double params = 0;
  double forward_flops_per_sample = 0;
  double setup_seconds = 0;  // the strategy's set-up, the devices synchronised after it
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
  release_cached_memory();
}

// The GPUs the local cases of this process have set up on.
std::vector<torch::Device>& local_case_gpus() {
  static std::vector<torch::Device> gpus;
  return gpus;
}

// Set-up, warm-up and, for a graphed case, the capture: everything before the timed steps.
std::unique_ptr<PreparedCase> make_prepared_case(const CaseSpec& spec, const Options& options) {
  test_hooks::at_case_setup(spec.name);
  test_hooks::at_case_batch(spec.config.batch_size);
  const auto devices = case_devices(spec);
  for (const auto& device : devices) {
    auto& used = local_case_gpus();
    if (device.is_cuda() && std::find(used.begin(), used.end(), device) == used.end()) used.push_back(device);
  }
  // The previous case's graph, if any, is gone (prepare released it; a profile runs in a
  // process of its own): what earlier work left is not this case's.
  release_leftover_memory(devices);
  reset_peak_memory(devices);
  auto fresh = std::make_unique<PreparedCase>();
  fresh->before_setup = allocator_stats(devices);
  fresh->name = spec.name;
  fresh->strategy = spec.strategy->create();
  const auto config = spec.config;
  const auto setup_began = std::chrono::steady_clock::now();
  fresh->strategy->setup([&config](torch::Device on) { return make_case_model(config, on); }, devices, config);
  synchronize_devices(devices);
  fresh->setup_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - setup_began).count();
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

namespace {

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

}  // namespace

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
  release_leftover_memory(devices);  // the cuBLAS workspaces too: ranks may share these GPUs next
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

void release_local_case() {
  release_prepared_case();  // its graph, if any, with it: no graph of this process is alive now
  release_leftover_memory(local_case_gpus());
}

int64_t fixed_iterations(const CaseSpec& spec, const Options& options) {
  if (options.iterations > 0) return options.iterations;
  return spec.strategy->is_distributed() ? kDefaultDistributedIterations : 0;
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
    // The case's devices' share of the cores, as every rank gets one device's (benchmarks/run/threads.h).
    apply_threads_per_device(options.threads_per_device, spec.gpus);
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
    state.counters["setup_s"] = prepared.setup_seconds;
    set_device_counters(state, peak_memory_bytes(devices), prepared.profile.busy_seconds.value_or(std::vector<double>{}),
                        seconds / static_cast<double>(steps));
    for (const auto& [name, value] : case_memory_counters(prepared, devices)) state.counters[name] = value;
    for (const auto& [name, value] : prepared.strategy->counters()) state.counters[name] = value;
    for (const auto& [name, value] : stall_counters(iteration_seconds)) state.counters[name] = value;
    auto facts = prepared.strategy->describe();
    for (const auto& [name, value] : prepared.strategy->model().forward_facts()) facts[name] = value;
    if (prepared.peaks) add_case_mfu(*prepared.peaks, state.counters["tflops"] * 1e12, spec, state.counters, facts);
    facts["devices"] = device_kind(devices.front());
    facts["intra_op_threads"] = std::to_string(at::get_num_threads());
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
