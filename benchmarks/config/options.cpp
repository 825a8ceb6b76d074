#include "benchmarks/config/options.h"

#include "benchmarks/config/run_voice.h"
#include "core/text.h"
#include "models/llama_config_file.h"
#include "models/model_zoo.h"
#include "strategies/partition.h"
#include "strategies/whole_number.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <limits>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <set>
#include <sstream>

namespace parbench {
namespace {

constexpr double kMaxOptionNumber = 1e6;           // a strategy's number option: --bucket-mib at most 1 TiB
constexpr double kMinDistTimeoutSeconds = 1;       // --dist-timeout: a second
constexpr double kMaxDistTimeoutSeconds = 86400;   // --dist-timeout: a day
constexpr int64_t kMaxThreadsPerDevice = 1024;     // --threads-per-device
constexpr int64_t kMaxGpus = 4096;                 // --gpus: more than any one job's devices
constexpr int64_t kMaxPrintedMicroBatches = 4096;  // --micro-batches (--print-schedule only)

// The items of a list option's value (--flag=A,B,C). An empty list, or an empty item ("4,,8",
// "4,", ",4"), is refused: it would read as a shorter list than the one meant.
std::vector<std::string> list_items(const std::string& flag, const std::string& text) {
  if (text.empty()) throw UsageError("--" + flag + " needs at least one value");
  std::vector<std::string> items;
  for (size_t begin = 0;;) {
    const auto comma = text.find(',', begin);
    auto item = text.substr(begin, comma == std::string::npos ? std::string::npos : comma - begin);
    if (item.empty()) {
      throw UsageError("--" + flag + "=" + text + " has an empty item (separate the values with single commas, e.g. --" +
                       flag + "=A,B)");
    }
    items.push_back(std::move(item));
    if (comma == std::string::npos) return items;
    begin = comma + 1;
  }
}

// Every list option is read here: each item parsed by `parse` into the value a case's name
// writes, and a value given twice (as written, or as read: 8 and 08, 25 and 25.0) kept once, at
// its first place, as pipeline's --split-sizes always did: swept twice, it would make two cases
// of one name. `keep_repeats`: --devices, a placement, where a repeat shares a GPU.
template <typename T, typename Parse>
std::vector<T> parse_list(const std::string& flag, const std::string& text, Parse parse, bool keep_repeats = false) {
  std::vector<T> values;
  for (const auto& item : list_items(flag, text)) {
    T value = parse(item);
    if (keep_repeats || std::find(values.begin(), values.end(), value) == values.end()) values.push_back(std::move(value));
  }
  return values;
}

std::vector<std::string> name_list(const std::string& flag, const std::string& text) {
  return parse_list<std::string>(flag, text, [](const std::string& item) { return item; });
}

int64_t parse_int(const std::string& flag, const std::string& text, int64_t minimum,
                  int64_t maximum = std::numeric_limits<int>::max()) {
  const auto value = parse_whole_number(text);
  if (!value) throw UsageError("--" + flag + "=" + text + " is not a whole number");
  if (*value < minimum) {
    throw UsageError("--" + flag + "=" + text + " must be at least " + std::to_string(minimum));
  }
  if (*value > maximum) throw UsageError("--" + flag + "=" + text + " must be at most " + std::to_string(maximum));
  return *value;
}

// Numbers of flags are finite, above `minimum_exclusive` and at most `maximum`: "inf", "nan" and
// 1e30 would overflow the durations and byte counts made of them.
double parse_double(const std::string& flag, const std::string& text, double minimum_exclusive, double maximum) {
  const auto parsed = parse_full_number(text);
  if (!parsed) throw UsageError("--" + flag + "=" + text + " is not a number");
  const double value = *parsed;
  if (!std::isfinite(value)) throw UsageError("--" + flag + "=" + text + " is not a finite number");
  if (!(value > minimum_exclusive)) {
    throw UsageError("--" + flag + "=" + text + " must be greater than " + format_number(minimum_exclusive));
  }
  if (value > maximum) throw UsageError("--" + flag + "=" + text + " must be at most " + format_number(maximum));
  return value;
}

constexpr int64_t kMostRepetitions = 100000;

// --benchmark_min_time and --benchmark_min_warmup_time: seconds, at most an hour a repetition
// (Google Benchmark runs a case's iterations until they add up to min_time: nan or 1e12 never do).
constexpr double kMostBenchmarkSeconds = 3600;

// Google Benchmark's numeric flags, checked as parbench's own (Google Benchmark reads "nan" and
// 1e12 without a word, and 0 or -1 repetitions as an empty run that exits 0). Each is a
// flag's name, its least value (`exclusive`: the value must be above it) and its most.
struct BenchmarkNumber {
  const char* name;
  bool whole;
  double least;
  bool exclusive;
  double most;
};
constexpr BenchmarkNumber kBenchmarkNumbers[] = {
    {"benchmark_min_time", false, 0, true, kMostBenchmarkSeconds},
    {"benchmark_min_warmup_time", false, 0, false, kMostBenchmarkSeconds},
    {"benchmark_repetitions", true, 1, false, static_cast<double>(kMostRepetitions)},
};

// Throws UsageError where `text`, the value of `what` (a flag, "--benchmark_min_time", or an
// environment variable), is not a finite number in `number`'s range.
void check_benchmark_value(const BenchmarkNumber& number, const std::string& what, const std::string& text) {
  const auto given = what + "=" + text;
  if (number.whole) {
    const auto value = parse_whole_number(text);
    if (!value) throw UsageError(given + " is not a whole number");
    if (*value < number.least) throw UsageError(given + " must be at least " + format_number(number.least));
    if (*value > number.most) throw UsageError(given + " must be at most " + format_number(number.most));
    return;
  }
  const auto value = parse_full_number(text);
  if (!value) throw UsageError(given + " is not a number of seconds");
  if (!std::isfinite(*value)) throw UsageError(given + " is not a finite number");
  if (number.exclusive ? !(*value > number.least) : !(*value >= number.least)) {
    throw UsageError(given + " must be " + (number.exclusive ? "above " : "at least ") + format_number(number.least) +
                     " (seconds, at most " + format_number(number.most) + ")");
  }
  if (*value > number.most) throw UsageError(given + " must be at most " + format_number(number.most) + " seconds");
}

// A --benchmark_* argument: its value checked where it is one of kBenchmarkNumbers.
void check_benchmark_number(const std::string& argument) {
  for (const auto& number : kBenchmarkNumbers) {
    const auto flag = std::string("--") + number.name;
    if (argument.rfind(flag + "=", 0) == 0) check_benchmark_value(number, flag, argument.substr(flag.size() + 1));
  }
}

// Google Benchmark also reads each flag from its environment variable (BENCHMARK_MIN_TIME, ...).
void check_benchmark_environment() {
  for (const auto& number : kBenchmarkNumbers) {
    std::string variable = number.name;
    std::transform(variable.begin(), variable.end(), variable.begin(), [](unsigned char c) { return std::toupper(c); });
    if (const char* value = std::getenv(variable.c_str())) check_benchmark_value(number, "the variable " + variable, value);
  }
}

// Google Benchmark's own flags (those of the 1.7 line parbench builds with), for telling a
// misspelt --benchmark_* flag up front and for suggesting the nearest known one.
constexpr const char* kBenchmarkFlags[] = {
    "benchmark_list_tests", "benchmark_filter", "benchmark_min_time", "benchmark_min_warmup_time",
    "benchmark_repetitions", "benchmark_enable_random_interleaving", "benchmark_report_aggregates_only",
    "benchmark_display_aggregates_only", "benchmark_format", "benchmark_out", "benchmark_out_format",
    "benchmark_color", "benchmark_counters_tabular", "benchmark_perf_counters", "benchmark_context",
    "benchmark_time_unit"};

// Edits (insertions, deletions, substitutions and swaps of neighbours) that turn `a` into `b`.
size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<std::vector<size_t>> d(a.size() + 1, std::vector<size_t>(b.size() + 1));
  for (size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
  for (size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    for (size_t j = 1; j <= b.size(); ++j) {
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
    }
  }
  return d[a.size()][b.size()];
}

// "unknown option --NAME; did you mean --KNOWN?", or "(see --help)" where no flag is near.
UsageError unknown_option(const std::string& name, const std::vector<std::string>& known) {
  const auto nearest = nearest_flag(name, known);
  return UsageError("unknown option --" + name + (nearest.empty() ? " (see --help)" : "; did you mean --" + nearest + "?"));
}

// --max-noise=0.5% (or 0.5): a percentage, finite and above 0, as a fraction.
double parse_percentage(const std::string& flag, const std::string& text) {
  std::string number = text;
  if (!number.empty() && number.back() == '%') number.pop_back();
  const auto value = parse_full_number(number);
  if (!value || !std::isfinite(*value)) throw UsageError("--" + flag + "=" + text + " is not a percentage (e.g. 0.5%)");
  if (!(*value > 0)) throw UsageError("--" + flag + "=" + text + " must be above 0%");
  return *value / 100;
}

template <typename T>
T pick(const std::string& flag, const std::string& text, const std::vector<std::pair<std::string, T>>& choices) {
  for (const auto& [name, value] : choices) {
    if (name == text) return value;
  }
  throw UsageError("--" + flag + "=" + text + " is not one of: " +
                   joined(choices, ", ", [](const auto& choice) { return choice.first; }));
}

template <typename T>
std::vector<T> pick_list(const std::string& flag, const std::string& text,
                         const std::vector<std::pair<std::string, T>>& choices) {
  return parse_list<T>(flag, text, [&](const std::string& item) { return pick(flag, item, choices); });
}

std::vector<int64_t> int_list(const std::string& flag, const std::string& text, int64_t minimum,
                              bool keep_repeats = false) {
  return parse_list<int64_t>(flag, text, [&](const std::string& item) { return parse_int(flag, item, minimum); },
                             keep_repeats);
}

// --gpus=N or --gpus=LIST: whole counts from 1 to kMaxGpus, in ascending order.
std::vector<int> gpu_count_list(const std::string& flag, const std::string& text) {
  auto counts = parse_list<int>(
      flag, text, [&](const std::string& item) { return static_cast<int>(parse_int(flag, item, 1, kMaxGpus)); });
  std::sort(counts.begin(), counts.end());
  return counts;
}

const std::vector<std::pair<std::string, Precision>> kPrecisions = {{"fp32", Precision::kFloat32},
                                                                    {"bf16", Precision::kBFloat16}};
const std::vector<std::pair<std::string, OptimizerKind>> kOptimizers = {{"sgd", OptimizerKind::kSgd},
                                                                       {"adamw", OptimizerKind::kAdamW}};
const std::vector<std::pair<std::string, Checkpointing>> kCheckpointings = {{"off", Checkpointing::kOff},
                                                                           {"blocks", Checkpointing::kBlocks}};
const std::vector<std::pair<std::string, DataMode>> kDataModes = {
    {"device", DataMode::kDevice}, {"pinned", DataMode::kPinned}, {"host", DataMode::kHost}};
const std::vector<std::pair<std::string, bool>> kOnOff = {{"on", true}, {"off", false}};
const std::vector<std::pair<std::string, bool>> kFitModes = {{"batch", true}, {"off", false}};

// A preset is flags, taken before the command line's (which override them).
std::vector<std::pair<std::string, std::string>> preset_flags(const std::string& preset) {
  if (preset == "tutorial") {
    // PyTorch's model-parallel tutorial: batch 120 of 128x128 images made on the CPU every
    // step, 3 batches per timing, 10 timings, a host clock, no warm-up, no device sync.
    return {{"batch", "120"},        {"image", "128"},     {"data", "host"},
            {"strategies", "single,model_parallel,pipeline"}, {"schedules", "tutorial"},
            {"steps", "3"},          {"repetitions", "10"}, {"iterations", "1"},
            {"warmup", "0"},         {"timer", "host"},    {"optimizer", "sgd"}};
  }
  if (preset == "cpu") {
    // Small enough for a 2-core machine: a few seconds a case.
    // Every strategy computes with the same cores per device: single as many as each rank.
    return {{"batch", "8"}, {"image", "64"}, {"seq", "64"}, {"warmup", "2"}, {"threads-per-device", "auto"}};
  }
  if (preset != "default") throw UsageError("--preset=" + preset + " is not one of: default, tutorial, cpu");
  return {};
}

// A strategy option's values as the case name writes them. Throws UsageError.
std::vector<std::string> strategy_option_values(const StrategyOption& option, const std::string& text) {
  using Kind = StrategyOption::Kind;
  if (option.kind() == Kind::kChoice && option.choices().empty()) {
    // Text the option's values_for checks (--mesh's shapes).
    return parse_list<std::string>(option.flag(), text, [](const std::string& item) { return item; });
  }
  if (option.kind() == Kind::kChoice) {
    std::vector<std::pair<std::string, std::string>> choices;
    for (const auto& choice : option.choices()) choices.emplace_back(choice, choice);
    return pick_list(option.flag(), text, choices);
  }
  return parse_list<std::string>(option.flag(), text, [&option](const std::string& item) {
    auto value = option.kind() == Kind::kInteger ? std::to_string(parse_int(option.flag(), item, option.minimum()))
                                                 : format_number(parse_double(option.flag(), item, 0.0, kMaxOptionNumber));
    if (!option.choices().empty() &&
        std::find(option.choices().begin(), option.choices().end(), value) == option.choices().end()) {
      throw UsageError("--" + option.flag() + "=" + item + " is not one of: " + joined(option.choices(), ", "));
    }
    return value;
  });
}

// "  --flag=LIST           help", its later lines indented under the first.
std::string help_lines(const std::string& flag, const std::string& help) {
  std::string text = "  --" + flag + "=LIST";
  text += std::string(text.size() < 25 ? 25 - text.size() : 1, ' ');
  for (const char character : help) text += character == '\n' ? std::string("\n") + std::string(25, ' ') : std::string(1, character);
  return text + "\n";
}

std::string writability_problem(const std::string& path) {
  // The run writes <path>.partial.<pid>, then renames it over <path> (benchmarks/output/run_output.h):
  // over a device node, a symlink, a FIFO or a process substitution's /dev/fd/N that would replace
  // it with a file, so such a path is refused.
  struct stat link {};
  if (lstat(path.c_str(), &link) == 0 && !S_ISREG(link.st_mode)) {
    if (S_ISDIR(link.st_mode)) return "'" + path + "' is a directory";
    const char* kind = S_ISLNK(link.st_mode)    ? "a symbolic link"
                       : S_ISCHR(link.st_mode)  ? "a character device"
                       : S_ISBLK(link.st_mode)  ? "a block device"
                       : S_ISFIFO(link.st_mode) ? "a FIFO"
                       : S_ISSOCK(link.st_mode) ? "a socket"
                                                : "not a regular file";
    return "'" + path + "' is " + kind + ", not a regular file: parbench writes the file whole and moves it into place, "
           "which would replace it (give a regular file's path)";
  }
  const auto slash = path.rfind('/');
  const std::string directory = slash == std::string::npos ? "." : (slash == 0 ? "/" : path.substr(0, slash));
  if (access(directory.c_str(), W_OK) != 0) return "directory '" + directory + "': " + std::strerror(errno);
  if (access(path.c_str(), F_OK) == 0 && access(path.c_str(), W_OK) != 0) return "'" + path + "': " + std::strerror(errno);
  // What access() allows may still fail (root in /proc, a read-only file system): a file beside
  // it, of a name no other process uses, is made and removed, so that a path that cannot take the
  // partial file fails now, not after the run.
  std::string probe = path + ".partial.probe-XXXXXX";
  const int fd = mkstemp(probe.data());
  if (fd < 0) return "cannot create a file beside it ('" + path + ".partial.<pid>'): " + std::strerror(errno);
  close(fd);
  unlink(probe.c_str());
  return "";
}

}  // namespace

std::string nearest_flag(const std::string& name, const std::vector<std::string>& known) {
  std::string nearest;
  size_t best = std::numeric_limits<size_t>::max();
  for (const auto& flag : known) {
    const size_t distance = edit_distance(name, flag);
    // Near: edits of at most half its length, or one a prefix of the other (--batchsize, --batch).
    const bool prefix = std::min(name.size(), flag.size()) >= 3 && (starts_with(name, flag) || starts_with(flag, name));
    if ((distance <= std::max<size_t>(2, name.size() / 2) || prefix) && distance < best) {
      best = distance;
      nearest = flag;
    }
  }
  return nearest;
}

std::string gpu_sized_note(const Options& options) {
  double heaviest = 0;
  std::string step;
  for (const auto& model : options.models) {
    const auto* info = ModelRegistry::instance().find(model);
    if (info == nullptr) continue;
    const bool tokens = info->language_model();
    for (const auto sample : tokens ? options.seq_lens : options.image_sizes) {
      for (const auto batch : options.batch_sizes) {
        // A training step: the forward, and a backward of about twice its work.
        const double flops = 3 * info->forward_flops_per_sample(sample, RunConfig().num_classes) * static_cast<double>(batch);
        if (flops <= heaviest) continue;
        heaviest = flops;
        const auto side = std::to_string(sample);
        step = model + " at batch " + std::to_string(batch) + " of " +
               (tokens ? side + "-token sequences" : side + "x" + side + " images");
      }
    }
  }
  if (heaviest <= kGpuSizedStepFlops) return "";
  char tflop[32];
  std::snprintf(tflop, sizeof tflop, "%.2g", heaviest / 1e12);
  const auto what = options.preset != "cpu" ? "--preset=" + options.preset : std::string("this run");
  return what + " is sized for GPUs: its heaviest training step (" + step + ") is " + tflop +
         " TFLOP, which on this CPU may take very long; for a CPU-sized run use --preset=cpu" +
         (options.preset != "cpu" ? "" : " with a smaller model, --batch, --image or --seq");
}

std::string to_string(DataMode mode) {
  switch (mode) {
    case DataMode::kPinned: return "pinned";
    case DataMode::kHost: return "host";
    default: return "device";
  }
}

Precision precision_from(const std::string& text) { return pick("precision", text, kPrecisions); }

DataMode data_mode_from(const std::string& text) { return pick("data", text, kDataModes); }

OptimizerKind optimizer_from(const std::string& text) { return pick("optimizer", text, kOptimizers); }

Checkpointing checkpointing_from(const std::string& text) { return pick("checkpoint", text, kCheckpointings); }

std::pair<std::vector<std::string>, bool> option_values(const Options& options, const StrategyOption& option) {
  const auto given = options.strategy_options.find(option.field());
  if (given == options.strategy_options.end()) return {option.defaults(), true};
  return {given->second, false};
}

std::string first_option_value(const Options& options, const std::string& field) {
  for (const auto* strategy : StrategyRegistry::instance().all()) {
    for (const auto& option : strategy->options()) {
      if (option.field() == field) return option_values(options, option).first.front();
    }
  }
  throw std::logic_error("no strategy declares an option " + field);
}

// The lines of --help for the strategies' own options, in their listing order.
std::string strategy_options_help() {
  std::string text;
  std::set<std::string> listed;  // a shared option once, with its first declaration's help
  for (const auto* strategy : StrategyRegistry::instance().all()) {
    for (const auto& option : strategy->options()) {
      if (listed.insert(option.flag()).second) text += help_lines(option.flag(), option.help());
    }
  }
  return text;
}

// Whether this process says what a user should read once: not a rank or profile companion that
// parbench started (each reads the same options again), and under an external launcher rank 0 alone.
namespace {
bool speaks_as_set = true;
}  // namespace

void set_speaks_for_the_run(bool speaks) { speaks_as_set = speaks; }

bool speaks_for_the_run() {
  const char* rank = std::getenv("RANK");
  return speaks_as_set && (rank == nullptr || std::string(rank) == "0");
}

// --models' help line: the registered models, image models apart from language models.
std::string models_help() {
  std::vector<std::string> images, tokens;
  for (const auto* info : ModelRegistry::instance().all()) (info->language_model() ? tokens : images).push_back(info->name);
  std::vector<std::string> parts;
  if (!images.empty()) parts.push_back("image models " + joined(images));
  if (!tokens.empty()) parts.push_back("language models (token sequences) " + joined(tokens));
  parts.push_back("default " + joined(Options().models));
  const std::string text = "models: " + joined(parts, "; ");
  // Wrapped at 100 columns under the flag's help column (25).
  constexpr size_t kWidth = 100 - 25;
  std::string wrapped, line;
  size_t begin = 0;
  while (begin < text.size()) {
    auto end = text.find(' ', begin);
    if (end == std::string::npos) end = text.size();
    const auto word = text.substr(begin, end - begin);
    if (!line.empty() && line.size() + 1 + word.size() > kWidth) {
      wrapped += line + "\n";
      line.clear();
    }
    line += (line.empty() ? "" : " ") + word;
    begin = end + 1;
  }
  return help_lines("models", wrapped + line);
}

std::string usage() {
  std::string text = R"(usage: parbench [parbench options] [Google Benchmark options]

Trains a model under each parallelism strategy on random data and times the training step.
Google Benchmark's own flags all work: --benchmark_filter=REGEX, --benchmark_repetitions=N,
--benchmark_out=FILE --benchmark_out_format=json, --benchmark_min_time=SECONDS, ... Its numbers
are checked as parbench's own (so are its variables BENCHMARK_MIN_TIME, ...): --benchmark_min_time
above 0 and --benchmark_min_warmup_time at least 0, both finite and at most 3600 (seconds);
--benchmark_repetitions from 1 to 100000.

A LIST is values separated by commas (--batch=4,8), none of them empty (4,,8 is refused). A value
given twice (as written, or as read: 8 and 08, 25 and 25.0) runs once, at its first place; in
--devices, a placement, a repeat shares a GPU instead.

  --preset=NAME          default | tutorial | cpu. default: the measured configuration (device
                         data, warm-up, device-synchronised timing); tutorial: PyTorch's
                         model-parallel tutorial as it ran; cpu: small images and batch (the
                         default on a machine without a GPU). Later flags override a preset.
@MODELS@  --strategies=LIST      strategies to run (@STRATEGIES@); default all but @OPT_IN@,
                         which run where named
  --batch=LIST           images (language models: sequences) per step (ddp: per rank in weak scaling,
                         global in strong); default 120
  --image=LIST           image side in pixels; default 128
  --seq=LIST             language models: tokens per sequence, at most the model's context (the
                         GPTs' 1024 or 2048, the Llamas' 131072); default 1024 (cpu preset: 64)
  --model-config=FILE    a Hugging Face config.json of a Llama-architecture model: trains it as a
                         model named after the file's stem (configs/my-llama.json: my-llama), the
                         one model run unless --models names others too; fields parbench does not
                         use are named on stderr
  --precision=LIST       fp32 | bf16 (bf16 autocast, channels-last, fp32 weights); default fp32
  --data=LIST            device (made once on the device) | pinned (pinned host buffers, async copy)
                         | host (randn on the CPU every step, pageable copy: the tutorial's); default device
  --optimizer=LIST       sgd (plain SGD, lr 1e-3: the tutorial's) | adamw (fused AdamW, lr 1e-3, betas
                         0.9,0.999, eps 1e-8, weight decay 0.01; fp32 state); default sgd (the
                         tutorial preset keeps sgd). Named in a case (/optimizer:adamw) unless sgd
  --checkpoint=LIST      off | blocks (activation checkpointing: each residual or transformer block
                         keeps only its input, and its forward runs again in the backward; a
                         language model's loss keeps only the logits, its softmax recomputed chunk
                         by chunk); default off. Named in a case (/checkpoint:blocks) unless off
  --loss=NAME            image models: mse (on one-hot labels, the tutorial's) | ce (cross-entropy);
                         default mse. Language models always train on next-token cross-entropy
  --gpus=N|LIST          GPUs for multi-device strategies and ddp ranks; default all visible.
                         A list (e.g. 1,2,4; run in ascending order) is a
                         scaling run: each multi-device strategy runs at each count of at least
                         its minimum, single once as the 1-GPU point. Minimums:
                         @MIN_DEVICES@.
                         A count above the visible GPUs is skipped (without GPUs each count
                         runs on that many CPU devices). Not with --devices, a --cut of stages
                         per device, --print-schedule or a launcher. The report and the
                         figures then add a scaling view (docs/METRICS.md, "Scaling")
  --devices=LIST         the GPUs a multi-device case uses, in stage, replica or rank order;
                         repeats share a GPU: --devices=0,0 puts both stages of model_parallel and
                         pipeline, or both replicas of data_parallel, on GPU 0 (named /devices:0,0
                         and labelled "2 stages on 1 GPU"; ddp's NCCL ranks cannot share a GPU);
                         single runs on the first; default 0,1,...
  --warmup=N             untimed steps before timing; default 5
  --steps=N              training steps per timed iteration; default 1
  --repetitions=N        repetitions per case (median and spread are reported), at most 100000;
                         default 5
  --iterations=N         timed iterations per repetition; default: Google Benchmark's min-time rule
  --max-noise=PCT        a stopping rule by noise (nvbench's stdrel): each case's repetitions go on
                         until the relative standard deviation of their times is at most PCT
                         percent (e.g. 0.5%), at least --min-repetitions (default 5) and at most
                         --max-repetitions (default 20) of them; the JSON records the noise reached
                         (docs/METRICS.md, "Stopping by noise"). Replaces --repetitions
  --min-repetitions=N    with --max-noise: repetitions before the rule may stop a case (at least 2)
  --max-repetitions=N    with --max-noise: repetitions after which a case stops, noisy or not
  --throttle-threshold=F on GPUs, a repetition whose SM clock ends below F times the GPU's maximum
                         counts as throttled, as one with a throttling clock-event reason does
                         (JSON: throttled); 0 < F <= 1, default 0.9
  --timer=NAME           event (synchronise, then CUDA events on every device) | host (host clock,
                         no device sync: the tutorial's); default event
  --busy-profile=on|off  on GPUs, each case's busy and bubble fractions per device, from one step
                         profiled in a companion process (the timing process never runs a
                         profiler: it would slow its later steps); default on
  --trace=DIR            write DIR/<case>.trace.json (ddp: one per rank), a Chrome/Perfetto trace of
                         one extra step per case, profiled outside the timed steps: host threads
                         with parbench's labelled ranges (F3 stage0, B3 stage1, send, all-reduce,
                         optimizer, ...) and, on GPUs, the streams' kernels and copies; DIR is
                         made if missing (a file there is refused)
  --cuda-graph=LIST      off | on: capture one training step in a CUDA graph and replay it, so the
                         host's dispatch cost leaves the step (every strategy but data_parallel's
                         clone variant; on GPUs); default off
@STRATEGY_OPTIONS@  --cut=SPEC             stage placement for model_parallel/pipeline: balanced, or stages per device
                         such as stem,layer1,layer2|layer3,layer4,head (a ResNet's stages are its
                         blocks, layer3.0, ...; a layer's name stands for its blocks); default the
                         tutorial's cut on 2 devices, balanced otherwise
  --dist-timeout=SECONDS ddp: how long any rank waits for the others before failing, from 1 to
                         86400; default 60
  --allreduce=on|off     run the comm/allreduce sweep with ddp; default on
  --threads-per-device=N|auto|off
                         intra-op CPU threads per device: each rank gets N, a case of D devices in
                         one process D x N. auto: the usable cores / the most devices a case of the
                         run uses (at least 1), so every strategy gets the same cores per device;
                         off: LibTorch's own count. default off (cpu preset: auto)
  --advise=N|all|off     profile each set-up briefly, predict the step time and the peak memory
                         per device of every single, model_parallel, pipeline (schedule
                         simulator), data_parallel and ddp (on GPUs) case, print them ranked per
                         global batch (a case predicted not to fit its devices flagged, last),
                         then run single, the N best predicted (all: every case) and those
                         predicted not to fit, with their predictions as counters
                         (predicted_step_ms, predicted_rank, predicted_peak_gib_dev<i>); with
                         --gpus=LIST each count is profiled, ranked and validated apart; default off
  --fit=batch|off        "will it fit": for each case, find the largest batch (images, sequences;
                         a multiple of its devices) that trains without running out of memory,
                         each probe a child process (set-up, a warm-up step and a step at one
                         batch): from --batch, doubling while it fits or halving while it does
                         not, then bisecting until the next step up is shown to run out of
                         memory; then run the case at that batch, named /fit:batch, with the
                         counters fit_batch, fit_oom_batch, fit_step, fit_probes; default off
  --fit-max-batch=N      --fit=batch searches no higher; default 65536
  --print-schedule=NAME  print the pipeline schedule NAME's action grid and exit: one row per
                         device (--gpus, default 2), one column per time slot, F3/B3/W3 for
                         micro-batch 3's forward, backward or weight gradient, in unit time;
                         with --micro-batches=M (default 4) and --chunks=V (interleaved-1f1b)
  --summary=FILE         also write the verdict printed at the end (per set-up: each strategy's best
                         case, the winner and whether its lead is within the noise, the best split
                         per pipeline schedule) to FILE as Markdown
  --verbose              print Google Benchmark's rows (every repetition, then mean, median, stddev
                         and cv) instead of one line per case, and its context (the host, and every
                         key of the JSON context) on stderr first; the JSON has the context always
  --version              print the version, the commit built from and whether it had changes, and
                         the LibTorch, CUDA and NCCL versions built with ("none" without CUDA)
  --help                 this text

Exit status:
  0  every case ran, or was skipped before it started: too few GPUs, or a combination that
     does not apply (a CUDA graph of data_parallel's clone variant); the skips are listed once,
     at the end
  1  a case failed (an exception, out of memory, a rank that died, hung or timed out) or the
     output file could not be written (a full disk); the other cases still ran and the JSON
     records the failure
  2  bad input: the command line, the launcher's variables, an unwritable --benchmark_out or
     --summary, a --benchmark_out another live run is writing, or a --benchmark_filter that selects no case; nothing ran and no output file was
     written
  3  nothing failed, but the run missed what was asked: no case ran (every one was skipped), or
     --fit=batch reached --fit-max-batch without running out of memory (the largest batch that
     fits was not found); the JSON is written, and the last line says which
Cases that --advise or --fit=batch leave out are reported as skipped, with why. The last line on
stderr sums the run up: "parbench: 12 ran, 9 skipped (...), 1 failed: CASE: WHY", followed, where
the run missed what was asked, by "parbench: incomplete: WHY" (with a failure too: exit 1).
)";
  std::map<int, std::vector<std::string>> by_minimum;
  for (const auto* strategy : StrategyRegistry::instance().all()) {
    if (strategy->min_devices() > 1 || strategy->is_distributed()) {
      by_minimum[strategy->min_devices()].push_back(strategy->name());
    }
  }
  const auto minimums = joined(by_minimum, "; ", [](const auto& entry) {
    return joined(entry.second, ", ") + ": " + std::to_string(entry.first);
  });
  text.replace(text.find("@MIN_DEVICES@"), std::strlen("@MIN_DEVICES@"), minimums);
  text.replace(text.find("@STRATEGIES@"), std::strlen("@STRATEGIES@"), StrategyRegistry::instance().names());
  std::vector<std::string> opt_in;
  for (const auto* strategy : StrategyRegistry::instance().all()) {
    if (strategy->is_opt_in()) opt_in.push_back(strategy->name());
  }
  text.replace(text.find("@OPT_IN@"), std::strlen("@OPT_IN@"), opt_in.empty() ? "none" : joined(opt_in, " and "));
  text.replace(text.find("@STRATEGY_OPTIONS@"), std::strlen("@STRATEGY_OPTIONS@"), strategy_options_help());
  text.replace(text.find("@MODELS@"), std::strlen("@MODELS@"), models_help());
  return text;
}

Options parse_options(int argc, char** argv, bool has_gpu, std::vector<char*>* benchmark_args) {
  Options options;
  bool noise_bounds_given = false;
  std::string config_model;  // --model-config's model, registered as the flag is read

  std::map<std::string, std::function<void(const std::string&, const std::string&)>> handlers = {
      {"preset", [](auto&, auto&) {}},
      {"models", [&](auto& f, auto& v) { options.models = name_list(f, v); }},
      {"model-config", [&](auto& f, auto& v) {
         if (v.empty()) throw UsageError("--" + f + " needs a file (a Hugging Face config.json of a Llama model)");
         if (!config_model.empty()) throw UsageError("--" + f + " is given twice: one configuration file a run");
         std::vector<std::string> unused;
         try {
           config_model = register_llama_config_file(v, &unused);
         } catch (const std::invalid_argument& error) {
           throw UsageError(error.what());
         }
         if (!unused.empty() && speaks_for_the_run()) {
           std::fprintf(stderr, "parbench: --model-config=%s: fields not used: %s\n", v.c_str(), joined(unused).c_str());
         }
       }},
      {"strategies", [&](auto& f, auto& v) { options.strategies = name_list(f, v); }},
      {"batch", [&](auto& f, auto& v) { options.batch_sizes = int_list(f, v, 1); }},
      {"image", [&](auto& f, auto& v) { options.image_sizes = int_list(f, v, 1); }},
      {"seq", [&](auto& f, auto& v) { options.seq_lens = int_list(f, v, 1); }},
      {"precision", [&](auto& f, auto& v) { options.precisions = pick_list(f, v, kPrecisions); }},
      {"data", [&](auto& f, auto& v) { options.data_modes = pick_list(f, v, kDataModes); }},
      {"optimizer", [&](auto& f, auto& v) { options.optimizers = pick_list(f, v, kOptimizers); }},
      {"checkpoint", [&](auto& f, auto& v) { options.checkpoints = pick_list(f, v, kCheckpointings); }},
      {"loss", [&](auto& f, auto& v) { options.loss = pick<LossKind>(f, v, {{"mse", LossKind::kMse}, {"ce", LossKind::kCrossEntropy}}); }},
      {"gpus", [&](auto& f, auto& v) {
         const auto counts = gpu_count_list(f, v);
         options.gpus = counts.size() == 1 ? counts.front() : 0;
         options.gpu_counts = counts.size() == 1 ? std::vector<int>{} : counts;
       }},
      {"devices", [&](auto& f, auto& v) {
         options.devices.clear();
         for (auto index : int_list(f, v, 0, /*keep_repeats=*/true)) options.devices.push_back(static_cast<int>(index));
       }},
      {"warmup", [&](auto& f, auto& v) { options.warmup_steps = static_cast<int>(parse_int(f, v, 0)); }},
      {"steps", [&](auto& f, auto& v) { options.steps_per_iteration = static_cast<int>(parse_int(f, v, 1)); }},
      {"repetitions", [&](auto& f, auto& v) { options.repetitions = static_cast<int>(parse_int(f, v, 1, kMostRepetitions)); }},
      {"iterations", [&](auto& f, auto& v) { options.iterations = parse_int(f, v, 1); }},
      {"max-noise", [&](auto& f, auto& v) { options.max_noise = parse_percentage(f, v); }},
      {"min-repetitions", [&](auto& f, auto& v) {
         options.min_repetitions = static_cast<int>(parse_int(f, v, 2, kMostRepetitions));
         noise_bounds_given = true;
       }},
      {"max-repetitions", [&](auto& f, auto& v) {
         options.max_repetitions = static_cast<int>(parse_int(f, v, 2, kMostRepetitions));
         noise_bounds_given = true;
       }},
      {"throttle-threshold", [&](auto& f, auto& v) {
         options.throttle_threshold = parse_double(f, v, 0.0, std::numeric_limits<double>::max());
         if (options.throttle_threshold > 1) {
           throw UsageError("--" + f + "=" + v + " must be above 0 and at most 1 (a fraction of the maximum SM clock)");
         }
       }},
      {"timer", [&](auto& f, auto& v) { options.timer = pick<TimerKind>(f, v, {{"event", TimerKind::kEvent}, {"host", TimerKind::kHost}}); }},
      {"busy-profile", [&](auto& f, auto& v) { options.busy_profile = pick(f, v, kOnOff); }},
      {"trace", [&](auto& f, auto& v) {
         if (v.empty()) throw UsageError("--" + f + " needs a directory");
         options.trace_dir = v;
       }},
      {"cuda-graph", [&](auto& f, auto& v) { options.cuda_graphs = pick_list(f, v, kOnOff); }},
      {"print-schedule", [&](auto&, auto& v) { options.print_schedule = v; }},
      {"micro-batches", [&](auto& f, auto& v) { options.micro_batches = parse_int(f, v, 1, kMaxPrintedMicroBatches); }},
      {"cut", [&](auto&, auto& v) { options.cut = v; }},
      {"dist-timeout", [&](auto& f, auto& v) {
         options.dist_timeout_s = parse_double(f, v, 0.0, kMaxDistTimeoutSeconds);
         if (options.dist_timeout_s < kMinDistTimeoutSeconds) {
           throw UsageError("--" + f + "=" + v + " must be at least " + format_number(kMinDistTimeoutSeconds) +
                            " second (and at most " + format_number(kMaxDistTimeoutSeconds) +
                            "): shorter, every rendezvous and collective would time out before the ranks meet");
         }
       }},
      {"allreduce", [&](auto& f, auto& v) { options.allreduce = pick(f, v, kOnOff); }},
      {"threads-per-device", [&](auto& f, auto& v) {
         if (v == "auto" || v == "off") {
           options.threads_per_device = v == "auto" ? kThreadsPerDeviceAuto : 0;
         } else if (!parse_whole_number(v)) {
           throw UsageError("--" + f + "=" + v + ": expected N (threads, at least 1), auto or off");
         } else {
           options.threads_per_device = static_cast<int>(parse_int(f, v, 1, kMaxThreadsPerDevice));
         }
       }},
      {"verbose", [&](auto& f, auto& v) { options.verbose = pick(f, v, kOnOff); }},
      {"summary", [&](auto& f, auto& v) {
         if (v.empty()) throw UsageError("--" + f + " needs a file");
         options.summary = v;
       }},
      {"advise", [&](auto& f, auto& v) {
         // off: no profile and no predictions, the default (as --fit=off and --busy-profile=off)
         if (v == "all" || v == "off") {
           options.advise_validate = v == "all" ? kValidateAll : 0;
         } else if (!parse_whole_number(v)) {
           throw UsageError("--" + f + "=" + v + ": expected N (the best N predicted cases run, at least 1), all or off");
         } else {
           options.advise_validate = static_cast<int>(parse_int(f, v, 1));
         }
       }},
      {"fit", [&](auto& f, auto& v) { options.fit_batch = pick(f, v, kFitModes); }},
      {"fit-max-batch", [&](auto& f, auto& v) { options.fit_max_batch = parse_int(f, v, 1); }},
  };
  std::set<std::string> strategy_flags;  // a shared option's flag, set once for every strategy declaring it
  for (const auto* strategy : StrategyRegistry::instance().all()) {
    for (const auto& option : strategy->options()) {
      if (!strategy_flags.insert(option.flag()).second) continue;
      const auto added = handlers.emplace(option.flag(), [&options, &option](auto&, auto& v) {
        options.strategy_options[option.field()] = strategy_option_values(option, v);
      });
      if (!added.second) {
        throw std::logic_error("strategy " + strategy->name() + "'s option --" + option.flag() + " is one of parbench's own");
      }
    }
  }
  // Every flag a command line may hold: an unknown one is refused by name, before a following
  // argument is taken as its value, with the nearest known one suggested.
  std::vector<std::string> known = {"help", "version"};
  for (const auto& [name, handler] : handlers) known.push_back(name);
  known.insert(known.end(), std::begin(kBenchmarkFlags), std::end(kBenchmarkFlags));

  std::vector<std::pair<std::string, std::string>> flags;
  benchmark_args->push_back(argv[0]);
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    options.argv += (i > 1 ? " " : "") + arg;
    if (arg.rfind("--benchmark_", 0) == 0) {
      const auto name = arg.substr(2, arg.find('=') == std::string::npos ? std::string::npos : arg.find('=') - 2);
      if (std::find(std::begin(kBenchmarkFlags), std::end(kBenchmarkFlags), name) == std::end(kBenchmarkFlags)) {
        throw unknown_option(name, known);
      }
      benchmark_args->push_back(argv[i]);
      if (arg.rfind("--benchmark_out=", 0) == 0) options.benchmark_out = arg.substr(std::strlen("--benchmark_out="));
      check_benchmark_number(arg);
      continue;
    }
    if (arg.rfind("--", 0) != 0) throw UsageError("unexpected argument '" + arg + "' (see --help)");
    if (arg == "--verbose") {  // a switch: it takes no value
      flags.emplace_back("verbose", "on");
      continue;
    }
    const auto equals = arg.find('=');
    const auto name = arg.substr(2, equals == std::string::npos ? std::string::npos : equals - 2);
    if (name == "help" || name == "version") throw UsageError("--" + name + " takes no value");  // main answers them
    if (!handlers.count(name)) throw unknown_option(name, known);
    if (equals != std::string::npos) {
      flags.emplace_back(name, arg.substr(equals + 1));
    } else if (i + 1 < argc) {
      flags.emplace_back(name, argv[++i]);
      options.argv += std::string(" ") + argv[i];
    } else {
      throw UsageError(arg + " needs a value (see --help)");
    }
  }

  check_benchmark_environment();

  std::string preset = has_gpu ? "default" : "cpu";
  for (const auto& [name, value] : flags) {
    if (name == "preset") preset = value;
  }
  auto preset_then_given = preset_flags(preset);
  preset_then_given.insert(preset_then_given.end(), flags.begin(), flags.end());
  options.preset = preset;
  for (const auto& [name, value] : preset_then_given) {
    handlers.at(name)(name, value);  // every name is known: the preset's, and the given ones checked above
  }

  if (!config_model.empty()) {
    const bool models_given = std::any_of(flags.begin(), flags.end(), [](const auto& flag) { return flag.first == "models"; });
    if (!models_given) options.models = {config_model};
  }
  if (noise_bounds_given && options.max_noise == 0) {
    throw UsageError("--min-repetitions and --max-repetitions apply only with --max-noise");
  }
  if (options.max_noise > 0) {
    if (options.min_repetitions > options.max_repetitions) {
      throw UsageError("--min-repetitions=" + std::to_string(options.min_repetitions) + " is more than --max-repetitions=" +
                       std::to_string(options.max_repetitions));
    }
    for (auto* arg : *benchmark_args) {
      if (std::string(arg).rfind("--benchmark_repetitions", 0) == 0) {
        throw UsageError("--max-noise sets each case's repetitions: give --min-repetitions and --max-repetitions, "
                         "not --benchmark_repetitions");
      }
    }
  }

  const bool explicit_cut = !options.cut.empty() && options.cut != "balanced";
  if (!options.gpu_counts.empty()) {
    // A scaling run: each count places its devices on GPUs 0..count-1, with the balanced cut.
    const auto flag = "--gpus=" + joined(options.gpu_counts, ",", [](int count) { return std::to_string(count); });
    if (!options.devices.empty()) {
      throw UsageError(flag + " and --devices cannot be combined: a list of counts runs each on GPUs 0 to count-1 "
                       "(give one count with --devices, or leave --devices out)");
    }
    if (explicit_cut) {
      throw UsageError(flag + " and --cut=" + options.cut + " cannot be combined: a cut of stages per device fits one "
                       "count (give one --gpus count, or --cut=balanced)");
    }
    if (!options.print_schedule.empty()) {
      throw UsageError(flag + " and --print-schedule cannot be combined: a grid is drawn for one device count");
    }
  }
  const size_t cut_parts = std::count(options.cut.begin(), options.cut.end(), '|') + 1;
  // Each model is checked from its declaration, without building it: only the processes that
  // train a model build it (gpt2-large holds 3 GB of weights).
  for (const auto& model : options.models) {
    const ModelInfo* info = nullptr;
    try {
      info = &ModelRegistry::instance().get(model);
    } catch (const std::invalid_argument& error) {
      throw UsageError(std::string("--models: ") + error.what());
    }
    if (info->language_model()) {
      for (auto seq : options.seq_lens) {
        try {
          check_sequence_length(model, seq);
        } catch (const std::invalid_argument& error) {
          throw UsageError(error.what());
        }
      }
    } else {
      for (auto image : options.image_sizes) {
        if (image < info->sample.min_side) {
          throw UsageError("--image=" + std::to_string(image) + " is smaller than " + model + " accepts (at least " +
                           std::to_string(info->sample.min_side) + ")");
        }
      }
    }
    if (explicit_cut) {
      try {
        parse_cut(options.cut, info->stage_names, cut_parts, info->stage_groups);
      } catch (const std::invalid_argument& error) {
        throw UsageError(error.what());
      }
    }
  }
  for (const auto& strategy : options.strategies) {
    try {
      StrategyRegistry::instance().get(strategy);
    } catch (const std::invalid_argument& error) {
      throw UsageError(std::string("--strategies: ") + error.what());
    }
  }
  if (!options.trace_dir.empty()) {
    mkdir(options.trace_dir.c_str(), 0755);  // an existing one is fine; stat() and access() say the rest
    struct stat trace {};
    if (stat(options.trace_dir.c_str(), &trace) == 0 && !S_ISDIR(trace.st_mode)) {
      throw UsageError("--trace=" + options.trace_dir + " is not a directory (it names a file): give a directory for the "
                       "traces, new or existing");
    }
    if (access(options.trace_dir.c_str(), W_OK) != 0) {
      throw UsageError("cannot write traces into --trace=" + options.trace_dir + ": " + std::strerror(errno));
    }
  }
  if (!options.benchmark_out.empty()) {
    const auto problem = writability_problem(options.benchmark_out);
    if (!problem.empty()) throw UsageError("cannot write --benchmark_out=" + options.benchmark_out + ": " + problem);
  }
  if (!options.summary.empty()) {
    if (options.summary == options.benchmark_out) {
      throw UsageError("--summary=" + options.summary + " is --benchmark_out's file too: give each its own");
    }
    const auto problem = writability_problem(options.summary);
    if (!problem.empty()) throw UsageError("cannot write --summary=" + options.summary + ": " + problem);
  }
  return options;
}

}  // namespace parbench
