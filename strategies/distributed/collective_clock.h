// How long a rank's compute stream waits on its collectives (tensor_parallel's and zero's
// exposed communication), from CUDA events on that stream.
#pragma once

#include <torch/torch.h>

#include <memory>
#include <optional>

namespace parbench {

// On GPUs, how long the rank's compute stream waits on a step's collectives: a CUDA event
// recorded on it before (`before`) and one after (`after`) each wait for a collective's result
// (the stream then waits for NCCL's), summed: the step's exposed communication, a slower peer's
// lateness included. Where `before` is recorded when the collective is issued and its result is
// needed at once (tensor_parallel), that is the collective's whole time. Not measured on the
// CPU, nor in a step captured in a CUDA graph (timing events cannot be captured): its last eager
// step's reading is dropped too.
class CollectiveClock {
 public:
  CollectiveClock();
  ~CollectiveClock();
  CollectiveClock(const CollectiveClock&) = delete;
  CollectiveClock& operator=(const CollectiveClock&) = delete;

  void start_step();
  // Around one wait on `x`'s device; no-ops off CUDA and while its stream is captured.
  void before(const torch::Tensor& x);
  void after(const torch::Tensor& x);
  // Milliseconds over the last step (waits for its events); nullopt where not measured.
  std::optional<double> last_step_ms() const;

 private:
  struct Events;  // CUDA builds
  std::unique_ptr<Events> events_;
};

}  // namespace parbench
