// The comm/allreduce sweep: time per all-reduce of float32 buffers across the ranks, with
// nccl-tests' bandwidths (docs/DISTRIBUTED.md): algbw = bytes / time, busbw = algbw * 2(n-1)/n.
#pragma once

#include "benchmarks/cases.h"
#include "benchmarks/launcher.h"
#include "benchmarks/options.h"

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

void register_allreduce_cases(const std::vector<AllreduceCase>& cases, const Options& options, RunProgress& progress);

// How many back-to-back all-reduces of `bytes` one timed iteration runs: about 64 MiB's worth,
// at least 20 (spreading the ranks' start skew), at most 100.
int64_t all_reduces_per_iteration(int64_t bytes);

// One rank's part of a case: a checked all-reduce, warm-up, then the timed iterations of
// all_reduces_per_iteration(bytes) all-reduces each (its time per all-reduce reported).
RankedRun run_allreduce_rank(World& world, const AllreduceCase& allreduce, const Options& options);

}  // namespace parbench
