// How long a rank's compute stream waits on its collectives (tensor_parallel's and zero's
// exposed communication), from CUDA events on that stream.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

namespace parbench {

// One wait of a compute stream on a collective, in milliseconds on the device's timeline.
struct WaitInterval {
  intptr_t stream = 0;
  double begin = 0, end = 0;
};

// The exposed part of a step's waits: on one stream, their sum; on several (tensor_parallel's two
// halves of the batch, each on its own stream), the time some stream waits while no other stream
// between its own first and last wait of the step is free of waiting: a wait the other stream's
// compute overlaps is hidden. A stream idle between its waits for another reason counts as
// computing, so the figure is a lower bound: tensor_parallel's first half's stream idles at the
// joins with the second (after the forward, while the second half's loss collectives run) and
// at each shared parameter's gradient accumulation, which waits for the second half's gradient.
double exposed_wait_ms(const std::vector<WaitInterval>& waits);

// On GPUs, how long the rank's compute streams wait on a step's collectives: a CUDA event
// recorded on the waiting stream before (`before`) and one after (`after`) each wait for a
// collective's result (the stream then waits for NCCL's); on one stream their sum, on several
// exposed_wait_ms of them: the step's exposed communication, a slower peer's lateness included.
// Where `before` is recorded when the collective is issued and its result is needed at once
// (tensor_parallel), that is the collective's whole time. Not measured on the CPU, nor in a step
// captured in a CUDA graph (timing events cannot be captured): its last eager step's reading is
// dropped too.
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
