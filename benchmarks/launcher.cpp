#include "benchmarks/launcher.h"

#include "benchmarks/self_exec.h"
#include "benchmarks/temporary_directory.h"
#include "core/device_timer.h"

#include "benchmarks/allreduce.h"
#include "benchmarks/cases.h"
#include "benchmarks/context.h"
#include "benchmarks/distributed_runner.h"
#include "benchmarks/elastic_error.h"
#include "strategies/distributed/store_sync.h"

#include <nlohmann/json.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#ifdef USE_C10D_NCCL
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

#include <dirent.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <mutex>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <thread>

extern char** environ;

namespace parbench {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

constexpr const char* kWorkerFlag = "--parbench-worker=";
constexpr const char* kResultsFlag = "--parbench-results=";
constexpr const char* kResultFile = "result.json";
constexpr const char* kCaseFile = "case.json";  // a train case's fields, written before the ranks start
constexpr auto kProgressPollInterval = milliseconds(500);
constexpr auto kReapTimeout = std::chrono::seconds(10);

bool starts_with(const std::string& text, const std::string& prefix) { return text.rfind(prefix, 0) == 0; }

milliseconds timeout_of(double seconds) {
  return std::max(milliseconds(1), milliseconds(static_cast<int64_t>(seconds * 1e3)));
}

std::string error_file(const std::string& dir, int rank) { return dir + "/error." + std::to_string(rank); }

std::string read_first_line(const std::string& path) {
  std::ifstream file(path);
  std::string line;
  std::getline(file, line);
  return line;
}

// ---- Starting ranks ------------------------------------------------------------------------

// The ranks' processes, killed and reaped on every way out so that none outlives a launch.
class RankProcesses {
 public:
  explicit RankProcesses(int ranks) : pids_(static_cast<size_t>(ranks), 0) {}
  ~RankProcesses() {
    kill_all();
    reap_all();
  }
  RankProcesses(const RankProcesses&) = delete;
  RankProcesses& operator=(const RankProcesses&) = delete;

  pid_t group() const { return group_; }  // 0 until the first rank, the group's leader, starts

  void started(int rank, pid_t pid) {
    pids_[static_cast<size_t>(rank)] = pid;
    if (group_ == 0) group_ = pid;
    setpgid(pid, group_);  // the child does the same; whichever runs first, the result is one group
  }

  int running() const {
    return static_cast<int>(std::count_if(pids_.begin(), pids_.end(), [](pid_t pid) { return pid > 0; }));
  }

  // A rank that has exited since the last call, and its wait status.
  std::optional<std::pair<int, int>> next_exit() {
    for (size_t rank = 0; rank < pids_.size(); ++rank) {
      int status = 0;
      if (pids_[rank] > 0 && waitpid(pids_[rank], &status, WNOHANG) == pids_[rank]) {
        pids_[rank] = 0;
        return std::make_pair(static_cast<int>(rank), status);
      }
    }
    return std::nullopt;
  }

  void kill_all() {
    // While one rank is unreaped the group id cannot have been reused by another group.
    if (group_ > 0 && running() > 0) killpg(group_, SIGKILL);
    for (pid_t pid : pids_) {
      if (pid > 0) kill(pid, SIGKILL);
    }
  }

  void reap_all() {
    const auto deadline = Clock::now() + kReapTimeout;
    while (running() > 0) {
      for (auto& pid : pids_) {
        if (pid > 0 && (waitpid(pid, nullptr, WNOHANG) == pid || errno == ECHILD)) pid = 0;
      }
      if (running() > 0 && Clock::now() > deadline) {
        std::fprintf(stderr, "parbench: %d rank processes did not end within %lld s of SIGKILL\n", running(),
                     static_cast<long long>(kReapTimeout.count()));
        return;
      }
      std::this_thread::sleep_for(milliseconds(5));
    }
  }

 private:
  std::vector<pid_t> pids_;
  pid_t group_ = 0;
};

// The launch in progress, for abandon_launches.
struct LaunchInProgress {
  std::mutex mutex;
  bool abandoned = false;
  pid_t group = 0;        // its ranks' process group, 0 before they start
  std::string error_dir;  // its results directory
};

LaunchInProgress& launch_in_progress() {
  static LaunchInProgress launch;
  return launch;
}

std::vector<char*> c_strings(std::vector<std::string>& strings) {
  std::vector<char*> pointers;
  for (auto& text : strings) pointers.push_back(text.data());
  pointers.push_back(nullptr);
  return pointers;
}

std::vector<std::string> rank_environment(const LaunchRequest& request, int rank, int port) {
  std::map<std::string, std::string> set = request.environment;
  set["RANK"] = std::to_string(rank);
  set["LOCAL_RANK"] = std::to_string(rank);
  set["WORLD_SIZE"] = std::to_string(request.ranks);
  set["LOCAL_WORLD_SIZE"] = std::to_string(request.ranks);
  set["MASTER_ADDR"] = "127.0.0.1";
  set["MASTER_PORT"] = std::to_string(port);
  set["TORCHELASTIC_USE_AGENT_STORE"] = "True";  // this process hosts the store

  std::vector<std::string> environment;
  for (char** entry = environ; *entry != nullptr; ++entry) {
    const std::string text = *entry;
    if (set.count(text.substr(0, text.find('='))) == 0) environment.push_back(text);
  }
  for (const auto& [name, value] : set) environment.push_back(name + "=" + value);
  return environment;
}

// In the child between fork() and exec: async-signal-safe calls only.
[[noreturn]] void exec_rank(char* const* argv, char* const* envp, pid_t launcher, pid_t group) {
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != launcher) _exit(127);  // the launcher died before prctl took effect
  setpgid(0, group);
  dup2(STDERR_FILENO, STDOUT_FILENO);  // the benchmark's stdout carries only its report
  execve(argv[0], argv, envp);
  static const char message[] = "parbench: could not execute the rank's binary\n";
  [[maybe_unused]] const auto written = write(STDERR_FILENO, message, sizeof message - 1);
  _exit(127);
}

// "rank 0 at iteration 3 of repetition 1, rank 1 at the rendezvous".
std::string describe_progress(const std::vector<std::string>& progress) {
  std::string text;
  for (size_t rank = 0; rank < progress.size(); ++rank) {
    const auto& value = progress[rank];
    const auto where = value.empty() ? "the start" : value.substr(value.find(' ') + 1);
    text += (rank > 0 ? ", rank " : "rank ") + std::to_string(rank) + " at " + where;
  }
  return text;
}

// Reads every rank's progress key; true if any changed.
bool read_progress(c10d::Store& store, std::vector<std::string>& progress) {
  bool changed = false;
  for (size_t rank = 0; rank < progress.size(); ++rank) {
    const auto key = progress_key(static_cast<int>(rank));
    if (!store.check({key})) continue;
    auto value = store.get_to_str(key);
    if (value != progress[rank]) {
      progress[rank] = std::move(value);
      changed = true;
    }
  }
  return changed;
}

std::string describe_status(int status) {
  if (WIFEXITED(status)) return "exited with code " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    return "was killed by signal " + std::to_string(WTERMSIG(status)) + " (" + strsignal(WTERMSIG(status)) + ")";
  }
  return "ended with wait status " + std::to_string(status);
}

std::string supervise(RankProcesses& processes, c10d::Store& store, const LaunchRequest& request) {
  const auto stall_limit = 2 * request.timeout + std::chrono::seconds(30);
  std::vector<std::string> progress(static_cast<size_t>(request.ranks));
  auto last_progress = Clock::now();
  auto next_look = Clock::now();
  while (processes.running() > 0) {
    if (const auto exited = processes.next_exit()) {
      const auto [rank, status] = *exited;
      if (WIFEXITED(status) && WEXITSTATUS(status) == 0) continue;
      processes.kill_all();
      processes.reap_all();
      const auto reason = read_first_line(error_file(request.error_dir, rank));
      if (!reason.empty()) return "rank " + std::to_string(rank) + ": " + reason;
      read_progress(store, progress);
      return "rank " + std::to_string(rank) + " " + describe_status(status) + " (" + describe_progress(progress) + ")";
    }
    const auto now = Clock::now();
    if (now >= next_look) {
      if (read_progress(store, progress)) last_progress = now;
      next_look = now + kProgressPollInterval;
    }
    if (now - last_progress > stall_limit) {
      processes.kill_all();
      processes.reap_all();
      return "no rank made progress for " + format_seconds(std::chrono::duration_cast<milliseconds>(stall_limit)) +
             ", so all were killed (" + describe_progress(progress) + ")";
    }
    std::this_thread::sleep_for(milliseconds(10));
  }
  return "";
}

// ---- Results -------------------------------------------------------------------------------

nlohmann::json to_json_value(const RankedRun& run) {
  auto repetitions = nlohmann::json::array();
  for (const auto& repetition : run.repetitions) {
    repetitions.push_back({{"seconds", repetition.seconds}, {"rank_spread", repetition.rank_spread}});
  }
  return {{"world_size", run.world_size},
          {"facts", run.facts},
          {"params", run.params},
          {"forward_flops_per_sample", run.forward_flops_per_sample},
          {"peak_math", run.peak_math},
          {"gpu_name", run.gpu_name},
          {"gemm_flops", run.gemm_flops},
          {"repetitions", repetitions},
          {"peak_bytes", run.peak_bytes},
          {"busy_seconds", run.busy_seconds},
          {"hosts", run.hosts}};
}

RankedRun ranked_run_from(const nlohmann::json& json) {
  RankedRun run;
  run.world_size = json.at("world_size").get<int>();
  run.facts = json.at("facts").get<std::map<std::string, std::string>>();
  run.params = json.at("params").get<double>();
  run.forward_flops_per_sample = json.at("forward_flops_per_sample").get<double>();
  run.peak_math = json.at("peak_math").get<std::string>();
  run.gpu_name = json.at("gpu_name").get<std::string>();
  run.gemm_flops = json.at("gemm_flops").get<double>();
  for (const auto& repetition : json.at("repetitions")) {
    run.repetitions.push_back(
        {repetition.at("seconds").get<std::vector<double>>(), repetition.at("rank_spread").get<double>()});
  }
  run.peak_bytes = json.at("peak_bytes").get<std::vector<double>>();
  run.busy_seconds = json.at("busy_seconds").get<std::vector<double>>();
  run.hosts = json.at("hosts").get<std::vector<std::string>>();
  return run;
}

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const size_t middle = values.size() / 2;
  return values.size() % 2 == 1 ? values[middle] : (values[middle - 1] + values[middle]) / 2;
}

// ---- Being a rank ----------------------------------------------------------------------------

// Whether the test hook `variable` names `rank`.
bool test_hook_names(const char* variable, int rank) {
  const char* value = std::getenv(variable);
  return value != nullptr && std::string(value) == std::to_string(rank);
}

// A rank that stalled: where TORCH_NCCL_TRACE_BUFFER_SIZE is set (> 0), NCCL's flight recorder
// (c10d's dump_nccl_trace_json: each collective this rank's process groups issued and how far
// it got) goes to <output>.flight_recorder.rank<r>.json, `output` being --benchmark_out (or
// "parbench" without one). Returns "; NCCL flight recorder in FILE", or "" when nothing was written.
std::string dump_flight_recorder(const std::string& output, int rank) {
#ifdef USE_C10D_NCCL
  const char* size = std::getenv("TORCH_NCCL_TRACE_BUFFER_SIZE");
  if (size == nullptr || std::atol(size) <= 0) return "";
  const auto path = (output.empty() ? std::string("parbench") : output) + ".flight_recorder.rank" +
                    std::to_string(rank) + ".json";
  try {
    std::ofstream file(path);
    file << c10d::dump_nccl_trace_json(/*includeCollectives=*/true, /*onlyActive=*/false);
    if (file) return "; NCCL flight recorder in " + path;
  } catch (const std::exception& error) {
    return "; NCCL flight recorder not written: " + first_line(error);
  }
  return "; NCCL flight recorder not written: cannot write " + path;
#else
  return "";
#endif
}

[[noreturn]] void hang_forever() {
  while (true) pause();
}

// A train case is built from the fields the launcher wrote; a comm case is found by name.
RankedRun run_launched_case(const WorkerRequest& request, const Options& options, World& world) {
  const auto& name = request.case_name;
  // The ranks stand in for visible GPUs: the launcher has decided the case runs.
  if (std::ifstream fields(request.result_dir + "/" + kCaseFile); fields) {
    const auto spec = case_from_fields(nlohmann::json::parse(fields), options, world.size());
    if (spec.name != name) throw std::runtime_error("case " + name + " was launched with the fields of " + spec.name);
    if (!spec.skip_reason.empty()) throw std::runtime_error("case " + name + " is skipped: " + spec.skip_reason);
    return run_training_rank(world, spec, options, /*ends_with_case=*/true);
  }
  for (const auto& allreduce : build_allreduce_cases(options, world.size())) {
    if (allreduce.name == name) return run_allreduce_rank(world, allreduce, options);
  }
  throw std::runtime_error("no case named " + name + " with these options on " + std::to_string(world.size()) +
                           " ranks");
}

struct ExternalRank {
  RankInfo info;
  torch::Device device;
  milliseconds timeout;
  std::string output;            // --benchmark_out, for a flight recorder dump
  std::shared_ptr<World> world;  // joined on the first distributed case
  std::string failure;           // set once a distributed case failed on this rank
};

std::optional<ExternalRank>& external_rank() {
  static std::optional<ExternalRank> rank;
  return rank;
}

// One distributed case as this externally launched rank.
RankedRun run_as_external_rank(ExternalRank& external, int ranks, const std::function<RankedRun(World&)>& run_rank) {
  if (!external.failure.empty())
    throw std::runtime_error("not run: an earlier distributed case failed (" + external.failure + ")");
  try {
    if (!external.world) {
      const auto record_stall = [rank = external.info.rank, output = external.output](const std::string& message) {
        record_failure_for_launcher("rank " + std::to_string(rank) + ": " + message +
                                    dump_flight_recorder(output, rank));
      };
      external.world = std::make_shared<World>(external.info, external.device, external.timeout, record_stall);
      set_joined_world(external.world);
    }
    if (ranks != external.world->size()) {
      throw std::runtime_error("the case needs " + std::to_string(ranks) + " ranks, the launcher started " +
                               std::to_string(external.world->size()));
    }
    return run_rank(*external.world);
  } catch (const std::exception& error) {
    external.failure = "rank " + std::to_string(external.info.rank) + ": " + first_line(error);
    std::fprintf(stderr, "parbench: %s\n", external.failure.c_str());  // ranks other than 0 report nothing else
    record_failure_for_launcher(external.failure);
    if (external.world) external.world->abort();
    throw std::runtime_error(external.failure);
  }
}

}  // namespace

std::string launch_ranks(const LaunchRequest& request) {
  if (request.ranks < 1)
    throw std::invalid_argument("a launch needs at least 1 rank, got " + std::to_string(request.ranks));
  // A free port, chosen by the kernel: no race with other launches.
  auto store = host_rendezvous_store("127.0.0.1", /*port=*/0, request.timeout);

  // Everything a child needs is built before fork(): after it, only async-signal-safe calls.
  std::vector<std::string> arguments{request.binary};
  arguments.insert(arguments.end(), request.arguments.begin(), request.arguments.end());
  auto argv = c_strings(arguments);
  std::vector<std::vector<std::string>> environments;
  std::vector<std::vector<char*>> envps;
  for (int rank = 0; rank < request.ranks; ++rank)
    environments.push_back(rank_environment(request, rank, store->getPort()));
  for (auto& environment : environments) envps.push_back(c_strings(environment));

  RankProcesses processes(request.ranks);
  auto& in_progress = launch_in_progress();
  {
    // Held while the ranks start, so that an interrupt finds either none or their whole group.
    std::lock_guard<std::mutex> lock(in_progress.mutex);
    if (in_progress.abandoned) return "not started: the run was interrupted";
    const pid_t launcher = getpid();
    for (int rank = 0; rank < request.ranks; ++rank) {
      const pid_t group = processes.group();
      const pid_t pid = fork();
      if (pid < 0) return "could not start rank " + std::to_string(rank) + ": fork failed: " + std::strerror(errno);
      if (pid == 0) exec_rank(argv.data(), envps[static_cast<size_t>(rank)].data(), launcher, group);
      processes.started(rank, pid);
    }
    in_progress.group = processes.group();
    in_progress.error_dir = request.error_dir;
  }
  auto failure = supervise(processes, *store, request);
  std::lock_guard<std::mutex> lock(in_progress.mutex);
  in_progress.group = 0;
  return failure;
}

void abandon_launches() {
  auto& in_progress = launch_in_progress();
  std::lock_guard<std::mutex> lock(in_progress.mutex);
  in_progress.abandoned = true;
  if (in_progress.group == 0) return;
  killpg(in_progress.group, SIGKILL);
  // Reaps the group's processes, racing the launch's own reaping harmlessly: whichever waits first.
  const auto deadline = Clock::now() + kReapTimeout;
  while (Clock::now() < deadline && !(waitpid(-in_progress.group, nullptr, WNOHANG) < 0 && errno == ECHILD)) {
    std::this_thread::sleep_for(milliseconds(5));
  }
  if (!in_progress.error_dir.empty()) remove_plain_directory(in_progress.error_dir);
}

RankedRun gather_run(World& world, const RankMeasurements& mine, RankedRun run) {
  const nlohmann::json json = {
      {"seconds", mine.seconds},
      {"peak_bytes", mine.peak_bytes ? nlohmann::json(*mine.peak_bytes) : nlohmann::json()},
      {"busy_seconds", mine.busy_seconds ? nlohmann::json(*mine.busy_seconds) : nlohmann::json()}};
  std::vector<RankMeasurements> ranks;
  if (world.rank() == 0) {
    for (const auto& text : world.gather_to_rank0(json.dump(), "its measurements")) {
      const auto theirs = nlohmann::json::parse(text);
      RankMeasurements measurements;
      measurements.seconds = theirs.at("seconds").get<std::vector<std::vector<double>>>();
      if (!theirs.at("peak_bytes").is_null()) measurements.peak_bytes = theirs.at("peak_bytes").get<double>();
      if (!theirs.at("busy_seconds").is_null()) measurements.busy_seconds = theirs.at("busy_seconds").get<double>();
      ranks.push_back(std::move(measurements));
    }
  } else {
    world.gather_to_rank0(json.dump(), "its measurements");
    ranks.push_back(mine);
  }

  run.world_size = world.size();
  run.hosts = world.hosts();
  for (size_t rank = 0; rank < ranks.size(); ++rank) {
    if (ranks[rank].seconds.size() != mine.seconds.size()) {
      throw std::runtime_error("rank " + std::to_string(rank) + " ran " + std::to_string(ranks[rank].seconds.size()) +
                               " repetitions, rank " + std::to_string(world.rank()) + " " +
                               std::to_string(mine.seconds.size()));
    }
  }
  for (size_t repetition = 0; repetition < mine.seconds.size(); ++repetition) {
    RankedRun::Repetition combined;
    combined.seconds.assign(mine.seconds[repetition].size(), 0.0);
    std::vector<double> medians;
    for (size_t rank = 0; rank < ranks.size(); ++rank) {
      const auto& theirs = ranks[rank].seconds[repetition];
      if (theirs.size() != combined.seconds.size()) {
        throw std::runtime_error("rank " + std::to_string(rank) + " ran " + std::to_string(theirs.size()) +
                                 " iterations in repetition " + std::to_string(repetition + 1) + ", rank " +
                                 std::to_string(world.rank()) + " " + std::to_string(combined.seconds.size()));
      }
      for (size_t i = 0; i < theirs.size(); ++i) combined.seconds[i] = std::max(combined.seconds[i], theirs[i]);
      medians.push_back(median(theirs));
    }
    const double middle = median(medians);
    const auto [lowest, highest] = std::minmax_element(medians.begin(), medians.end());
    combined.rank_spread = middle > 0 ? (*highest - *lowest) / middle : 0.0;
    run.repetitions.push_back(std::move(combined));
  }
  const bool all_peaks =
      std::all_of(ranks.begin(), ranks.end(), [](const auto& r) { return r.peak_bytes.has_value(); });
  const bool all_busy =
      std::all_of(ranks.begin(), ranks.end(), [](const auto& r) { return r.busy_seconds.has_value(); });
  for (const auto& rank : ranks) {
    if (all_peaks) run.peak_bytes.push_back(*rank.peak_bytes);
    if (all_busy) run.busy_seconds.push_back(*rank.busy_seconds);
  }
  return run;
}

int distributed_repetitions(const Options& options) {
  // main hands Google Benchmark's flags to it alone; Options keeps the command line.
  const std::string flag = "--benchmark_repetitions=";
  int repetitions = options.repetitions;
  std::istringstream words(options.argv);
  std::string word;
  while (words >> word) {
    if (!starts_with(word, flag)) continue;
    try {
      repetitions = std::stoi(word.substr(flag.size()));
    } catch (const std::exception&) {
      // Google Benchmark rejects the flag before any case runs.
    }
  }
  return std::max(1, repetitions);
}

int64_t distributed_iterations(const Options& options) {
  return options.iterations > 0 ? options.iterations : kDefaultDistributedIterations;
}

std::vector<std::vector<double>> time_iterations_together(World& world, const Options& options,
                                                          const std::vector<torch::Device>& devices,
                                                          const std::function<void()>& work,
                                                          double work_per_iteration) {
  DeviceTimer timer(devices, options.timer);
  std::vector<std::vector<double>> seconds(distributed_repetitions(options));
  const int64_t iterations = distributed_iterations(options);
  for (size_t repetition = 0; repetition < seconds.size(); ++repetition) {
    for (int64_t iteration = 0; iteration < iterations; ++iteration) {
      const auto where =
          "iteration " + std::to_string(iteration + 1) + " of repetition " + std::to_string(repetition + 1);
      world.report_progress(where);
      world.barrier(where);
      // Ranks leave a store barrier up to a round trip apart, and the first would time its
      // wait for the last at the first all-reduce: the clocks start behind an all-reduce instead.
      timer.start([&world] { world.line_up_streams(); });
      work();
      seconds[repetition].push_back(timer.stop() / work_per_iteration);
    }
  }
  synchronize_devices(devices);
  return seconds;
}

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
      auto& external = external_rank();
      outcome.run = external ? run_as_external_rank(*external, ranks, run_rank)
                             : launch_case(self_binary(), self_arguments(), launched, ranks, options.dist_timeout_s);
      note_rank_hosts(outcome.run->hosts);
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

RankedRun launch_case(const std::string& binary, const std::vector<std::string>& arguments,
                      const LaunchedCase& launched, int ranks, double timeout_s,
                      const std::map<std::string, std::string>& environment) {
  TemporaryDirectory results("parbench-ranks");
  if (!launched.fields.empty()) {
    std::ofstream fields(results.path() + "/" + kCaseFile);
    fields << launched.fields;
    if (!fields) throw std::runtime_error("cannot write " + results.path() + "/" + kCaseFile);
  }
  LaunchRequest request;
  request.binary = binary;
  request.arguments = {kWorkerFlag + launched.name, kResultsFlag + results.path()};
  request.arguments.insert(request.arguments.end(), arguments.begin(), arguments.end());
  request.arguments.push_back("--dist-timeout=" + std::to_string(timeout_s));  // the last one given wins
  request.ranks = ranks;
  request.timeout = timeout_of(timeout_s);
  request.error_dir = results.path();
  request.environment = environment;
  const auto failure = launch_ranks(request);
  if (!failure.empty()) throw std::runtime_error(failure);
  std::ifstream file(results.path() + "/" + kResultFile);
  if (!file) throw std::runtime_error("rank 0 exited cleanly but wrote no result");
  return ranked_run_from(nlohmann::json::parse(file));
}

std::optional<WorkerRequest> take_worker_flags(int* argc, char** argv) {
  std::optional<WorkerRequest> request;
  int kept = 1;
  for (int i = 1; i < *argc; ++i) {
    const std::string argument = argv[i];
    if (starts_with(argument, kWorkerFlag)) {
      if (!request) request.emplace();
      request->case_name = argument.substr(std::strlen(kWorkerFlag));
    } else if (starts_with(argument, kResultsFlag)) {
      if (!request) request.emplace();
      request->result_dir = argument.substr(std::strlen(kResultsFlag));
    } else {
      argv[kept++] = argv[i];
    }
  }
  *argc = kept;
  argv[kept] = nullptr;
  return request;
}

int run_worker(const WorkerRequest& request, Options options, int visible_gpus) {
  int rank = -1;
  try {
    if (request.case_name.empty() || request.result_dir.empty()) {
      throw std::runtime_error("a rank needs both --parbench-worker=CASE and --parbench-results=DIR");
    }
    const auto info = rank_info_from_environment();
    if (!info) throw std::runtime_error("a rank needs RANK and WORLD_SIZE in its environment (the launcher sets them)");
    rank = info->rank;
    if (test_hook_names("PARBENCH_TEST_ABSENT_RANK", rank)) hang_forever();
    if (options.gpus > 0 && options.gpus != info->world_size) {
      throw std::runtime_error("--gpus=" + std::to_string(options.gpus) + " but the launcher started " +
                               std::to_string(info->world_size) + " ranks");
    }
    options.gpus = info->world_size;
    const auto record_stall = [dir = request.result_dir, rank, output = options.benchmark_out](const std::string& message) {
      std::ofstream(error_file(dir, rank)) << message << dump_flight_recorder(output, rank) << "\n";
    };
    // --devices names each rank's GPU (distinct: check_devices and the case builder see to it).
    const auto device = options.devices.empty()
                            ? rank_device(*info, visible_gpus)
                            : torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(options.devices.at(rank)));
    auto world = std::make_shared<World>(*info, device, timeout_of(options.dist_timeout_s),
                                         record_stall);
    set_joined_world(world);
    if (test_hook_names("PARBENCH_TEST_FAIL_RANK", rank)) {
      std::fprintf(stderr, "parbench: rank %d: exiting on purpose (PARBENCH_TEST_FAIL_RANK)\n", rank);
      std::_Exit(3);
    }
    if (test_hook_names("PARBENCH_TEST_HANG_RANK", rank)) {
      world->report_progress("a hang on purpose (PARBENCH_TEST_HANG_RANK)");
      hang_forever();
    }

    const auto run = run_launched_case(request, options, *world);
    if (rank == 0) {
      const auto path = request.result_dir + "/" + kResultFile;
      std::ofstream file(path + ".partial");
      file << to_json_value(run).dump();
      file.close();
      if (!file || std::rename((path + ".partial").c_str(), path.c_str()) != 0) {
        throw std::runtime_error("could not write " + path + ": " + std::strerror(errno));
      }
    }
    world->leave();
    set_joined_world(nullptr);
    return 0;
  } catch (const std::exception& error) {
    const auto message = first_line(error);
    // One write: other ranks may be failing onto the same stderr at the same moment.
    const auto line = "parbench: rank " + std::to_string(rank) + ": " + message + "\n";
    [[maybe_unused]] const auto written = write(STDERR_FILENO, line.data(), line.size());
    if (rank >= 0) std::ofstream(error_file(request.result_dir, rank)) << message << "\n";
    std::fflush(nullptr);
    std::_Exit(1);  // no unwinding: a collective stuck in another thread must not hang the exit
  }
}

std::optional<RankInfo> external_launch(Options& options, int visible_gpus) {
  std::optional<RankInfo> info;
  try {
    info = rank_info_from_environment();
  } catch (const std::invalid_argument& error) {
    throw UsageError(error.what());
  }
  if (!info) return std::nullopt;
  if (options.gpus > 0 && options.gpus != info->world_size) {
    throw UsageError("--gpus=" + std::to_string(options.gpus) + " does not match the world size of " +
                     std::to_string(info->world_size) + " from the launcher's " + info->source +
                     " variables (leave --gpus out under a launcher)");
  }
  std::optional<torch::Device> device;
  try {
    device = rank_device(*info, visible_gpus);
  } catch (const std::invalid_argument& error) {
    throw UsageError(error.what());
  }
  options.gpus = info->world_size;
  external_rank() = ExternalRank{*info, *device, timeout_of(options.dist_timeout_s), options.benchmark_out, nullptr, ""};
  return info;
}

int finish_external_launch() {
  auto& external = external_rank();
  if (!external) return 0;
  int status = external->failure.empty() ? 0 : 1;
  if (status == 0 && external->world) {
    try {
      external->world->leave();
    } catch (const std::exception& error) {
      std::fprintf(stderr, "parbench: rank %d: %s\n", external->info.rank, first_line(error).c_str());
      record_failure_for_launcher("rank " + std::to_string(external->info.rank) + ": " + first_line(error));
      external->world->abort();
      status = 1;
    }
  }
  set_joined_world(nullptr);
  external->world.reset();
  return status;
}

}  // namespace parbench
