// The benchmark matrix (strategy x model x batch x image x precision x data x strategy
// options), registered with Google Benchmark at run time.
#pragma once

#include "benchmarks/measure/nvml.h"
#include "benchmarks/config/options.h"

#include <benchmark/benchmark.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <map>
#include <optional>
#include <regex>
#include <string>
#include <vector>

namespace parbench {

// One part of a case's identity: a "/key:value" of its name (strategy and model are the name's
// path elements) and a field of its JSON entry (docs/JSON.md, "fields").
struct CaseField {
  std::string key;
  std::string text;     // as the name writes it
  bool number = false;  // a number in the JSON, else a string
  bool named = true;    // in the name: not an option at its unnamed value, nor graph off
};

// --fit=batch's search for one case (benchmarks/advise/fit.h).
struct FitSearch {
  int64_t largest_batch = 0;         // the largest batch probed that fits; 0: none
  std::optional<int64_t> oom_batch;  // the smallest probed that ran out of memory: largest + step
  int64_t step = 1;                  // the batches probed are multiples of it
  int probes = 0;
  std::string failure;               // non-empty: the search could not finish (why)
};

struct CaseSpec {
  std::string name;               // case_name(fields)
  std::vector<CaseField> fields;  // strategy, model, set-up, placement, the strategy's options, graph
  const StrategyInfo* strategy = nullptr;
  RunConfig config;          // config.batch_size: samples per step in one process (one ddp rank)
  DataMode data = DataMode::kDevice;
  int gpus = 1;              // devices the case uses (ddp: ranks)
  std::vector<int> gpu_ids;  // --devices: the GPU of each device, in order; empty: 0..gpus-1
  int64_t global_batch = 0;  // images per step over all devices and ranks
  bool cuda_graph = false;   // the step is captured once and replayed (benchmarks/measure/graphed_step.h)
  std::string skip_reason;   // non-empty: reported as skipped, not run
  bool wants_more_gpus = false;  // skipped only because more GPUs are needed than are visible (advise predicts it)
  // --advise: the predicted step time and its rank among the set-up's cases (benchmarks/advise/advise.h).
  std::optional<double> predicted_step_ms;
  int predicted_rank = 0;
  std::vector<double> predicted_peak_bytes;  // --advise: the predicted peak memory per device (none: not predicted)
  // --fit=batch: the search that found the case's batch.
  std::optional<FitSearch> fit;
};

// Without GPUs, multi-device strategies run on this many CPU devices and ddp on as many CPU
// ranks: they show the code paths and the harness, not what the strategies achieve on GPUs.
inline constexpr int kCpuStandInDevices = 2;

// Devices of a multi-device case and ranks of a ddp case: --gpus, else every visible GPU but at
// least 2 (a case that needs more than are visible is skipped), else kCpuStandInDevices.
// With --gpus=LIST, its largest count (the comm/allreduce sweep's ranks).
int multi_device_count(const Options& options, int visible_gpus);

// The device counts a strategy's cases run at, in order: 1 for a strategy on one device;
// multi_device_count for one count; with --gpus=LIST, each count of at least its min_devices.
std::vector<int> strategy_device_counts(const StrategyInfo& strategy, const Options& options, int visible_gpus);

// Every case, in order: by strategy, model, batch, image or seq, precision, data, graph, then
// device count (ascending, --gpus=LIST), then the strategy's options.
std::vector<CaseSpec> build_cases(const Options& options, int visible_gpus);

// "train/<strategy>/<model>/batch:120/...": the named fields, in order.
std::string case_name(const std::vector<CaseField>& fields);

// The fields as a JSON object, numbers as numbers (docs/JSON.md).
nlohmann::ordered_json fields_json(const std::vector<CaseField>& fields);

// The one case `fields` (fields_json's) names, built as build_cases builds it with `options`
// on `visible_gpus`: how a rank gets its case. Throws std::invalid_argument for fields that name
// no case of this binary.
CaseSpec case_from_fields(const nlohmann::json& fields, const Options& options, int visible_gpus);

// The devices a case runs on: its gpu_ids, else GPUs 0..gpus-1, or as many CPU devices where
// there is no GPU.
std::vector<torch::Device> case_devices(const CaseSpec& spec);

// "2 stages on 1 GPU" for a case whose devices share GPUs (--devices=0,0); "" otherwise.
std::string shared_gpu_placement(const CaseSpec& spec);

// Checks --devices against the visible GPUs and the strategies asked for (ddp's NCCL ranks cannot
// share a GPU), and that a --gpus=LIST has a count the visible GPUs can run. Throws UsageError.
void check_devices(const Options& options, int visible_gpus);

// The iterations of each repetition where they are fixed (--iterations; distributed cases
// always), else 0: Google Benchmark's min-time rule decides.
int64_t fixed_iterations(const CaseSpec& spec, const Options& options);

// The name Google Benchmark reports for a case registered as `case_name`: with the suffixes it
// appends (docs/JSON.md), as --benchmark_filter sees it.
std::string benchmark_name(const std::string& case_name, int64_t fixed_iterations);

// --benchmark_filter, applied by parbench as Google Benchmark applies it (an extended regular
// expression searched for in the benchmark name; a leading '-' selects the names it does not
// match; empty or "all" selects all), so that parbench knows which cases will run.
class CaseFilter {
 public:
  explicit CaseFilter(std::string filter);  // throws UsageError for an invalid expression
  bool selects(const std::string& benchmark_name) const;

 private:
  std::regex expression_;
  bool negated_ = false;
};

// "[3/12 00:01:23, about 00:04:10 left] name" on stderr as each case that runs starts (skipped
// cases print nothing): its number among them, the time since the run started and, from the
// second case on, the average time of the cases so far times the cases left.
class RunProgress {
 public:
  RunProgress(size_t cases_to_run, bool print);
  // Google Benchmark calls a case once per repetition: only its first call counts.
  void case_started(const std::string& name);

 private:
  size_t cases_to_run_;
  bool print_;
  size_t started_ = 0;
  std::string current_;
  std::chrono::steady_clock::time_point run_start_ = std::chrono::steady_clock::now();
};

// Registers every case; train cases run through run_local_case or, for distributed
// strategies, run_distributed_case (benchmarks/run/distributed_runner.h). A skipped case reports
// skipped_message(reason) (benchmarks/output/outcomes.h).
// Repetitions come from Google Benchmark's --benchmark_repetitions (main sets it from
// --repetitions), so case names carry no "/repeats:N" suffix.
void register_cases(const std::vector<CaseSpec>& cases, const Options& options, RunProgress& progress);

void run_local_case(benchmark::State& state, const CaseSpec& spec, const Options& options);

// What the profile companion measures of a case outside its timed steps.
struct CaseProfile {
  std::optional<std::vector<double>> busy_seconds;  // per device, one step; GPUs and --busy-profile only
  std::string trace_path;                           // --trace only
};

// Whether a case is profiled at all: busy fractions on GPUs, traces everywhere.
bool wants_profile(const CaseSpec& spec, const Options& options);

// The profile companion's work for one case (benchmarks/run/profile_companion.h): sets it up as
// run_local_case does, profiles a step for its busy time and another for its trace, and frees
// its memory.
CaseProfile profile_case(const CaseSpec& spec, const Options& options);

// "<dir>/<case name, '/' and ':' as '_'><suffix>.trace.json".
std::string trace_path(const std::string& dir, const std::string& case_name, const std::string& suffix = "");

// Ends the profile companion, if one was started: after the last case.
void stop_profile_companion();

// Per device (or ddp rank): peak memory, and where --busy-profile measured it, the busy and
// bubble fractions of a step of step_seconds (docs/METRICS.md).
benchmark::UserCounters device_counters(const std::vector<double>& peak_bytes, const std::vector<double>& busy_seconds,
                                        double step_seconds);
void set_device_counters(benchmark::State& state, const std::vector<double>& peak_bytes,
                         const std::vector<double>& busy_seconds, double step_seconds);

// The GPU (CUDA index) of each device, -1 for a CPU device: what ClockSampler samples.
std::vector<int> clock_device_indices(const std::vector<torch::Device>& devices);

// Each device's repetition from its samples before and after it (empty where not sampled).
std::vector<std::optional<RepetitionClocks>> repetition_clocks(const std::vector<std::optional<ClockSample>>& before,
                                                               const std::vector<std::optional<ClockSample>>& after);

// Per device (or ddp rank) that NVML sampled around the repetition (benchmarks/measure/nvml.h):
// sm_clock_mhz_dev<i>, sm_clock_max_mhz_dev<i>, power_w_dev<i>, temperature_c_dev<i> and
// throttle_reasons_dev<i>, and `throttled` (1 if any device ran throttled, else 0); nothing
// where no device was sampled (docs/METRICS.md, "Clocks and throttling").
void set_clock_counters(benchmark::State& state, const std::vector<std::optional<RepetitionClocks>>& devices,
                        double throttle_threshold);

// "/image:128", or "/seq:1024" for a language model: the sample's part of a case name.
std::string sample_part(const RunConfig& config);

// The image side, or a language model's sequence length.
int64_t sample_size(const RunConfig& config);

// The GPUs a case's devices are on (1 for --devices=0,0).
int distinct_gpus(const CaseSpec& spec);

// Step time, tokens/s for a language model, TFLOP/s and the case's shape, from `seconds` spent
// on `steps` training steps; `samples`, the items processed (Google Benchmark divides them by
// the time for items_per_second): steps x the global batch.
struct TrainingCounters {
  double samples = 0;
  benchmark::UserCounters counters;
};
TrainingCounters training_counters(const CaseSpec& spec, double seconds, int64_t steps, double params,
                                   double forward_flops_per_sample);
// training_counters, set on `state`.
void set_training_counters(benchmark::State& state, const CaseSpec& spec, double seconds, int64_t steps,
                           double params, double forward_flops_per_sample);

// A stall inside a repetition (docs/METRICS.md): `iteration_max_over_median`, its slowest
// iteration's time over its median iteration's, and `stalled` = 1 where that is at least
// kStallRatio over at least kStallMinIterations iterations (fewer cannot tell a stall from the
// rest); absent otherwise. Per repetition.
inline constexpr double kStallRatio = 3.0;
inline constexpr size_t kStallMinIterations = 3;
benchmark::UserCounters stall_counters(const std::vector<double>& iteration_seconds);

// "cuda" or "cpu": the label's `devices` fact (docs/JSON.md).
std::string device_kind(torch::Device device);

// A benchmark label: key=value pairs joined by ';' (docs/JSON.md).
std::string format_label(const std::map<std::string, std::string>& facts);

}  // namespace parbench
