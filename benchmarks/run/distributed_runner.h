// Distributed (one process per device) cases inside a Google Benchmark run.
#pragma once

#include "benchmarks/cases/cases.h"
#include "benchmarks/launch/rank_results.h"

namespace parbench {

// Runs one distributed case: starts its ranks (or, inside a rank, takes part) and reports
// rank 0's view of the step times.
void run_distributed_case(benchmark::State& state, const CaseSpec& spec, const Options& options);

// A rank's part of a train/ddp case (benchmarks/run/distributed_runner.cpp). `ends_with_case`: profile
// one step after the timed ones, for a rank that ends with the case.
RankedRun run_training_rank(World& world, const CaseSpec& spec, const Options& options, bool ends_with_case);

}  // namespace parbench
