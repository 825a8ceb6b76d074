// Running the parbench binary from tests as a user or a launcher would: one process or several
// (the ranks of an external launch), with extra environment variables, their stdout and
// stderr kept, and the rank processes parbench's own launcher starts, found and signalled.
#pragma once

#include "benchmarks/launch/temporary_directory.h"

#include <nlohmann/json.hpp>

#include <sys/resource.h>
#include <sys/types.h>

#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace parbench {

struct ProcessRun {
  int exit_code = -1;  // -1: ended by a signal, or killed at the deadline
  bool killed_at_deadline = false;
  std::string out, err;
  double seconds = 0;  // from the start to the end of the process
};

// How a process starts beyond its arguments and environment.
struct ProcessSetup {
  // RLIMIT_FSIZE, with SIGXFSZ ignored: a write past this many bytes fails (EFBIG), as one on a
  // full disk does (ENOSPC). It holds for stdout's and stderr's files too.
  std::optional<rlim_t> file_size_limit;
  // STDOUT_FILENO or STDERR_FILENO: a pipe whose reading end is closed, as after `| head -1`
  // (its output then is not kept).
  int closed_pipe = -1;
};

// One parbench process: PARBENCH_BINARY (the environment's, where set, else the build's) with `arguments`, the test's environment plus
// `environment`, in a process group of its own (its id: pid()). Killed (with the ranks it started) if still running when destroyed.
class ParbenchProcess {
 public:
  ParbenchProcess(const std::vector<std::string>& arguments, const std::map<std::string, std::string>& environment,
                  const ProcessSetup& setup = {});
  ~ParbenchProcess();
  ParbenchProcess(const ParbenchProcess&) = delete;
  ParbenchProcess& operator=(const ParbenchProcess&) = delete;

  pid_t pid() const { return pid_; }
  double seconds() const;  // since the start
  std::string err() const;  // stderr so far

  // The rank process parbench's own launcher started as `rank`, if it is running now.
  std::optional<pid_t> rank_process(int rank) const;
  // Waits until `rank_process(rank)` finds one; nullopt after `timeout_s` or if parbench ended.
  std::optional<pid_t> wait_for_rank(int rank, double timeout_s);
  // Waits until stderr contains `text`; the seconds since the start then, or nullopt.
  std::optional<double> wait_for_err(const std::string& text, double timeout_s);

  // Waits for the process to end, killing it once `deadline_s` have passed since its start.
  ProcessRun wait(double deadline_s);

 private:
  TemporaryDirectory outputs_{"parbench-process"};
  pid_t pid_ = -1;
  std::chrono::steady_clock::time_point start_;
  std::optional<ProcessRun> finished_;
};

// Starts one parbench process per environment, as torchrun would start ranks, and waits for
// all of them (each killed after `deadline_s`).
std::vector<ProcessRun> run_ranks(const std::vector<std::map<std::string, std::string>>& environments,
                                  const std::vector<std::string>& arguments, double deadline_s = 60);

// A TCP port on 127.0.0.1 that was free a moment ago.
int free_port();

// The variables torchrun gives rank `rank` of `world_size` on this node.
std::map<std::string, std::string> torchrun_environment(int rank, int world_size, int port);

nlohmann::json read_json(const std::string& path);

// $TMPDIR set to `dir` while this lives, then as it was.
class TmpdirFor {
 public:
  explicit TmpdirFor(const TemporaryDirectory& dir);
  ~TmpdirFor();
  TmpdirFor(const TmpdirFor&) = delete;
  TmpdirFor& operator=(const TmpdirFor&) = delete;

 private:
  std::optional<std::string> previous_;
};

// The value of `name` in the environment process `pid` started with, if set there.
std::optional<std::string> process_environment(pid_t pid, const std::string& name);

// Processes alive (not zombies) whose environment holds NAME=VALUE: tests give parbench a
// variable of their own, which its ranks inherit, to find any rank that outlived a run.
std::vector<pid_t> live_processes_with(const std::string& name, const std::string& value);

}  // namespace parbench
