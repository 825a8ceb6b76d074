// Running the matrix's cases: registering each with Google Benchmark, running the ones that run
// in this process (the distributed ones run on ranks, benchmarks/run/distributed_runner.h), and
// the profile companion's work for a case.
#pragma once

#include "benchmarks/cases/cases.h"
#include "benchmarks/config/options.h"

#include <benchmark/benchmark.h>

#include <chrono>
#include <optional>
#include <string>
#include <vector>

namespace parbench {

// The iterations of each repetition where they are fixed (--iterations; distributed cases
// always), else 0: Google Benchmark's min-time rule decides.
int64_t fixed_iterations(const CaseSpec& spec, const Options& options);

// "[3/12 00:01:23, about 00:04:10 left] name" on stderr as each case that runs starts (skipped
// cases print nothing): its number among them, the time since the run started and, from the
// second case on, the average time of the cases so far times the cases left.
class RunProgress {
 public:
  RunProgress(size_t cases_to_run, bool print);
  // Google Benchmark calls a case once per repetition: only its first call counts.
  void case_started(const std::string& name);

 private:
  size_t cases_to_run_;
  bool print_;
  size_t started_ = 0;
  std::string current_;
  std::chrono::steady_clock::time_point run_start_ = std::chrono::steady_clock::now();
};

// Registers every case; train cases run through run_local_case or, for distributed
// strategies, run_distributed_case (benchmarks/run/distributed_runner.h). A skipped case reports
// skipped_message(reason) (benchmarks/output/outcomes.h).
// Repetitions come from Google Benchmark's --benchmark_repetitions (main sets it from
// --repetitions), so case names carry no "/repeats:N" suffix.
void register_cases(const std::vector<CaseSpec>& cases, const Options& options, RunProgress& progress);

void run_local_case(benchmark::State& state, const CaseSpec& spec, const Options& options);

// What the profile companion measures of a case outside its timed steps.
struct CaseProfile {
  std::optional<std::vector<double>> busy_seconds;  // per device, one step; GPUs and --busy-profile only
  std::string trace_path;                           // --trace only
};

// Whether a case is profiled at all: busy fractions on GPUs, traces everywhere.
bool wants_profile(const CaseSpec& spec, const Options& options);

// The profile companion's work for one case (benchmarks/run/profile_companion.h): sets it up as
// run_local_case does, profiles a step for its busy time and another for its trace, and frees
// its memory.
CaseProfile profile_case(const CaseSpec& spec, const Options& options);

// "<dir>/<case name, '/' and ':' as '_'><suffix>.trace.json".
std::string trace_path(const std::string& dir, const std::string& case_name, const std::string& suffix = "");

// Ends the profile companion, if one was started: after the last case.
void stop_profile_companion();

// Before ranks start on GPUs this process has used: the last local case's model, optimizer state
// and graph go, and every GPU a local case used hands its cuBLAS workspaces and cached blocks
// back (release_leftover_memory), so that the ranks find the memory the earlier cases took.
void release_local_case();

}  // namespace parbench
