// Distributed (one process per device) cases inside a Google Benchmark run.
#pragma once

#include "benchmarks/cases/cases.h"
#include "benchmarks/launch/launcher.h"
#include "benchmarks/launch/rank_results.h"
#include "strategies/distributed/world.h"

#include <benchmark/benchmark.h>

#include <functional>
#include <optional>

namespace parbench {

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

// Runs one distributed case: starts its ranks (or, inside a rank, takes part) and reports
// rank 0's view of the step times.
void run_distributed_case(benchmark::State& state, const CaseSpec& spec, const Options& options);

// A rank's part of a train/ddp case (benchmarks/run/distributed_runner.cpp). `ends_with_case`: profile
// one step after the timed ones, for a rank that ends with the case.
RankedRun run_training_rank(World& world, const CaseSpec& spec, const Options& options, bool ends_with_case);

}  // namespace parbench
