#include "benchmarks/launch/rank_processes.h"

#include "benchmarks/launch/rank_failure.h"
#include "benchmarks/launch/rank_protocol.h"
#include "benchmarks/launch/temporary_directory.h"
#include "strategies/distributed/device_mesh.h"
#include "strategies/distributed/store_sync.h"
#include "strategies/distributed/world.h"

#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <mutex>
#include <sstream>
#include <stdexcept>
#include <thread>

extern char** environ;

namespace parbench {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

constexpr auto kProgressPollInterval = milliseconds(500);
constexpr auto kReapTimeout = std::chrono::seconds(10);
// How long a failed launch waits for its other ranks' reasons before it names the cause.
constexpr auto kCauseGrace = std::chrono::seconds(2);

std::string read_first_line(const std::string& path) {
  std::ifstream file(path);
  std::string line;
  std::getline(file, line);
  return line;
}

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

std::map<int, double> launcher_holding(const LaunchRequest& request) {
  const auto found = request.environment.find(kLauncherGpuVariable);
  return found == request.environment.end() ? std::map<int, double>{} : launcher_gpu_from_text(found->second);
}

// The rank's coordinates on the case's mesh ("dp=1,tp=0"), or "" without a mesh of two axes or
// more (on one axis the coordinate is the rank itself).
std::string place_on_mesh(const LaunchRequest& request, int rank) {
  if (request.mesh.empty()) return "";
  try {
    const auto shape = MeshShape::parse(request.mesh);
    int axes = 0;
    for (const auto& axis : shape.axes()) axes += axis.size > 1 ? 1 : 0;
    return shape.product() == request.ranks && axes > 1 ? shape.coordinates_text(rank) : "";
  } catch (const std::invalid_argument&) {
    return "";
  }
}

// After `first` (a rank and its wait status) failed: the ranks' failures in the order seen.
// Where every failure seen is one that follows another's (a stall, a lost connection:
// is_root_cause), the others get kCauseGrace to end or write their reasons, so that a rank out of
// memory whose peers lost it first is still found. A rank's reason is its error file's line,
// else how it ended with the ranks' progress.
std::vector<RankFailure> failures_after(RankProcesses& processes, const LaunchRequest& request,
                                        std::pair<int, int> first, const std::string& progress) {
  std::vector<RankFailure> failures;
  std::vector<bool> seen(static_cast<size_t>(request.ranks), false);
  const auto add = [&](int rank, std::optional<int> status) {
    if (seen[static_cast<size_t>(rank)]) return;
    RankFailure failure{rank, read_first_line(error_file(request.error_dir, rank)), false, place_on_mesh(request, rank)};
    if (failure.reason.empty()) {
      if (!status) return;  // still running, nothing written
      failure.reason = describe_status(*status) + " (" + progress + ")";
      failure.ended_without_reason = true;
    }
    seen[static_cast<size_t>(rank)] = true;
    failures.push_back(std::move(failure));
  };
  add(first.first, first.second);
  const auto deadline = Clock::now() + kCauseGrace;
  while (!is_root_cause(root_cause(failures)) && processes.running() > 0 && Clock::now() < deadline) {
    std::this_thread::sleep_for(milliseconds(20));
    while (const auto exited = processes.next_exit()) add(exited->first, exited->second);
    for (int rank = 0; rank < request.ranks; ++rank) add(rank, std::nullopt);
  }
  return failures;
}

std::string supervise(RankProcesses& processes, c10d::Store& store, const LaunchRequest& request) {
  const auto stall_limit = 2 * request.timeout + std::chrono::seconds(30);
  std::vector<std::string> progress(static_cast<size_t>(request.ranks));
  auto last_progress = Clock::now();
  auto next_look = Clock::now();
  while (processes.running() > 0) {
    if (const auto exited = processes.next_exit()) {
      const auto [rank, status] = *exited;
      const bool clean = WIFEXITED(status) && WEXITSTATUS(status) == 0;
      // A rank that exits 0 without its done file left its peers waiting for it: not a hang
      // to wait --dist-timeout for, a failure of that rank now.
      if (clean && access(done_file(request.error_dir, rank).c_str(), F_OK) == 0) continue;
      if (clean) {
        processes.kill_all();
        processes.reap_all();
        read_progress(store, progress);
        const auto place = place_on_mesh(request, rank);
        return "rank " + std::to_string(rank) + (place.empty() ? "" : " (" + place + ")") +
               " exited with code 0 before handing in its results (" +
               describe_progress(progress) + ")";
      }
      read_progress(store, progress);
      const auto failures = failures_after(processes, request, {rank, status}, describe_progress(progress));
      processes.kill_all();
      processes.reap_all();
      const auto& cause = root_cause(failures);
      return describe_rank_failure(cause) +
             (is_out_of_memory(cause.reason) ? "" : launcher_holding_note(launcher_holding(request)));
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
             ", so all were killed (" + describe_progress(progress) + ")" +
             launcher_holding_note(launcher_holding(request));
    }
    std::this_thread::sleep_for(milliseconds(10));
  }
  return "";
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

}  // namespace parbench
