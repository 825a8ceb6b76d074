// Distributed (one process per device) cases inside a Google Benchmark run.
#pragma once

#include "benchmarks/cases.h"

namespace parbench {

// Every rank must run the same number of iterations, so distributed cases never use Google
// Benchmark's adaptive count.
inline constexpr int64_t kDefaultDistributedIterations = 10;

// Runs one distributed case: starts its ranks (or, inside a rank, takes part) and reports
// rank 0's view of the step times.
void run_distributed_case(benchmark::State& state, const CaseSpec& spec, const Options& options);

}  // namespace parbench
