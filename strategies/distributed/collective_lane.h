// The collectives' own durations (zero's zero_gather_ms and zero_reduce_ms): each collective is
// issued from a side stream of the rank's device, between two CUDA events there.
#pragma once

#include "core/collective_clock.h"

#include <torch/csrc/distributed/c10d/Work.hpp>
#include <torch/torch.h>

#include <functional>
#include <memory>
#include <optional>

namespace parbench {

// In a step started as timed (`start_step(true)`), on GPUs, outside CUDA-graph capture, each
// collective is issued from the lane's side stream:
// the side stream first waits for the current stream's work so far (what the collective reads
// is ready), records a start event, issues the collective (NCCL's stream waits for the side
// stream), waits for it and records an end event. The current stream does not wait; `wait`
// makes it wait for the end event where the result is needed, so overlap is as before.
//
// Why the pair times the collective itself: the side stream runs the rank's collectives one
// after another, as NCCL's one stream per device does, so a start is recorded once the
// collective before it has ended and its own input is ready, which is when NCCL can start it.
// A slower peer's lateness counts (NCCL's kernel waits for it), as in PyTorch's
// `Work::getDuration()`. Every collective of the step must go through the lane for that to hold.
//
// Elsewhere (other steps, CPU ranks, a captured step) `issue` issues as the caller would and
// `wait` waits on the work; nothing is timed, and once a collective was captured nothing is
// reported. The side stream costs a step time: on 2 H200s, gpt2-medium under zero stages 2 and 3,
// 1.25% in an A/B within one run (likely, not measured: each collective then waits on two more
// streams), so the owner times one step of its choice, not the steps it is measured by.
class CollectiveLane {
 public:
  struct Issued {
    c10::intrusive_ptr<c10d::Work> work;
    int slot = -1;  // the end event that `wait` waits for; -1: wait on `work`
    explicit operator bool() const { return static_cast<bool>(work); }
    void reset() {
      work.reset();
      slot = -1;
    }
  };

  explicit CollectiveLane(size_t kinds);
  ~CollectiveLane();
  CollectiveLane(const CollectiveLane&) = delete;
  CollectiveLane& operator=(const CollectiveLane&) = delete;

  // Whether this step's collectives go through the side stream and are timed.
  void start_step(bool timed);
  // Issues `collective` (one c10d call) on `on`'s device, timed as `kind`.
  Issued issue(size_t kind, const torch::Tensor& on, const std::function<c10::intrusive_ptr<c10d::Work>()>& collective);
  // The current stream waits for `issued`; `clock` times that wait (the exposed part).
  void wait(const Issued& issued, CollectiveClock& clock, const torch::Tensor& on);
  // Milliseconds of `kind`'s collectives over the last timed step (waits for their events);
  // nullopt where none was measured.
  std::optional<double> last_step_ms(size_t kind) const;

 private:
  struct Streams;  // CUDA builds
  std::unique_ptr<Streams> streams_;
};

}  // namespace parbench
