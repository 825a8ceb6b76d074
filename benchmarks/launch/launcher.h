// Distributed cases run on ranks, one process each. Two ways to get them (docs/DISTRIBUTED.md):
// - parbench's own launcher, here: the benchmark process starts fresh ranks of its own binary
//   for each case (benchmarks/launch/rank_processes.h), with hidden flags, and reads rank 0's
//   result (benchmarks/launch/rank_results.h);
// - an external launcher (torchrun, srun, mpirun) starts every rank (benchmarks/run/rank_worker.h);
//   each runs Google Benchmark over the distributed cases, and rank 0 writes the output.
// Either way every rank runs all repetitions of a case at once, on Google Benchmark's first
// call of it, and each call then reports one repetition (report_next_repetition in
// benchmarks/run/distributed_runner.h, which picks the way).
#pragma once

#include "benchmarks/config/options.h"
#include "benchmarks/launch/rank_results.h"

#include <map>
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

// Runs `launched` on `ranks` fresh processes of `binary` given parbench options `arguments`
// (their --dist-timeout set to `timeout_s`), and returns rank 0's result; throws
// std::runtime_error naming the rank that failed, std::invalid_argument for a case without fields.
RankedRun launch_case(const std::string& binary, const std::vector<std::string>& arguments,
                      const LaunchedCase& launched, int ranks, double timeout_s,
                      const std::map<std::string, std::string>& environment = {});

}  // namespace parbench
