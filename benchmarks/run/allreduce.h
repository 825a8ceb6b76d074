// The comm/allreduce sweep: time per all-reduce of float32 buffers across the ranks, with
// nccl-tests' bandwidths (docs/DISTRIBUTED.md): algbw = bytes / time, busbw = algbw * 2(n-1)/n.
#pragma once

#include "benchmarks/config/options.h"
#include "benchmarks/launch/rank_results.h"
#include "benchmarks/run/case_runner.h"
#include "strategies/distributed/world.h"

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

namespace parbench {

// ResNet-50's 25,557,032 fp32 gradients: what one ddp step all-reduces.
inline constexpr int64_t kResNet50GradientBytes = 25'557'032LL * 4;

struct AllreduceCase {
  std::string name;  // comm/allreduce/bytes:<n>/ranks:<N>
  int64_t bytes = 0;
  int ranks = 2;
  std::string skip_reason;  // non-empty: reported as skipped
};

// With ddp among the strategies and --allreduce=on: 1 KiB to 256 MiB in x4 steps, plus
// kResNet50GradientBytes, on the ddp cases' number of ranks. `gpus`: GPUs the ranks can use
// (the sweep times GPUs, so it is skipped without them).
std::vector<AllreduceCase> build_allreduce_cases(const Options& options, int gpus);

// The case of `bytes` on `ranks` ranks, named as the sweep names it, not skipped.
AllreduceCase allreduce_case(int64_t bytes, int ranks);

// A case as its ranks receive it (benchmarks/launch/launcher.h), the counterpart of a train case's
// fields: {"collective": "allreduce", "bytes": n, "ranks": N}.
nlohmann::ordered_json allreduce_fields(const AllreduceCase& allreduce);

// Whether `fields` describe an all-reduce case (a train case's have no "collective").
bool is_allreduce_fields(const nlohmann::json& fields);

// The case allreduce_fields described: how a rank gets it. Throws std::invalid_argument for
// fields that describe none.
AllreduceCase allreduce_case_from_fields(const nlohmann::json& fields);

void register_allreduce_cases(const std::vector<AllreduceCase>& cases, const Options& options, RunProgress& progress);

// How many back-to-back all-reduces of `bytes` one timed iteration runs: about 64 MiB's worth,
// at least 20 (spreading the ranks' start skew), at most 100.
int64_t all_reduces_per_iteration(int64_t bytes);

// nccl-tests' bus bandwidth of a ring all-reduce on `ranks` ranks: algbw x 2(n-1)/n, what each
// link carries (0 on one rank, which sends nothing).
double bus_bandwidth_gbps(double algbw_gbps, int ranks);

// One rank's part of a case: a checked all-reduce, warm-up, then the timed iterations of
// all_reduces_per_iteration(bytes) all-reduces each (its time per all-reduce reported).
RankedRun run_allreduce_rank(World& world, const AllreduceCase& allreduce, const Options& options);

}  // namespace parbench
