#include "tests/parbench_process.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <thread>

extern char** environ;

namespace parbench {
namespace {

using Clock = std::chrono::steady_clock;
constexpr auto kPollInterval = std::chrono::milliseconds(20);

std::string read_file(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(file), {}};
}

// A /proc file of NUL-separated strings (cmdline, environ).
std::vector<std::string> read_proc_strings(pid_t pid, const char* name) {
  std::vector<std::string> strings;
  std::stringstream text(read_file("/proc/" + std::to_string(pid) + "/" + name));
  std::string item;
  while (std::getline(text, item, '\0')) strings.push_back(item);
  return strings;
}

// The state letter and parent of a process, from /proc/<pid>/stat ("pid (comm) S ppid ...").
std::optional<std::pair<char, pid_t>> state_and_parent(pid_t pid) {
  const auto stat = read_file("/proc/" + std::to_string(pid) + "/stat");
  const auto after_name = stat.rfind(')');
  if (after_name == std::string::npos) return std::nullopt;
  std::istringstream fields(stat.substr(after_name + 1));
  char state = 0;
  pid_t parent = 0;
  if (!(fields >> state >> parent)) return std::nullopt;
  return std::make_pair(state, parent);
}

std::vector<pid_t> all_processes() {
  std::vector<pid_t> pids;
  DIR* proc = opendir("/proc");
  if (proc == nullptr) return pids;
  while (const dirent* entry = readdir(proc)) {
    char* end = nullptr;
    const long pid = std::strtol(entry->d_name, &end, 10);
    if (*end == '\0' && pid > 0) pids.push_back(static_cast<pid_t>(pid));
  }
  closedir(proc);
  return pids;
}

bool holds(const std::vector<std::string>& strings, const std::string& wanted) {
  for (const auto& text : strings) {
    if (text == wanted) return true;
  }
  return false;
}

}  // namespace

ParbenchProcess::ParbenchProcess(const std::vector<std::string>& arguments,
                                 const std::map<std::string, std::string>& environment, const ProcessSetup& setup) {
  // PARBENCH_BINARY in the environment, where set, names the binary: binaries built on one machine
  // and carried to another (ci/gpu-check.sh prebuilt) are not where the build put them.
  const char* carried = std::getenv("PARBENCH_BINARY");
  std::vector<std::string> argv_strings{carried != nullptr && *carried != '\0' ? carried : PARBENCH_BINARY};
  argv_strings.insert(argv_strings.end(), arguments.begin(), arguments.end());
  std::vector<std::string> environment_strings;
  for (char** entry = environ; *entry != nullptr; ++entry) {
    const std::string text = *entry;
    if (environment.count(text.substr(0, text.find('='))) == 0) environment_strings.push_back(text);
  }
  for (const auto& [name, value] : environment) environment_strings.push_back(name + "=" + value);
  std::vector<char*> argv, envp;
  for (auto& text : argv_strings) argv.push_back(text.data());
  argv.push_back(nullptr);
  for (auto& text : environment_strings) envp.push_back(text.data());
  envp.push_back(nullptr);
  const auto out = outputs_.file("out"), err = outputs_.file("err");

  int closed_pipe[2] = {-1, -1};
  if (setup.closed_pipe >= 0 && pipe(closed_pipe) != 0) throw std::runtime_error("pipe failed");

  start_ = Clock::now();
  pid_ = fork();
  if (pid_ < 0) throw std::runtime_error("fork failed");
  if (pid_ == 0) {
    setpgid(0, 0);  // a group of its own, as a shell's job: a test may signal the group
    dup2(open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644), STDOUT_FILENO);
    dup2(open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644), STDERR_FILENO);
    if (setup.closed_pipe >= 0) {
      dup2(closed_pipe[1], setup.closed_pipe);
      close(closed_pipe[0]);
      close(closed_pipe[1]);
    }
    if (setup.file_size_limit) {
      signal(SIGXFSZ, SIG_IGN);  // kept across exec
      const rlimit limit{*setup.file_size_limit, *setup.file_size_limit};
      setrlimit(RLIMIT_FSIZE, &limit);
    }
    execve(argv[0], argv.data(), envp.data());
    _exit(127);
  }
  if (setup.closed_pipe >= 0) {  // the reading end closed before parbench writes
    close(closed_pipe[0]);
    close(closed_pipe[1]);
  }
}

ParbenchProcess::~ParbenchProcess() {
  if (finished_) return;
  kill(pid_, SIGKILL);  // its ranks die with it (PR_SET_PDEATHSIG)
  waitpid(pid_, nullptr, 0);
}

double ParbenchProcess::seconds() const { return std::chrono::duration<double>(Clock::now() - start_).count(); }

std::string ParbenchProcess::err() const { return read_file(outputs_.file("err")); }

std::optional<pid_t> ParbenchProcess::rank_process(int rank) const {
  for (pid_t pid : all_processes()) {
    const auto state = state_and_parent(pid);
    if (!state || state->second != pid_ || state->first == 'Z') continue;
    if (holds(read_proc_strings(pid, "environ"), "RANK=" + std::to_string(rank))) return pid;
  }
  return std::nullopt;
}

std::optional<pid_t> ParbenchProcess::wait_for_rank(int rank, double timeout_s) {
  const auto deadline = Clock::now() + std::chrono::duration<double>(timeout_s);
  while (Clock::now() < deadline) {
    if (const auto pid = rank_process(rank)) return pid;
    const auto state = state_and_parent(pid_);
    if (!state || state->first == 'Z') return std::nullopt;  // parbench ended (left for wait() to reap)
    std::this_thread::sleep_for(kPollInterval);
  }
  return std::nullopt;
}

std::optional<double> ParbenchProcess::wait_for_err(const std::string& text, double timeout_s) {
  const auto deadline = Clock::now() + std::chrono::duration<double>(timeout_s);
  while (Clock::now() < deadline) {
    if (err().find(text) != std::string::npos) return seconds();
    std::this_thread::sleep_for(kPollInterval);
  }
  return std::nullopt;
}

ProcessRun ParbenchProcess::wait(double deadline_s) {
  if (finished_) return *finished_;
  ProcessRun run;
  int status = 0;
  while (waitpid(pid_, &status, WNOHANG) == 0) {
    if (seconds() > deadline_s) {
      kill(pid_, SIGKILL);
      waitpid(pid_, &status, 0);
      run.killed_at_deadline = true;
      break;
    }
    std::this_thread::sleep_for(kPollInterval);
  }
  run.seconds = seconds();
  run.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  run.out = read_file(outputs_.file("out"));
  run.err = err();
  finished_ = run;
  return run;
}

std::vector<ProcessRun> run_ranks(const std::vector<std::map<std::string, std::string>>& environments,
                                  const std::vector<std::string>& arguments, double deadline_s) {
  std::vector<std::unique_ptr<ParbenchProcess>> processes;
  for (const auto& environment : environments) processes.push_back(std::make_unique<ParbenchProcess>(arguments, environment));
  std::vector<ProcessRun> runs;
  for (auto& process : processes) runs.push_back(process->wait(deadline_s));
  return runs;
}

int free_port() {
  const int socket_fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(socket_fd, reinterpret_cast<sockaddr*>(&address), sizeof address);
  socklen_t length = sizeof address;
  getsockname(socket_fd, reinterpret_cast<sockaddr*>(&address), &length);
  close(socket_fd);
  return ntohs(address.sin_port);
}

std::map<std::string, std::string> torchrun_environment(int rank, int world_size, int port) {
  return {{"RANK", std::to_string(rank)},
          {"WORLD_SIZE", std::to_string(world_size)},
          {"MASTER_ADDR", "127.0.0.1"},
          {"MASTER_PORT", std::to_string(port)}};
}

nlohmann::json read_json(const std::string& path) {
  std::ifstream file(path);
  return nlohmann::json::parse(file);
}

TmpdirFor::TmpdirFor(const TemporaryDirectory& dir) {
  if (const char* previous = std::getenv("TMPDIR")) previous_ = previous;
  setenv("TMPDIR", dir.path().c_str(), 1);
}

TmpdirFor::~TmpdirFor() {
  if (previous_) {
    setenv("TMPDIR", previous_->c_str(), 1);
  } else {
    unsetenv("TMPDIR");
  }
}

std::optional<std::string> process_environment(pid_t pid, const std::string& name) {
  for (const auto& entry : read_proc_strings(pid, "environ")) {
    if (entry.rfind(name + "=", 0) == 0) return entry.substr(name.size() + 1);
  }
  return std::nullopt;
}

std::vector<pid_t> live_processes_with(const std::string& name, const std::string& value) {
  std::vector<pid_t> found;
  for (pid_t pid : all_processes()) {
    const auto state = state_and_parent(pid);
    if (state && state->first != 'Z' && holds(read_proc_strings(pid, "environ"), name + "=" + value)) {
      found.push_back(pid);
    }
  }
  return found;
}

}  // namespace parbench
