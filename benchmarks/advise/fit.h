// "Will it fit": --fit=batch finds, for each case, the largest batch that trains without running
// out of memory, then runs the case at that batch (docs/METRICS.md, "Will it fit"). Each probe
// is a child process of this binary that sets the case up and trains two steps at one batch, so
// an out-of-memory error ends that child alone and never leaves the next probe a fragmented
// allocator.
#pragma once

#include "benchmarks/cases/cases.h"
#include "benchmarks/launch/rank_failure.h"

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace parbench {

// What one probe found at one batch.
enum class ProbeResult {
  kFits,         // set up and trained
  kOutOfMemory,  // failed with an out-of-memory error
  kFailed,       // failed otherwise (the message says how): the search stops
};

struct Probe {
  ProbeResult result = ProbeResult::kFailed;
  std::string message;  // kFailed: the case's one-line error
};

// The search, given how to probe one batch: from `start` (rounded up to a multiple of `step`),
// doubling while it fits (up to `cap`) or halving while it does not (down to `step`), then
// bisecting between the largest batch that fits and the smallest that does not until they are
// one step apart. A batch that fits at `cap` ends the search there, without an out-of-memory
// batch; one that does not fit at `step` is a failure. Pure: tests drive it with a fake probe.
FitSearch search_largest_batch(int64_t start, int64_t step, int64_t cap,
                               const std::function<Probe(int64_t batch)>& probe);

// The case `spec` names at another named batch (--batch's meaning: ddp's per rank in weak
// scaling), as build_cases would build it.
CaseSpec case_at_batch(const CaseSpec& spec, int64_t batch, const Options& options, int visible_gpus);

// --fit=batch on CPU devices: the host memory a probe may take, so that the search stops there
// instead of doubling the batch into the host's RAM, where the kernel's OOM killer (of the probe,
// or of another process) would end it instead of an allocation error.
struct HostMemoryBound {
  uint64_t bytes = 0;  // 0: MemAvailable unknown, no bound
  std::string text;    // "10.2 GiB (half of MemAvailable, 20.4 GiB)", or why there is none
};

// Half of MemAvailable, from the text of /proc/meminfo.
HostMemoryBound host_memory_bound(const std::string& meminfo);

// An allocation of host memory that failed: LibTorch's CPU allocator's error, or std::bad_alloc's.
bool is_host_allocation_failure(const std::string& message);

// A probe of `spec` at `batch`: this binary, with this run's arguments but one repetition of
// one iteration of one step after one warm-up step, filtered to that case, in a child process
// whose JSON output is read. Out-of-memory: an error message that says "out of memory", or,
// under a host-memory bound (`host_bytes`, shared by a case's rank processes), a failed host
// allocation.
Probe probe_case(const CaseSpec& spec, int64_t batch, const Options& options, int visible_gpus, uint64_t host_bytes = 0);

// --fit=batch: each case that is not skipped, searched (step: its device count, so the batch
// splits evenly) and replaced by the case at its largest batch, named with `/fit:batch`,
// carrying the search (CaseSpec::fit) for its counters. Progress on stderr.
std::vector<CaseSpec> fit_batches(const std::vector<CaseSpec>& cases, const Options& options, int visible_gpus);

// How a child process ended: `status` is waitpid's, where it finished.
struct ChildEnd {
  bool finished = false;  // false: killed after the probe's time limit, or could not start
  int status = 0;
};

// Runs `binary` with `arguments`, its output (stdout and stderr) to `log`, in a child process
// that dies with this one; killed where it has not finished within the probe's time limit.
// `data_bytes`: where not 0, the child's RLIMIT_DATA (its heap and private mappings, which hold
// LibTorch's CPU tensors), inherited by the processes it starts.
ChildEnd run_child(const std::string& binary, const std::vector<std::string>& arguments, const std::string& log,
                   uint64_t data_bytes = 0);

// "exited with code 3", "was killed by signal 9 (SIGKILL)": a signal is named as one, never as
// the shell's 128 + N, which an exit code can equal.
std::string describe_end(const ChildEnd& end);

// is_out_of_memory (benchmarks/launch/rank_failure.h) tells a probe's out-of-memory error.

}  // namespace parbench
