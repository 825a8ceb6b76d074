#include "benchmarks/advise/fit.h"

#include "benchmarks/config/test_hooks.h"
#include "benchmarks/launch/self_exec.h"
#include "benchmarks/launch/temporary_directory.h"
#include "core/counter_table.h"
#include "core/text.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>

#include <fcntl.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

namespace parbench {

PARBENCH_DECLARE_COUNTER(Counter("fit_batch").unit("items").higher_is_better()
                             .means("--fit=batch: the largest batch (as --batch counts it) that trained without running out of memory"));
PARBENCH_DECLARE_COUNTER(Counter("fit_oom_batch").unit("items")
                             .means("--fit=batch: the next batch up (fit_batch + fit_step), shown to run out of memory"));
PARBENCH_DECLARE_COUNTER(Counter("fit_step").unit("items")
                             .means("--fit=batch: the batches probed are multiples of it (the case's devices)"));
PARBENCH_DECLARE_COUNTER(Counter("fit_probes").unit("count").means("--fit=batch: the probes the search ran"));

namespace {

// A probe that has not finished in this long is stopped and reported as failed.
constexpr std::chrono::minutes kProbeTimeout{10};

int64_t round_down(int64_t value, int64_t step) { return value / step * step; }
int64_t round_up(int64_t value, int64_t step) { return (value + step - 1) / step * step; }

// "10.2 GiB"
std::string gib_text(uint64_t bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f GiB", static_cast<double>(bytes) / (1024.0 * 1024.0 * 1024.0));
  return text;
}

// `text` as an extended regular expression that matches it literally.
std::string escaped(const std::string& text) {
  std::string out;
  for (const char c : text) {
    if (std::string(".[]()*+?{}|^$\\").find(c) != std::string::npos) out += '\\';
    out += c;
  }
  return out;
}

// This run's arguments without those a probe sets itself.
std::vector<std::string> probe_arguments(const std::string& name, int64_t batch, const std::string& out_file) {
  static const std::vector<std::string> kSetByProbe = {
      "--benchmark_filter", "--benchmark_out", "--benchmark_repetitions", "--benchmark_format", "--batch",
      "--fit", "--repetitions", "--iterations", "--warmup", "--steps", "--advise", "--summary", "--max-noise",
      "--max-repetitions", "--trace", "--verbose"};
  std::vector<std::string> arguments;
  for (const auto& argument : self_arguments()) {
    const bool dropped = std::any_of(kSetByProbe.begin(), kSetByProbe.end(), [&](const std::string& flag) {
      return argument == flag || starts_with(argument, flag + "=") || starts_with(argument, flag + "_");
    });
    if (!dropped) arguments.push_back(argument);
  }
  for (const auto& added :
       {"--batch=" + std::to_string(batch), "--benchmark_filter=^" + escaped(name) + "(/iterations:[0-9]+)?/manual_time$",
        std::string("--repetitions=1"), std::string("--iterations=1"), std::string("--warmup=1"), std::string("--steps=1"),
        "--benchmark_out=" + out_file, std::string("--benchmark_out_format=json")}) {
    arguments.push_back(added);
  }
  return arguments;
}

}  // namespace

ChildEnd run_child(const std::string& binary, const std::vector<std::string>& arguments, const std::string& log,
                   uint64_t data_bytes) {
  std::vector<std::string> all{binary};
  all.insert(all.end(), arguments.begin(), arguments.end());
  std::vector<char*> argv;
  for (auto& argument : all) argv.push_back(argument.data());
  argv.push_back(nullptr);
  const int log_fd = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  if (log_fd < 0) return {};
  const pid_t pid = fork();
  if (pid == 0) {
    // Async-signal-safe calls only. The probe dies with this process (an interrupt, a kill).
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (data_bytes > 0) {
      const rlimit limit{static_cast<rlim_t>(data_bytes), static_cast<rlim_t>(data_bytes)};
      setrlimit(RLIMIT_DATA, &limit);
    }
    dup2(log_fd, STDOUT_FILENO);
    dup2(log_fd, STDERR_FILENO);
    execv(argv[0], argv.data());
    _exit(127);
  }
  close(log_fd);
  if (pid < 0) return {};
  const auto deadline = std::chrono::steady_clock::now() + kProbeTimeout;
  while (true) {
    int status = 0;
    const pid_t done = waitpid(pid, &status, WNOHANG);
    if (done == pid) return {true, status};
    if (done < 0 || std::chrono::steady_clock::now() > deadline) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      return {};
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

std::string describe_end(const ChildEnd& end) {
  if (!end.finished) {
    return "did not finish within " + std::to_string(kProbeTimeout.count()) + " minutes (or could not start)";
  }
  if (WIFEXITED(end.status)) return "exited with code " + std::to_string(WEXITSTATUS(end.status));
  if (WIFSIGNALED(end.status)) {
    const int signal = WTERMSIG(end.status);
    const char* abbreviation = sigabbrev_np(signal);
    return "was killed by signal " + std::to_string(signal) +
           (abbreviation != nullptr ? " (SIG" + std::string(abbreviation) + ")" : std::string());
  }
  return "ended with wait status " + std::to_string(end.status);
}

namespace {

// The last line of `log` that parbench wrote about a failure, for a probe that left no JSON.
std::string last_parbench_line(const std::string& log) {
  std::ifstream in(log);
  std::string line, found;
  while (std::getline(in, line)) {
    if (starts_with(line, "parbench:")) found = line;
  }
  return found;
}

}  // namespace

FitSearch search_largest_batch(int64_t start, int64_t step, int64_t cap, const std::function<Probe(int64_t batch)>& probe) {
  FitSearch search;
  search.step = step;
  std::optional<int64_t> fits, fails;  // the largest batch that fit, the smallest that did not
  // Probes `batch`; false where the search must stop (a failure other than out-of-memory).
  const auto try_batch = [&](int64_t batch) {
    ++search.probes;
    const auto found = probe(batch);
    if (found.result == ProbeResult::kFailed) {
      search.failure = "probing batch " + std::to_string(batch) + " failed: " + found.message;
      return false;
    }
    if (found.result == ProbeResult::kFits) {
      fits = std::max(fits.value_or(0), batch);
    } else {
      fails = std::min(fails.value_or(batch), batch);
    }
    return true;
  };
  const int64_t top = std::max(step, round_down(cap, step));  // the largest batch it may probe
  const int64_t first = std::min(round_up(std::max<int64_t>(start, 1), step), top);
  if (!try_batch(first)) return search;
  if (fits) {
    // Doubling while it fits, up to the cap.
    for (int64_t batch = first; !fails && batch < top;) {
      batch = std::min(batch * 2, top);
      if (batch <= *fits || !try_batch(batch)) break;
    }
    if (!search.failure.empty()) return search;
  } else {
    // Halving while it does not fit, down to one step.
    for (int64_t batch = first; !fits && batch > step;) {
      batch = std::max(step, round_down(batch / 2, step));
      if (!try_batch(batch)) return search;
    }
    if (!fits) {
      search.failure = "out of memory even at batch " + std::to_string(step) + ", the smallest it can take";
      return search;
    }
  }
  // Bisection between them, to one step apart.
  while (fails && *fails - *fits > step) {
    const int64_t middle = *fits + std::max(step, round_down((*fails - *fits) / 2, step));
    if (!try_batch(middle)) return search;
  }
  search.largest_batch = *fits;
  search.oom_batch = fails;
  return search;
}

HostMemoryBound host_memory_bound(const std::string& meminfo) {
  std::istringstream lines(meminfo);
  std::string line;
  while (std::getline(lines, line)) {
    if (!starts_with(line, "MemAvailable:")) continue;
    std::istringstream fields(line.substr(std::strlen("MemAvailable:")));
    uint64_t kib = 0;
    std::string unit;
    if (!(fields >> kib >> unit) || unit != "kB" || kib == 0) break;
    // Half: the other half stays for the rest of the host (this run, the page cache, other work).
    const uint64_t bytes = kib * 1024 / 2;
    return {bytes, gib_text(bytes) + " (half of MemAvailable, " + gib_text(kib * 1024) + ")"};
  }
  return {0, "none (no MemAvailable in /proc/meminfo)"};
}

bool is_host_allocation_failure(const std::string& message) {
  auto text = message;
  std::transform(text.begin(), text.end(), text.begin(), [](unsigned char c) { return std::tolower(c); });
  for (const char* said : {"not enough memory", "can't allocate memory", "cannot allocate memory", "bad_alloc"}) {
    if (text.find(said) != std::string::npos) return true;
  }
  return false;
}

CaseSpec case_at_batch(const CaseSpec& spec, int64_t batch, const Options& options, int visible_gpus) {
  auto fields = nlohmann::json::parse(fields_json(spec.fields).dump());
  fields["batch"] = batch;
  return case_from_fields(fields, options, visible_gpus);
}

Probe probe_case(const CaseSpec& spec, int64_t batch, const Options& options, int visible_gpus, uint64_t host_bytes) {
  const auto probed = case_at_batch(spec, batch, options, visible_gpus);
  if (!probed.skip_reason.empty()) return {ProbeResult::kFailed, "skipped at that batch: " + probed.skip_reason};
  TemporaryDirectory dir(kFitDirectoryPrefix);
  const auto out_file = dir.file("probe.json");
  // A case's rank processes share the bound: each may take its part.
  const uint64_t per_process = host_bytes / static_cast<uint64_t>(probed.strategy->is_distributed() ? probed.gpus : 1);
  const auto end =
      run_child(self_binary(), probe_arguments(probed.name, batch, out_file), dir.file("probe.log"), per_process);
  const auto out_of_memory = [&](const std::string& message) {
    return is_out_of_memory(message) || (host_bytes > 0 && is_host_allocation_failure(message));
  };
  const bool exited_0 = end.finished && WIFEXITED(end.status) && WEXITSTATUS(end.status) == 0;
  nlohmann::json document;
  try {
    std::ifstream in(out_file);
    if (in) document = nlohmann::json::parse(in);
  } catch (const std::exception&) {
    document = nullptr;
  }
  std::string error;
  bool ran = false;
  if (document.is_object() && document.contains("benchmarks")) {
    for (const auto& entry : document["benchmarks"]) {
      if (entry.value("error_occurred", false)) {
        error = entry.value("error_message", std::string("an error"));
      } else if (entry.value("run_type", "") == "iteration") {
        ran = true;
      }
    }
  }
  if (!error.empty()) return {out_of_memory(error) ? ProbeResult::kOutOfMemory : ProbeResult::kFailed, error};
  if (ran && exited_0) return {ProbeResult::kFits, ""};
  const auto said = last_parbench_line(dir.file("probe.log"));
  if (out_of_memory(said)) return {ProbeResult::kOutOfMemory, said};
  return {ProbeResult::kFailed, "the probe " + describe_end(end) + (!end.finished ? std::string()
                                                                    : said.empty() ? " without output"
                                                                                   : ": " + said)};
}

std::vector<CaseSpec> fit_batches(const std::vector<CaseSpec>& cases, const Options& options, int visible_gpus) {
  std::vector<CaseSpec> fitted;
  // CPU devices' memory is the host's: the probes are bounded, a batch over the bound is out of memory.
  HostMemoryBound bound;
  if (visible_gpus == 0) {
    std::ifstream meminfo(test_hooks::meminfo_file().value_or("/proc/meminfo"));
    bound = host_memory_bound(std::string(std::istreambuf_iterator<char>(meminfo), {}));
    std::fprintf(stderr, "parbench: fit on CPU devices: host-memory bound %s%s\n", bound.text.c_str(),
                 bound.bytes > 0 ? ": a batch that needs more counts as out of memory" : ": the probes are not bounded");
  }
  for (size_t index = 0; index < cases.size(); ++index) {
    const auto& spec = cases[index];
    if (!spec.skip_reason.empty()) {
      fitted.push_back(spec);
      continue;
    }
    const int64_t start = std::stoll(std::find_if(spec.fields.begin(), spec.fields.end(), [](const CaseField& field) {
                                       return field.key == "batch";
                                     })->text);
    std::fprintf(stderr, "parbench: fit %zu/%zu: %s\n", index + 1, cases.size(), spec.name.c_str());
    const auto search = search_largest_batch(start, spec.gpus, options.fit_max_batch, [&](int64_t batch) {
      const auto probe = probe_case(spec, batch, options, visible_gpus, bound.bytes);
      const auto oom = bound.bytes > 0 ? "out of memory (over the host-memory bound of " + bound.text + ")"
                                       : std::string("out of memory");
      std::fprintf(stderr, "parbench:   batch %lld: %s\n", static_cast<long long>(batch),
                   probe.result == ProbeResult::kFits          ? "fits"
                   : probe.result == ProbeResult::kOutOfMemory ? oom.c_str()
                                                               : ("failed: " + probe.message).c_str());
      return probe;
    });
    auto result = search.failure.empty() ? case_at_batch(spec, search.largest_batch, options, visible_gpus) : spec;
    result.fields.push_back({"fit", "batch"});
    result.name = case_name(result.fields);
    result.fit = search;
    fitted.push_back(std::move(result));
  }
  return fitted;
}

}  // namespace parbench
