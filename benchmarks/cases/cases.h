// The benchmark matrix (strategy x model x batch x image x precision x data x strategy
// options) as data: each case's fields, name and config, built from the options and the
// strategies' declarations. Nothing here runs a case: benchmarks/run/case_runner.h registers
// them with Google Benchmark and runs them.
#pragma once

#include "benchmarks/config/options.h"

#include <nlohmann/json.hpp>

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
// Without GPUs, --gpus may ask for up to this many stand-ins (a 2-D mesh needs 4).
inline constexpr int kMaxCpuStandInDevices = 8;

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

// "/image:128", or "/seq:1024" for a language model: the sample's part of a case name.
std::string sample_part(const RunConfig& config);

// The image side, or a language model's sequence length.
int64_t sample_size(const RunConfig& config);

// The GPUs a case's devices are on (1 for --devices=0,0).
int distinct_gpus(const CaseSpec& spec);

}  // namespace parbench
