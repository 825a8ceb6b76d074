// The benchmark matrix (strategy x model x batch x image x precision x data x strategy
// options), registered with Google Benchmark at run time.
#pragma once

#include "benchmarks/options.h"

#include <benchmark/benchmark.h>

#include <map>
#include <string>
#include <vector>

namespace parbench {

struct CaseSpec {
  std::string name;
  const StrategyInfo* strategy = nullptr;
  RunConfig config;          // config.batch_size: images per step in one process (one ddp rank)
  DataMode data = DataMode::kDevice;
  int gpus = 1;              // devices the case uses (ddp: ranks)
  int64_t global_batch = 0;  // images per step over all devices and ranks
  std::string scaling;       // ddp: weak or strong
  bool cuda_graph = false;   // the step is captured once and replayed (benchmarks/graphed_step.h)
  std::string skip_reason;   // non-empty: reported as skipped, not run
};

std::vector<CaseSpec> build_cases(const Options& options, int visible_gpus);

// Registers every case; train cases run through run_local_case or, for distributed
// strategies, run_distributed_case (benchmarks/distributed_runner.h).
// Repetitions come from Google Benchmark's --benchmark_repetitions (main sets it from
// --repetitions), so case names carry no "/repeats:N" suffix.
void register_cases(const std::vector<CaseSpec>& cases, const Options& options);

void run_local_case(benchmark::State& state, const CaseSpec& spec, const Options& options);

// Step time, images/s, TFLOP/s and the case's shape, from `seconds` spent on
// `steps` training steps.
void set_training_counters(benchmark::State& state, const CaseSpec& spec, double seconds, int64_t steps,
                           double params, double forward_flops_per_image);

// A benchmark label: key=value pairs joined by ';' (docs/JSON.md).
std::string format_label(const std::map<std::string, std::string>& facts);

// "[3/40] name" progress lines on stderr, with the elapsed time of the run.
void report_progress(const CaseSpec& spec, size_t index, size_t total);

}  // namespace parbench
