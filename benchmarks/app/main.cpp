// parbench: times one model's training step under each parallelism strategy.
#include "benchmarks/config/run_voice.h"
#include "benchmarks/advise/advise.h"
#include "benchmarks/advise/fit.h"
#include "benchmarks/cases/cases.h"
#include "benchmarks/config/options.h"
#include "benchmarks/launch/elastic_error.h"
#include "benchmarks/launch/rank_protocol.h"
#include "benchmarks/launch/temporary_directory.h"
#include "benchmarks/output/context.h"
#include "benchmarks/output/outcomes.h"
#include "benchmarks/output/run_output.h"
#include "benchmarks/output/verdict.h"
#include "benchmarks/run/allreduce.h"
#include "benchmarks/run/threads.h"
#include "benchmarks/run/case_runner.h"
#include "benchmarks/run/profile_companion.h"
#include "benchmarks/run/rank_worker.h"
#include "strategies/distributed/world.h"
#include "strategies/schedule_simulator.h"

#include <benchmark/benchmark.h>
#include <torch/torch.h>

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <optional>
#include <string>

namespace parbench {
namespace {

// Exit status (docs/RUNNING.md, "Exit status"; --help).
constexpr int kExitAllRan = 0;        // every case ran or was skipped
constexpr int kExitCaseFailed = 1;    // a case failed, or the output could not be written
constexpr int kExitBadInput = 2;      // nothing ran: a bad command line or launcher variables
constexpr int kExitIncomplete = 3;    // nothing failed, but the run missed what was asked (incomplete_run)
constexpr double kMaxScheduleGridCells = 1e6;  // --print-schedule's grid

void check_cut(const Options& options, int visible_gpus) {
  if (options.cut.empty() || options.cut == "balanced") return;
  const int devices = multi_device_count(options, visible_gpus);
  const bool multi_device_cases_run = visible_gpus == 0 || devices <= visible_gpus || !options.devices.empty();
  const auto parts = std::count(options.cut.begin(), options.cut.end(), '|') + 1;
  if (multi_device_cases_run && parts != devices) {
    throw UsageError("--cut=" + options.cut + " places stages on " + std::to_string(parts) + " devices but " +
                     std::to_string(devices) + " are used (" +
                     (visible_gpus > 0 ? "set --gpus, or give one part per GPU"
                                       : "without GPUs multi-device cases run on " +
                                             std::to_string(kCpuStandInDevices) + " CPU devices") +
                     ")");
  }
}

// Keeps the cases --benchmark_filter selects; parbench applies it itself so that the progress
// lines know how many cases will run.
template <typename Case, typename IterationsOf>
void keep_selected(std::vector<Case>& cases, const CaseFilter& filter, IterationsOf iterations_of) {
  cases.erase(std::remove_if(cases.begin(), cases.end(),
                             [&](const Case& spec) {
                               return !filter.selects(benchmark_name(spec.name, iterations_of(spec)));
                             }),
              cases.end());
}

template <typename Case>
size_t count_to_run(const std::vector<Case>& cases) {
  return static_cast<size_t>(
      std::count_if(cases.begin(), cases.end(), [](const Case& spec) { return spec.skip_reason.empty(); }));
}

// --benchmark_out_format (json by default); a usage error for a format Google Benchmark does not
// know (it would print its usage and exit 0, writing nothing).
std::string output_format(const std::vector<char*>& benchmark_args) {
  const std::string flag = "--benchmark_out_format=";
  std::string format = "json";
  for (const char* arg : benchmark_args) {
    if (std::string(arg).rfind(flag, 0) == 0) format = std::string(arg).substr(flag.size());
  }
  if (format != "json" && format != "console" && format != "csv") {
    throw UsageError(flag + format + " is not a format: json, console or csv");
  }
  return format;
}

// Whether --benchmark_counters_tabular is on (a console --benchmark_out's table), read as Google
// Benchmark reads a flag's value: "false", "no", "off" or one of 0, f, n is off.
bool counters_tabular(const std::vector<char*>& benchmark_args) {
  const std::string flag = "--benchmark_counters_tabular";
  bool tabular = false;
  for (const char* arg : benchmark_args) {
    const std::string text = arg;
    if (text == flag) tabular = true;
    if (text.rfind(flag + "=", 0) != 0) continue;
    auto value = text.substr(flag.size() + 1);
    std::transform(value.begin(), value.end(), value.begin(), [](unsigned char c) { return std::tolower(c); });
    tabular = value.size() == 1 ? std::isalnum(static_cast<unsigned char>(value[0])) && value.find_first_of("0fn") != 0
                                : value != "false" && value != "no" && value != "off";
  }
  return tabular;
}

// Whether Google Benchmark's display is its console (--benchmark_format, console by default):
// parbench then prints its own, one line per case and the verdict.
bool display_is_console(const std::vector<char*>& benchmark_args) {
  const std::string flag = "--benchmark_format=";
  std::string format = "console";
  for (const char* arg : benchmark_args) {
    if (std::string(arg).rfind(flag, 0) == 0) format = std::string(arg).substr(flag.size());
  }
  return format == "console";
}

// "`parbench ARGS` on HOST (GPUS), commit SHA": the Markdown summary's first line.
std::string run_description(const std::vector<std::pair<std::string, std::string>>& context) {
  std::map<std::string, std::string> values(context.begin(), context.end());
  const auto gpus = values["gpu_names"] == "none" ? std::string("no GPU") : values["gpu_names"];
  return "`parbench " + values["argv"] + "` on " + values["host"] + " (" + gpus + "), commit " +
         values["git_sha"].substr(0, 10) + (values["git_dirty"] == "true" ? " (dirty)" : "") + ".";
}

// --summary: written whole as --benchmark_out is (write_whole_file). false after a message naming
// the file and the cause when it could not be.
bool write_summary(const std::string& path, const std::string& text) {
  const auto problem = write_whole_file(path, partial_path_of(path), text);
  if (problem.empty()) return true;
  std::fprintf(stderr, "parbench: could not write --summary=%s: %s\n", path.c_str(), problem.c_str());
  return false;
}

// --print-schedule: the grid, or a usage error (thrown) for a schedule or counts it cannot run.
int print_schedule(const Options& options) {
  const auto devices = options.gpus > 0 ? static_cast<size_t>(options.gpus) : 2;
  size_t chunks = 1;
  try {
    if (schedule_info(options.print_schedule).uses_chunks) chunks = std::stoul(first_option_value(options, "chunks"));
  } catch (const std::invalid_argument& error) {
    throw UsageError("--print-schedule=" + options.print_schedule + ": " + error.what());
  }
  // A grid is for reading: devices x (3 slots per micro-batch and chunk, and the fill and drain).
  const double cells = static_cast<double>(devices) *
                       (3.0 * static_cast<double>(options.micro_batches) * static_cast<double>(chunks) +
                        2.0 * static_cast<double>(devices) * static_cast<double>(chunks));
  if (cells > kMaxScheduleGridCells) {
    throw UsageError("--print-schedule=" + options.print_schedule + ": " + std::to_string(devices) + " devices x " +
                     std::to_string(options.micro_batches) + " micro-batches" +
                     (chunks > 1 ? " x " + std::to_string(chunks) + " chunks" : "") +
                     " is too large a grid to draw (at most " + std::to_string(static_cast<long>(kMaxScheduleGridCells)) +
                     " slots; give fewer --gpus or --micro-batches)");
  }
  try {
    std::fputs(format_schedule_grid(options.print_schedule, devices, static_cast<size_t>(options.micro_batches), chunks)
                   .c_str(),
               stdout);
  } catch (const std::invalid_argument& error) {
    throw UsageError("--print-schedule=" + options.print_schedule + ": " + error.what());
  }
  return kExitAllRan;
}

// Why a run in which nothing failed still missed what was asked ("" where it did not): no case
// ran, every one skipped; or --fit=batch reached --fit-max-batch without running out of memory,
// so the largest batch that fits was not found.
std::string incomplete_run(const CaseOutcomes& outcomes, const std::vector<CaseSpec>& cases, const Options& options) {
  if (outcomes.all_skipped()) return "no case ran: every one was skipped (the reasons are above)";
  const auto capped = std::count_if(cases.begin(), cases.end(), [](const CaseSpec& spec) {
    return spec.fit && spec.fit->failure.empty() && !spec.fit->oom_batch;
  });
  if (capped == 0) return "";
  return std::to_string(capped) + (capped == 1 ? " case" : " cases") + " reached --fit-max-batch=" +
         std::to_string(options.fit_max_batch) + " without running out of memory: the largest batch that fits is at " +
         "least that, not found (raise --fit-max-batch)";
}

}  // namespace
}  // namespace parbench

int main(int argc, char** argv) {
  using namespace parbench;
  // A closed stdout or stderr (`parbench ... | head -1`, a closed terminal) must not end a run: a
  // write to it fails instead, and the run and its output file go on. Ranks inherit it.
  std::signal(SIGPIPE, SIG_IGN);
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--help") == 0 || std::strcmp(argv[i], "-h") == 0) {
      std::fputs(usage().c_str(), stdout);
      return kExitAllRan;
    }
    if (std::strcmp(argv[i], "--version") == 0) {
      std::fputs(version_text().c_str(), stdout);
      return kExitAllRan;
    }
  }

  // Ranks started by parbench's own launcher carry hidden flags (benchmarks/run/rank_worker.h).
  const auto worker = take_worker_flags(&argc, argv);
  const bool profile_companion = take_profile_companion_flag(&argc, argv);
  set_speaks_for_the_run(!worker && !profile_companion);
  // Before any thread or rank starts: the ranks inherit it, the context records it.
  set_parbench_environment();
  // Ranks of parbench's launcher and the profile companion keep the signals' default actions:
  // the process that started them kills them.
  if (!worker && !profile_companion) stop_on_interrupts();
  const int visible_gpus = visible_gpu_count();
  Options options;
  std::vector<char*> benchmark_args;
  std::optional<RankInfo> external;  // set when torchrun, srun or mpirun started this process as one rank
  std::string out_format;
  try {
    options = parse_options(argc, argv, visible_gpus > 0, &benchmark_args);
    out_format = output_format(benchmark_args);
    if (!options.print_schedule.empty()) return print_schedule(options);
    if (!worker) external = external_launch(options, visible_gpus);
    if (external && options.fit_batch) {
      throw UsageError("--fit=batch does not apply under a launcher: it starts its own probes, each a whole run");
    }
    if (options.fit_batch && options.advise_validate > 0) {
      throw UsageError("--fit=batch and --advise run one at a time: --advise predicts the cases at their --batch");
    }
    if (external && !options.devices.empty()) {
      throw UsageError("--devices does not apply under a launcher: each rank uses the GPU of its LOCAL_RANK");
    }
    if (!worker) check_devices(options, visible_gpus);
    // Without GPUs, --gpus=N is N CPU stand-in devices (ranks), a few: a mesh's axes need that many.
    if (!worker && !external && visible_gpus > 0 && options.gpus > visible_gpus) {
      throw UsageError("--gpus=" + std::to_string(options.gpus) + " asks for more GPUs than the " +
                       std::to_string(visible_gpus) + " visible");
    }
    if (!worker && !external && visible_gpus == 0 && options.gpus > kMaxCpuStandInDevices) {
      throw UsageError("--gpus=" + std::to_string(options.gpus) + " asks for more GPUs than the 0 visible and more CPU " +
                       "stand-in devices than the " + std::to_string(kMaxCpuStandInDevices) +
                       " a machine without GPUs runs");
    }
    check_cut(options, visible_gpus);
  } catch (const UsageError& error) {
    std::fprintf(stderr, "parbench: %s\n", error.what());
    record_failure_for_launcher(error.what());
    return kExitBadInput;
  }
  if (worker) return run_worker(*worker, options, visible_gpus);
  if (profile_companion) return serve_profiles(options, visible_gpus);

  // A run that was killed (SIGKILL) could not clean up after itself: its ranks' results
  // directories and --fit=batch's probe directories go now (those no live run holds).
  for (const char* prefix : {kRanksDirectoryPrefix, kFitDirectoryPrefix}) remove_stale_temporary_directories(prefix);

  // Under an external launcher only rank 0 writes output; the others run the cases silently.
  const bool writes_output = !external || external->rank == 0;
  if (!writes_output) {
    benchmark_args.erase(std::remove_if(benchmark_args.begin(), benchmark_args.end(),
                                        [](const char* arg) { return std::strncmp(arg, "--benchmark_out", 15) == 0; }),
                         benchmark_args.end());
  }

  // parbench writes the file itself, whole, at the end (benchmarks/output/run_output.h); no other
  // run may write it meanwhile.
  static RunOutput output(writes_output ? options.benchmark_out : "", out_format,
                          counters_tabular(benchmark_args));  // the interrupt's thread reads it
  if (const auto problem = output.claim(); !problem.empty()) {
    std::fprintf(stderr, "parbench: cannot write --benchmark_out=%s: %s\n", options.benchmark_out.c_str(), problem.c_str());
    return kExitBadInput;
  }
  std::string out_flag;
  bool user_set_repetitions = false;
  for (auto& arg : benchmark_args) {
    const std::string text = arg;
    if (text.rfind("--benchmark_repetitions", 0) == 0) user_set_repetitions = true;
    if (text.rfind("--benchmark_out=", 0) == 0) {
      out_flag = std::string("--benchmark_out=") + RunOutput::kGoogleBenchmarkOut;
      arg = out_flag.data();
    }
  }
  // --repetitions sets Google Benchmark's own flag unless that was given.
  // With --max-noise, every case may run up to --max-repetitions; the repetitions the rule leaves
  // out are dropped from every report (benchmarks/measure/noise_rule.h).
  std::string repetitions_flag = "--benchmark_repetitions=" +
                                 std::to_string(options.max_noise > 0 ? options.max_repetitions : options.repetitions);
  if (!user_set_repetitions) benchmark_args.push_back(repetitions_flag.data());
  int benchmark_argc = static_cast<int>(benchmark_args.size());
  benchmark::Initialize(&benchmark_argc, benchmark_args.data());
  if (benchmark::ReportUnrecognizedArguments(benchmark_argc, benchmark_args.data())) return kExitBadInput;

  // Under an external launcher every process is one rank: only the distributed cases run, and
  // the launcher's ranks stand in for the visible GPUs.
  const int case_gpus = external ? external->world_size : visible_gpus;
  std::vector<CaseSpec> cases;
  try {
    cases = build_cases(options, case_gpus);
  } catch (const std::invalid_argument& error) {  // a strategy option's values (--mesh) that no case can take
    std::fprintf(stderr, "parbench: %s\n", error.what());
    record_failure_for_launcher(error.what());
    return kExitBadInput;
  }
  if (external) {
    cases.erase(std::remove_if(cases.begin(), cases.end(), [](const CaseSpec& spec) { return !spec.strategy->is_distributed(); }),
                cases.end());
    if (writes_output) {
      std::fprintf(stderr, "parbench: rank 0 of %d (%s variables): running the distributed cases only\n",
                   external->world_size, external->source.c_str());
    }
  }
  auto allreduce_cases = build_allreduce_cases(options, visible_gpus > 0 ? case_gpus : 0);
  const size_t built = cases.size() + allreduce_cases.size();
  try {
    const CaseFilter filter(benchmark::GetBenchmarkFilter());
    keep_selected(cases, filter, [&](const CaseSpec& spec) { return fixed_iterations(spec, options); });
    keep_selected(allreduce_cases, filter, [&](const AllreduceCase&) { return distributed_iterations(options); });
    if (cases.empty() && allreduce_cases.empty()) {
      throw UsageError(built == 0 ? std::string("no case to run: under a launcher only distributed cases (ddp) run")
                                  : "--benchmark_filter=" + benchmark::GetBenchmarkFilter() +
                                        " selects no case of the " + std::to_string(built) + " this run has");
    }
  } catch (const UsageError& error) {
    std::fprintf(stderr, "parbench: %s\n", error.what());
    return kExitBadInput;
  }

  // A run sized for GPUs says so before it starts on CPU devices, and how to get a CPU-sized one.
  if (visible_gpus == 0 && writes_output) {
    if (const auto note = gpu_sized_note(options); !note.empty()) std::fprintf(stderr, "parbench: %s\n", note.c_str());
  }

  // The cases --advise and --fit=batch leave out are reported as skipped, with why.
  const auto leave_out_allreduce = [&allreduce_cases](const std::string& why) {
    for (auto& allreduce : allreduce_cases) {
      if (allreduce.skip_reason.empty()) allreduce.skip_reason = why;
    }
  };
  if (options.advise_validate > 0 && !external) {
    std::vector<CaseSpec> left_out;
    cases = advise(cases, options, &left_out);
    cases.insert(cases.end(), left_out.begin(), left_out.end());
    leave_out_allreduce("left out by --advise: it predicts and runs training cases only");
  }
  if (options.fit_batch) {
    cases = fit_batches(cases, options, case_gpus);
    leave_out_allreduce("left out by --fit=batch: it searches the training cases' batches only");
  }
  // Every strategy computes with the same cores per device (benchmarks/run/threads.h): resolved
  // from the cases that run, before the first, and handed to the ranks as a number.
  options.threads_per_device =
      resolve_threads_per_device(options.threads_per_device, usable_cores(), devices_in_run(cases));
  set_interop_threads_once(options.threads_per_device);
  RunProgress progress(count_to_run(cases) + count_to_run(allreduce_cases), writes_output);
  register_cases(cases, options, progress);
  if (auto* json = output.json_reporter()) {
    std::map<std::string, std::string> fields;
    for (const auto& spec : cases) fields[benchmark_name(spec.name, fixed_iterations(spec, options))] = fields_json(spec.fields).dump();
    json->set_case_fields(std::move(fields));
  }
  register_allreduce_cases(allreduce_cases, options, progress);
  const auto context = run_context(options);
  for (const auto& [key, value] : context) benchmark::AddCustomContext(key, value);
  CaseOutcomes outcomes;
  // The console: one line per case and the verdict at the end (benchmarks/output/verdict.h), unless
  // --verbose or another --benchmark_format asks for Google Benchmark's own display.
  RunSummary summary;
  {
    std::map<std::string, std::vector<CaseField>> fields;
    for (const auto& spec : cases) fields[benchmark_name(spec.name, fixed_iterations(spec, options))] = spec.fields;
    summary.set_case_fields(std::move(fields));
  }
  const bool compact_console = display_is_console(benchmark_args) && !options.verbose;
  const auto compact = compact_console ? make_compact_console(summary) : nullptr;
  benchmark::BenchmarkReporter* display = nullptr;
  if (writes_output) display = compact ? compact.get() : benchmark::CreateDefaultDisplayReporter();
  const auto reporter = make_outcome_reporter(display, outcomes, &summary);
  set_interrupted_output(&output);
  // The cases registered are the ones the filter selects.
  benchmark::RunSpecifiedBenchmarks(reporter.get(), output.file_reporter(), ".");
  stop_profile_companion();
  benchmark::Shutdown();

  int status = outcomes.any_failed() ? kExitCaseFailed : kExitAllRan;
  status = std::max(status, finish_external_launch());
  const auto incomplete = incomplete_run(outcomes, cases, options);
  if (status == kExitAllRan && !incomplete.empty()) status = kExitIncomplete;
  // A listing (--benchmark_list_tests) ran nothing: there is nothing to sum up.
  if (writes_output && !outcomes.empty()) {
    // The verdict ends the console's output; with another display format it goes to stderr.
    const auto found = verdicts(summary.results());
    FILE* verdict_stream = display_is_console(benchmark_args) ? stdout : stderr;
    std::fputc('\n', verdict_stream);
    for (const auto& line : verdict_lines(found)) std::fprintf(verdict_stream, "%s\n", line.c_str());
    std::fflush(verdict_stream);
    for (const auto& line : outcomes.summary()) std::fprintf(stderr, "%s\n", line.c_str());
    // The last line, where the run missed what was asked.
    if (!incomplete.empty()) {
      std::fprintf(stderr, "parbench: incomplete%s: %s\n",
                   status == kExitIncomplete ? " (exit status 3)" : "", incomplete.c_str());
    }
    if (!options.summary.empty() && !write_summary(options.summary, verdict_markdown(found, run_description(context)))) {
      status = std::max(status, kExitCaseFailed);
    }
  }
  if (!output.finish()) return kExitCaseFailed;
  return status;
}
