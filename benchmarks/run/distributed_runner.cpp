#include "benchmarks/run/distributed_runner.h"

#include "benchmarks/cases/cases.h"
#include "benchmarks/config/test_hooks.h"
#include "benchmarks/launch/launcher.h"
#include "benchmarks/launch/rank_failure.h"
#include "benchmarks/launch/self_exec.h"
#include "benchmarks/measure/device_stats.h"
#include "benchmarks/measure/graphed_step.h"
#include "benchmarks/measure/memory.h"
#include "benchmarks/measure/mfu.h"
#include "benchmarks/measure/noise_rule.h"
#include "benchmarks/output/context.h"
#include "benchmarks/output/counters.h"
#include "benchmarks/run/batch_source.h"
#include "benchmarks/run/case_runner.h"
#include "benchmarks/run/rank_worker.h"
#include "benchmarks/run/threads.h"
#include "core/device_timer.h"
#include "models/model_zoo.h"
#include "strategies/distributed/store_sync.h"
#include "strategies/training.h"

#ifdef PARBENCH_WITH_CUDA
#include <c10/cuda/CUDACachingAllocator.h>
#endif

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <numeric>

namespace parbench {

std::optional<ReportedRepetition> report_next_repetition(benchmark::State& state, const LaunchedCase& launched,
                                                         int ranks, const Options& options,
                                                         const std::function<RankedRun(World&)>& run_rank) {
  struct Outcome {
    std::optional<RankedRun> run;
    std::string error;
    size_t reported = 0;
  };
  static std::map<std::string, Outcome> outcomes;  // by case: Google Benchmark may interleave repetitions
  auto [entry, first_call] = outcomes.try_emplace(launched.name);
  auto& outcome = entry->second;
  if (first_call) {
    try {
      if (launched_externally()) {
        outcome.run = run_as_external_rank(ranks, run_rank);
      } else {
        // The ranks share the GPUs this process used: what its local cases left goes back first,
        // and they learn what it still holds (benchmarks/launch/rank_failure.h).
        release_local_case();
        const auto holding = reserved_gib_by_gpu();
        std::map<std::string, std::string> environment;
        if (!holding.empty()) environment[kLauncherGpuVariable] = launcher_gpu_text(holding);
        auto arguments = self_arguments();
        // A number, resolved from this run's cases: the ranks' own options would resolve auto from theirs.
        if (options.threads_per_device > 0) {
          arguments.push_back("--threads-per-device=" + std::to_string(options.threads_per_device));
        }
        outcome.run = launch_case(self_binary(), arguments, launched, ranks, options.dist_timeout_s, environment);
        if (!holding.empty()) {
          double most = 0;
          for (const auto& [gpu, gib] : holding) most = std::max(most, gib);
          char text[32];
          std::snprintf(text, sizeof text, "%.2f", most);
          outcome.run->facts["launcher_reserved_gib"] = text;
        }
      }
      note_rank_hosts(outcome.run->hosts, outcome.run->launches);
    } catch (const std::exception& error) {
      outcome.error = first_line(error);
    }
  }
  if (!outcome.error.empty()) {
    state.SkipWithError(outcome.error.c_str());
    return std::nullopt;
  }
  const size_t index = outcome.reported++;
  const auto& repetitions = outcome.run->repetitions;
  if (outcome.run->noise) {
    noise_outcomes()[benchmark_name(launched.name, distributed_iterations(options))] = *outcome.run->noise;
  }
  if (index >= repetitions.size() && options.max_noise > 0) {
    skip_stopped_repetition(state);  // the ranks' noise rule stopped the case
    return std::nullopt;
  }
  if (index >= repetitions.size()) {
    state.SkipWithError(
        ("the ranks ran " + std::to_string(repetitions.size()) + " repetitions and Google Benchmark asked for another")
            .c_str());
    return std::nullopt;
  }
  const auto& seconds = repetitions[index].seconds;
  if (state.max_iterations != static_cast<benchmark::IterationCount>(seconds.size())) {
    state.SkipWithError(("the ranks ran " + std::to_string(seconds.size()) +
                         " iterations, Google Benchmark asked for " + std::to_string(state.max_iterations))
                            .c_str());
    return std::nullopt;
  }
  size_t iteration = 0;
  for (auto _ : state) state.SetIterationTime(seconds[iteration++]);
  return ReportedRepetition{&*outcome.run, index};
}

RankedRun run_training_rank(World& world, const CaseSpec& spec, const Options& options, bool ends_with_case) {
  TORCH_CHECK(world.size() == spec.gpus, spec.name, " needs ", spec.gpus, " ranks, the world has ", world.size());
  const std::vector<torch::Device> devices{world.device()};
  apply_threads_per_device(options.threads_per_device, 1);  // one device's share (benchmarks/run/threads.h)
  RankedRun run;
  RankMeasurements mine;
  {
    if (world.device().is_cuda()) {
      world.report_progress("the GEMM probe");
      const auto peaks = measure_compute_peaks(
          world.device(), peak_math(spec.config.precision, ModelRegistry::instance().get(spec.config.model).fp32_engine));
      run.peak_math = peaks.math;
      run.gpu_name = peaks.gpu_name;
      run.gemm_flops = peaks.gemm_flops;
    }
    world.report_progress("set-up");
    // No graph of this rank is alive here (a case's own ends with its scope below): what the
    // probe and earlier cases left is not this case's.
    release_leftover_memory(devices);
    reset_peak_memory(devices);
    AllocatorWindow memory;
    memory.before_setup = allocator_stats(devices);
    auto strategy = spec.strategy->create();
    auto config = spec.config;
    config.world = &world;
    const auto setup_began = std::chrono::steady_clock::now();
    strategy->setup(
        [&config, &world](torch::Device on) {
          world.report_own_work("building the model");
          test_hooks::while_building_model();
          torch::manual_seed(kRankModelSeed);
          auto model = make_case_model(config, on);
          world.report_progress("set-up");
          return model;
        },
        devices, config);
    synchronize_devices(devices);
    mine.counters["setup_s"] = std::chrono::duration<double>(std::chrono::steady_clock::now() - setup_began).count();
    torch::manual_seed(kRankDataSeed + static_cast<uint64_t>(world.rank()));
    BatchSource source(config, config.batch_size, spec.data, strategy->input_device(), strategy->target_device());
    for (int step = 0; step < options.warmup_steps; ++step) {
      world.report_progress("warm-up step " + std::to_string(step + 1));
      strategy->train_step(source.next());
    }
    std::unique_ptr<GraphedStep> graphed;
    if (spec.cuda_graph && options.warmup_steps > 0) {
      synchronize_devices(devices);
      memory.between_steps = allocator_stats(devices);
    }
    if (spec.cuda_graph) {
      world.report_progress("capturing a step in a CUDA graph");
      graphed = std::make_unique<GraphedStep>(*strategy, source.next());
    }
    const auto step = [&] { train_step(*strategy, graphed.get(), source.next()); };
    synchronize_devices(devices);

    // This rank's GPU, sampled outside the timed iterations: before a repetition's first barrier
    // and after its last iteration's end events have completed.
    auto& sampler = ClockSampler::instance();
    const auto gpus = clock_device_indices(devices);
    std::vector<std::optional<ClockSample>> before;
    RepetitionHooks around;
    around.before = [&](size_t) { before = sampler.sample(gpus); };
    around.after = [&](size_t) { mine.clocks.push_back(repetition_clocks(before, sampler.sample(gpus)).front()); };
    std::optional<NoiseOutcome> noise;
    mine.seconds = time_iterations_together(
        world, options, devices, [&] {
          for (int repeat = 0; repeat < options.steps_per_iteration; ++repeat) step();
        },
        1.0, around, &noise);
    run.noise = noise;
    test_hooks::after_timed_steps(*strategy, world.rank());
    const auto peaks = peak_memory_bytes(devices);
    if (!peaks.empty()) mine.peak_bytes = peaks.front();
    // The memory breakdown after the timed steps (time_iterations_together synchronised the
    // device), before a profiled step adds to the peak; and the strategy's own counters.
    memory.now = allocator_stats(devices, /*release_cublas_workspaces=*/!spec.cuda_graph);
    if (!spec.cuda_graph) memory.between_steps = memory.now;
    memory.batch_bytes = {source.held_bytes_on(world.device())};
    for (const auto& [name, value] : memory_counters(model_state_bytes(*strategy), memory)) mine.counters[name] = value;
    for (const auto& [name, value] : strategy->counters()) mine.counters[name] = value;
    // After the timed steps: a profiler session would slow every later step of this process
    // (benchmarks/run/profile_companion.h). A rank of parbench's launcher ends with its case; one of
    // an external launcher goes on to the next case, so it takes no profile.
    if (ends_with_case && options.busy_profile) {
      world.report_progress("the busy-time step");
      world.barrier("the busy-time step");
      const auto busy = measure_busy_seconds(devices, step);
      if (busy) mine.busy_seconds = busy->front();
    }
    if (ends_with_case && !options.trace_dir.empty()) {
      world.report_progress("the traced step");
      world.barrier("the traced step");
      save_step_trace(devices, step, trace_path(options.trace_dir, spec.name, ".rank" + std::to_string(world.rank())));
    }

    run.facts = strategy->describe();
    run.facts["devices"] = device_kind(world.device());
    run.facts["intra_op_threads"] = std::to_string(at::get_num_threads());
    for (const auto& parameter : strategy->model().module().parameters()) run.params += parameter.numel();
    run.forward_flops_per_sample =
        ModelRegistry::instance().get(config.model).forward_flops_per_sample(sample_size(config), config.num_classes);
    for (const auto& [name, value] : strategy->model().forward_facts()) run.facts[name] = value;
  }
#ifdef PARBENCH_WITH_CUDA
  if (world.device().is_cuda()) c10::cuda::CUDACachingAllocator::emptyCache();
#endif
  world.report_progress("handing in measurements");
  run = gather_run(world, mine, std::move(run));
  world.report_idle();
  return run;
}

void run_distributed_case(benchmark::State& state, const CaseSpec& spec, const Options& options) {
  const auto reported = report_next_repetition(state, {spec.name, fields_json(spec.fields).dump()}, spec.gpus, options,
                                               [&](World& world) { return run_training_rank(world, spec, options, /*ends_with_case=*/false); });
  if (!reported) return;
  const auto& run = *reported->run;
  const auto& repetition = run.repetitions[reported->index];
  const double seconds = std::accumulate(repetition.seconds.begin(), repetition.seconds.end(), 0.0);
  const int64_t steps = state.iterations() * options.steps_per_iteration;
  set_training_counters(state, spec, seconds, steps, run.params, run.forward_flops_per_sample);
  state.counters["world_size"] = run.world_size;
  state.counters["step_ms_rank_spread"] = repetition.rank_spread;
  for (const auto& [name, value] : stall_counters(repetition.seconds)) state.counters[name] = value;
  set_device_counters(state, run.peak_bytes, run.busy_seconds, seconds / static_cast<double>(steps));
  for (const auto& [name, value] : run.counters) state.counters[name] = value;
  set_clock_counters(state, repetition.clocks, options.throttle_threshold);
  auto facts = run.facts;
  if (!run.peak_math.empty()) {
    const ComputePeaks peaks{run.peak_math, run.gpu_name, datasheet_peak(run.gpu_name, run.peak_math), run.gemm_flops};
    add_case_mfu(peaks, state.counters["tflops"] * 1e12, spec, state.counters, facts);
  }
  state.SetLabel(format_label(facts));
}

}  // namespace parbench
