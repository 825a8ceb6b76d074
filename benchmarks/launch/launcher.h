// Distributed cases run on ranks, one process each. Two ways to get them (docs/DISTRIBUTED.md):
// - parbench's own launcher: the benchmark process starts fresh ranks of its own binary for
//   each case (benchmarks/launch/rank_processes.h), with hidden flags, and reads rank 0's result
//   (benchmarks/launch/rank_results.h);
// - an external launcher (torchrun, srun, mpirun) starts every rank (benchmarks/run/rank_worker.h);
//   each runs Google Benchmark over the distributed cases, and rank 0 writes the output.
// Either way every rank runs all repetitions of a case at once, on Google Benchmark's first
// call of it, and each call then reports one repetition.
#pragma once

#include "benchmarks/config/options.h"
#include "benchmarks/launch/rank_results.h"
#include "strategies/distributed/world.h"

#include <benchmark/benchmark.h>

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace parbench {

// What a launch runs: a case's name and its fields, as JSON text: a train case's (fields_json in
// benchmarks/cases/cases.h) or an all-reduce case's (allreduce_fields in benchmarks/run/allreduce.h). Every
// rank builds its case from the fields alone (case_from_fields, allreduce_case_from_fields), as the
// profile companion does (benchmarks/run/profile_companion.h); the name only checks what they built.
struct LaunchedCase {
  std::string name;
  std::string fields;
};

struct ReportedRepetition {
  const RankedRun* run;
  size_t index;
};

// For each of Google Benchmark's calls of a distributed case. The first call runs the case:
// in this process with `run_rank` when an external launcher started it, otherwise on `ranks`
// fresh processes of this binary. Every call reports the next repetition's iteration times
// with SetIterationTime. Returns that repetition, or nullopt after SkipWithError (one line
// naming the rank that failed).
std::optional<ReportedRepetition> report_next_repetition(benchmark::State& state, const LaunchedCase& launched,
                                                         int ranks, const Options& options,
                                                         const std::function<RankedRun(World&)>& run_rank);

// Runs `launched` on `ranks` fresh processes of `binary` given parbench options `arguments`
// (their --dist-timeout set to `timeout_s`), and returns rank 0's result; throws
// std::runtime_error naming the rank that failed, std::invalid_argument for a case without fields.
RankedRun launch_case(const std::string& binary, const std::vector<std::string>& arguments,
                      const LaunchedCase& launched, int ranks, double timeout_s,
                      const std::map<std::string, std::string>& environment = {});

}  // namespace parbench
