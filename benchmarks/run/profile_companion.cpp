#include "benchmarks/run/profile_companion.h"

#include "benchmarks/cases/cases.h"
#include "benchmarks/launch/self_exec.h"
#include "benchmarks/run/case_runner.h"

#include <nlohmann/json.hpp>

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <iostream>

namespace parbench {
namespace {

using Clock = std::chrono::steady_clock;

// In the child between fork() and exec: async-signal-safe calls only.
[[noreturn]] void exec_companion(char* const* argv, int input, int output, pid_t parent) {
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != parent) _exit(127);  // the parent died before prctl took effect
  dup2(input, STDIN_FILENO);
  dup2(output, STDOUT_FILENO);
  execv(argv[0], argv);
  static const char message[] = "parbench: could not execute the profile companion\n";
  [[maybe_unused]] const auto written = write(STDERR_FILENO, message, sizeof message - 1);
  _exit(127);
}

bool write_all(int fd, const std::string& text) {
  size_t done = 0;
  while (done < text.size()) {
    const auto written = write(fd, text.data() + done, text.size() - done);
    if (written < 0 && errno == EINTR) continue;
    if (written <= 0) return false;
    done += static_cast<size_t>(written);
  }
  return true;
}

// One line from `fd`, waiting at most until `deadline`; nullopt at end of input or time-out
// (`timed_out` says which).
std::optional<std::string> read_line(int fd, Clock::time_point deadline, bool& timed_out) {
  std::string line;
  char byte = 0;
  timed_out = false;
  while (true) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) {
      timed_out = true;
      return std::nullopt;
    }
    pollfd waiting{fd, POLLIN, 0};
    const int ready = poll(&waiting, 1, static_cast<int>(std::min<long long>(left, 1000)));
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0) continue;
    const auto got = read(fd, &byte, 1);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) return std::nullopt;
    if (byte == '\n') return line;
    line += byte;
  }
}

}  // namespace

ProfileCompanion::~ProfileCompanion() { stop(); }

bool ProfileCompanion::start() {
  std::vector<std::string> arguments = {self_binary()};
  for (const auto& argument : self_arguments()) {
    if (argument.rfind("--benchmark_out", 0) != 0) arguments.push_back(argument);
  }
  arguments.push_back(kProfileCompanionFlag);
  std::vector<char*> argv;
  for (auto& argument : arguments) argv.push_back(argument.data());
  argv.push_back(nullptr);

  // A companion that died must not take this process with it when it writes the next request.
  signal(SIGPIPE, SIG_IGN);
  int requests[2], answers[2];
  if (pipe2(requests, O_CLOEXEC) != 0) return false;
  if (pipe2(answers, O_CLOEXEC) != 0) {
    close(requests[0]);
    close(requests[1]);
    return false;
  }
  std::fflush(nullptr);
  const pid_t parent = getpid();
  pid_ = fork();
  if (pid_ == 0) exec_companion(argv.data(), requests[0], answers[1], parent);
  close(requests[0]);
  close(answers[1]);
  if (pid_ < 0) {
    close(requests[1]);
    close(answers[0]);
    return false;
  }
  to_companion_ = requests[1];
  from_companion_ = answers[0];
  return true;
}

void ProfileCompanion::stop() {
  if (pid_ <= 0) return;
  close(to_companion_);  // its end of input: it exits
  close(from_companion_);
  const auto deadline = Clock::now() + std::chrono::seconds(10);
  while (waitpid(pid_, nullptr, WNOHANG) == 0) {
    if (Clock::now() > deadline) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
      break;
    }
    usleep(10000);
  }
  pid_ = -1;
}

CaseProfile ProfileCompanion::profile(const std::string& case_name, const std::string& fields) {
  if (given_up_) return {};
  const auto give_up = [&](const std::string& why) {
    std::fprintf(stderr, "parbench: profile companion: %s; busy fractions and traces are left out from here on\n",
                 why.c_str());
    if (pid_ > 0) kill(pid_, SIGKILL);
    stop();
    given_up_ = true;
    return CaseProfile{};
  };
  if (pid_ <= 0 && !start()) return give_up(std::string("could not start it: ") + std::strerror(errno));
  if (fields.find('\n') != std::string::npos) return give_up("the fields of " + case_name + " span several lines");
  if (!write_all(to_companion_, fields + "\n")) return give_up("it exited");
  bool timed_out = false;
  const auto line = read_line(from_companion_, Clock::now() + kCompanionCaseTimeout, timed_out);
  if (!line) {
    return give_up(timed_out ? "it took over " + std::to_string(kCompanionCaseTimeout.count()) + " s on " + case_name
                             : "it exited while profiling " + case_name);
  }
  const auto answer = nlohmann::json::parse(*line, nullptr, /*allow_exceptions=*/false);
  if (answer.is_discarded() || !answer.is_object()) return give_up("it answered '" + *line + "'");
  if (answer.contains("error")) {
    std::fprintf(stderr, "parbench: the profile of %s failed: %s\n", case_name.c_str(),
                 answer["error"].get<std::string>().c_str());
    return {};
  }
  if (answer.value("case", "") != case_name) {
    std::fprintf(stderr, "parbench: the profile of %s failed: the profile companion built %s from its fields\n",
                 case_name.c_str(), answer.value("case", "").c_str());
    return {};
  }
  CaseProfile profile;
  if (!answer["busy_seconds"].is_null()) profile.busy_seconds = answer["busy_seconds"].get<std::vector<double>>();
  profile.trace_path = answer["trace"].get<std::string>();
  return profile;
}

bool take_profile_companion_flag(int* argc, char** argv) {
  bool found = false;
  int kept = 1;
  for (int i = 1; i < *argc; ++i) {
    if (std::strcmp(argv[i], kProfileCompanionFlag) == 0) {
      found = true;
    } else {
      argv[kept++] = argv[i];
    }
  }
  *argc = kept;
  argv[kept] = nullptr;
  return found;
}

int serve_profiles(const Options& options, int visible_gpus) {
  // Answers go to the original stdout; anything else printed here goes to stderr.
  FILE* answers = fdopen(dup(STDOUT_FILENO), "w");
  dup2(STDERR_FILENO, STDOUT_FILENO);
  std::string fields;
  while (std::getline(std::cin, fields)) {
    nlohmann::json answer;
    try {
      const auto spec = case_from_fields(nlohmann::json::parse(fields), options, visible_gpus);
      if (!spec.skip_reason.empty()) throw std::runtime_error("case " + spec.name + " is skipped: " + spec.skip_reason);
      const auto profile = profile_case(spec, options);
      answer["case"] = spec.name;
      answer["busy_seconds"] = profile.busy_seconds ? nlohmann::json(*profile.busy_seconds) : nlohmann::json();
      answer["trace"] = profile.trace_path;
    } catch (const std::exception& error) {
      const std::string message = error.what();
      answer = {{"error", message.substr(0, message.find('\n'))}};
    }
    std::fprintf(answers, "%s\n", answer.dump().c_str());
    std::fflush(answers);
  }
  return 0;
}

}  // namespace parbench
