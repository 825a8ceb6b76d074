// parbench's own command-line options (Google Benchmark's --benchmark_* flags pass through).
#pragma once

#include "core/device_timer.h"
#include "strategies/strategy.h"

#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

namespace parbench {

enum class DataMode { kDevice, kPinned, kHost };

std::string to_string(Precision precision);
std::string to_string(DataMode mode);

// A bad command line: main prints "parbench: <what>" and exits 2.
struct UsageError : std::invalid_argument {
  using std::invalid_argument::invalid_argument;
};

inline constexpr int kValidateAll = std::numeric_limits<int>::max();

struct Options {
  std::string preset = "default";  // default, tutorial, cpu
  std::vector<std::string> models = {"resnet50"};
  std::vector<std::string> strategies;  // empty: every registered strategy
  std::vector<int64_t> batch_sizes = {120};
  std::vector<int64_t> image_sizes = {128};
  std::vector<int64_t> seq_lens = {1024};  // language models (gpt2-*, tinygpt)
  std::vector<Precision> precisions = {Precision::kFloat32};
  std::vector<DataMode> data_modes = {DataMode::kDevice};
  LossKind loss = LossKind::kMse;
  int gpus = 0;  // GPUs for multi-device strategies and ddp ranks; 0: all visible
  // --devices: the GPUs of a multi-device case in stage, replica or rank order, repeats allowed
  // (0,0: two stages on GPU 0); single runs on the first. Empty: GPUs 0..gpus-1.
  std::vector<int> devices;
  int warmup_steps = 5;
  int steps_per_iteration = 1;
  int repetitions = 5;
  int64_t iterations = 0;  // fixed iterations per repetition; 0: Google Benchmark's min-time rule
  TimerKind timer = TimerKind::kEvent;
  // Busy and bubble fractions, from one step profiled in a companion process
  // (benchmarks/profile_companion.h); GPUs only.
  bool busy_profile = true;
  // --trace: a directory for one Chrome/Perfetto trace per case, of one step profiled outside the
  // timed ones (in the profile companion; a ddp rank after its timed steps).
  std::string trace_dir;
  // Capture one training step in a CUDA graph and replay it (strategies that allow it).
  std::vector<bool> cuda_graphs = {false};
  // pipeline
  std::vector<int64_t> split_sizes;  // empty: the tutorial's sweep plus the full batch
  std::vector<std::string> schedules = {"tutorial", "gpipe", "1f1b"};
  std::vector<int64_t> stage_lanes = {1};
  std::vector<int64_t> chunks = {2};  // interleaved-1f1b's chunks per device
  std::string cut;
  // data_parallel
  std::vector<std::string> dp_replicates = {"broadcast"};
  // ddp
  std::vector<double> bucket_mibs = {25.0};
  std::vector<bool> overlaps = {true};
  std::vector<std::string> scalings = {"weak"};
  double dist_timeout_s = 60.0;
  bool allreduce = true;  // register the comm/allreduce sweep when ddp runs
  // --advise: 0 off; else how many of each set-up's best predicted cases run to check the
  // prediction (kValidateAll: every case), besides single (benchmarks/advise.h).
  int advise_validate = 0;
  // --print-schedule: print this schedule's action grid for --gpus devices (default 2),
  // --micro-batches and the first --chunks, and exit.
  std::string print_schedule;
  int64_t micro_batches = 4;
  std::string benchmark_out;  // --benchmark_out, checked for writability up front
  std::string argv;
};

// The tutorial's split-size sweep; the full batch is added by the case builder.
const std::vector<int64_t>& tutorial_split_sizes();

// Splits argv into parbench's options and the arguments for Google Benchmark (argv[0] and
// every --benchmark_* flag). Throws UsageError. `has_gpu` picks the default preset.
Options parse_options(int argc, char** argv, bool has_gpu, std::vector<char*>* benchmark_args);

// The --help text.
std::string usage();

}  // namespace parbench
