// Why a launch's case failed, told from its ranks' one-line reasons: a rank that ran out of GPU
// memory says so, with what the launching process itself holds on that GPU, and is reported
// before the ranks that then waited for it ("no progress ...") or lost their connection to it.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

namespace parbench {

// The launching process's holding per GPU, handed to its ranks: "0:63.50,1:0.00" (CUDA index:
// GiB its CUDA caching allocator reserves there when the ranks start).
inline constexpr const char* kLauncherGpuVariable = "PARBENCH_LAUNCHER_GPU_GIB";
std::string launcher_gpu_text(const std::map<int, double>& gib_by_gpu);
// The inverse; entries that are not "index:GiB" are left out.
std::map<int, double> launcher_gpu_from_text(const std::string& text);

// A rank's reason for running out of memory on `gpu`: "on GPU 0: out of memory, the launching
// process holds 63.50 GiB there (MESSAGE)"; without `launcher_gib`, no word of the launcher.
std::string out_of_memory_reason(int gpu, std::optional<double> launcher_gib, const std::string& message);

// Whether an error message is an out-of-memory error (CUDA's, c10's OutOfMemoryError, NCCL's
// "Cuda failure 'out of memory'", the CPU allocator's).
bool is_out_of_memory(const std::string& message);

struct RankFailure {
  int rank = 0;
  std::string reason;  // the rank's one line (its error.<rank> file), or how it ended
  bool ended_without_reason = false;  // `reason` is how it ended: "was killed by signal 9 (...)"
  std::string place;                  // its mesh coordinates ("dp=1,tp=0"), or ""
};

// Whether a failure is one of its own, not one that follows another rank's: a stall waiting for a
// peer ("no progress for ...") or a connection a peer's end closed. Out of memory always is.
bool is_root_cause(const RankFailure& failure);

// The failure to report first: a rank out of memory, else one that failed on its own
// (is_root_cause), else the first given. `failures` in the order seen; not empty.
const RankFailure& root_cause(const std::vector<RankFailure>& failures);

// "rank 0 on GPU 0: out of memory, ...", "rank 1: REASON", or "rank 1 was killed by signal 9 (...)".
std::string describe_rank_failure(const RankFailure& failure);

// Where the launching process holds at least 1 GiB on a GPU: "; the launching process holds
// 63.50 GiB on GPU 0", for a failure that does not say why the ranks stalled. "" otherwise.
std::string launcher_holding_note(const std::map<int, double>& gib_by_gpu);

}  // namespace parbench
