// parbench's own command-line options (Google Benchmark's --benchmark_* flags pass through).
#pragma once

#include "core/device_timer.h"
#include "strategies/strategy.h"

#include <limits>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

namespace parbench {

enum class DataMode { kDevice, kPinned, kHost };

std::string to_string(DataMode mode);
// The inverses, for text to_string wrote. Throw UsageError naming the allowed values.
Precision precision_from(const std::string& text);
DataMode data_mode_from(const std::string& text);
OptimizerKind optimizer_from(const std::string& text);
Checkpointing checkpointing_from(const std::string& text);

// A bad command line: main prints "parbench: <what>" and exits 2.
struct UsageError : std::invalid_argument {
  using std::invalid_argument::invalid_argument;
};

inline constexpr int kValidateAll = std::numeric_limits<int>::max();
// --threads-per-device=auto, until main resolves it (benchmarks/run/threads.h).
inline constexpr int kThreadsPerDeviceAuto = -1;

struct Options {
  std::string preset = "default";  // default, tutorial, cpu
  std::vector<std::string> models = {"resnet50"};
  std::vector<std::string> strategies;  // empty: every registered strategy
  std::vector<int64_t> batch_sizes = {120};
  std::vector<int64_t> image_sizes = {128};
  std::vector<int64_t> seq_lens = {1024};  // language models (ModelInfo::language_model)
  std::vector<Precision> precisions = {Precision::kFloat32};
  std::vector<DataMode> data_modes = {DataMode::kDevice};
  std::vector<OptimizerKind> optimizers = {OptimizerKind::kSgd};
  std::vector<Checkpointing> checkpoints = {Checkpointing::kOff};
  LossKind loss = LossKind::kMse;
  int gpus = 0;  // GPUs for multi-device strategies and ddp ranks; 0: all visible (or a list below)
  // --gpus=LIST with several counts (e.g. 1,2,4), ascending: each multi-device strategy runs at
  // each count of at least its min_devices (a scaling run; gpus is then 0). Empty for one count.
  std::vector<int> gpu_counts;
  // --devices: the GPUs of a multi-device case in stage, replica or rank order, repeats allowed
  // (0,0: two stages on GPU 0); single runs on the first. Empty: GPUs 0..gpus-1.
  std::vector<int> devices;
  int warmup_steps = 5;
  int steps_per_iteration = 1;
  int repetitions = 5;
  // --throttle-threshold: a repetition whose SM clock ends below this fraction of the GPU's
  // maximum counts as throttled (docs/METRICS.md, "Clocks and throttling").
  double throttle_threshold = 0.9;
  // --max-noise (a fraction here, a percentage on the command line): 0 runs --repetitions;
  // otherwise a case's repetitions go on, from --min-repetitions to --max-repetitions, until
  // their relative spread is at most this (benchmarks/measure/noise_rule.h).
  double max_noise = 0;
  int min_repetitions = 5;
  int max_repetitions = 20;
  int64_t iterations = 0;  // fixed iterations per repetition; 0: Google Benchmark's min-time rule
  TimerKind timer = TimerKind::kEvent;
  // Busy and bubble fractions, from one step profiled in a companion process
  // (benchmarks/run/profile_companion.h); GPUs only.
  bool busy_profile = true;
  // --trace: a directory for one Chrome/Perfetto trace per case, of one step profiled outside the
  // timed ones (in the profile companion; a ddp rank after its timed steps).
  std::string trace_dir;
  // Capture one training step in a CUDA graph and replay it (strategies that allow it).
  std::vector<bool> cuda_graphs = {false};
  // The values given for the strategies' own options (StrategyOption), by field, each written as
  // the case name writes it; an option not given sweeps its defaults.
  std::map<std::string, std::vector<std::string>> strategy_options;
  std::string cut;  // model_parallel and pipeline (StagedOptions::cut)
  double dist_timeout_s = 60.0;  // distributed strategies
  bool allreduce = true;  // register the comm/allreduce sweep when a distributed strategy runs
  // --advise: 0 off; else how many of each set-up's best predicted cases run to check the
  // prediction (kValidateAll: every case), besides single (benchmarks/advise/advise.h).
  int advise_validate = 0;
  // --fit=batch: each case run at the largest batch that fits (benchmarks/advise/fit.h), searched up to
  // --fit-max-batch.
  bool fit_batch = false;
  int64_t fit_max_batch = 65536;
  // --print-schedule: print this schedule's action grid for --gpus devices (default 2),
  // --micro-batches and the first --chunks, and exit.
  std::string print_schedule;
  int64_t micro_batches = 4;
  std::string benchmark_out;  // --benchmark_out, checked for writability up front
  // The console and the verdict (benchmarks/output/verdict.h): --verbose prints Google Benchmark's rows
  // (every repetition, then the aggregates) instead of one line per case; --summary=FILE writes
  // the verdict as Markdown, checked for writability as --benchmark_out is.
  bool verbose = false;
  std::string summary;
  // --threads-per-device: the intra-op threads each device (each rank) computes with, so that
  // every strategy gets the same cores per device (benchmarks/run/threads.h). 0: off, LibTorch's
  // own count; kThreadsPerDeviceAuto: the usable cores over the most devices a case of the run
  // uses (the cpu preset's), resolved by main before the cases run.
  int threads_per_device = 0;
  std::string argv;
};

// The values of a strategy option this run sweeps, and whether they are its defaults.
std::pair<std::vector<std::string>, bool> option_values(const Options& options, const StrategyOption& option);

// The first value this run gives the strategy option of field `field`. Throws std::logic_error
// where no strategy declares it.
std::string first_option_value(const Options& options, const std::string& field);

// Splits argv into parbench's options and the arguments for Google Benchmark (argv[0] and
// every --benchmark_* flag). Throws UsageError. `has_gpu` picks the default preset.
Options parse_options(int argc, char** argv, bool has_gpu, std::vector<char*>* benchmark_args);

// The --help text.
std::string usage();

// A training step of more than this many FLOPs is sized for GPUs: a CPU's few cores do some tens
// of GFLOP/s each, so it takes seconds a step, and minutes a case (the cpu preset's heaviest
// step, resnet50 at batch 8 of 64x64 images, is 0.016 TFLOP).
inline constexpr double kGpuSizedStepFlops = 0.5e12;

// For a run on a machine without a GPU: "WHAT is sized for GPUs: ..." naming the preset (where
// not the cpu preset) or the run, its heaviest training step and its TFLOP, and how to get a
// CPU-sized run; "" where no step is heavier than kGpuSizedStepFlops.
std::string gpu_sized_note(const Options& options);

// Of `known` flags (names without the dashes), the one nearest `name` by edits (the first of
// equals), or "" where none is near enough to be the one meant: at most half the name's length
// in edits (at least 2), or one a prefix of the other.
std::string nearest_flag(const std::string& name, const std::vector<std::string>& known);

}  // namespace parbench
