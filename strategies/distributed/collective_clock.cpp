#include "strategies/distributed/collective_clock.h"

#ifdef PARBENCH_WITH_CUDA
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAStream.h>
#endif

#include <vector>

namespace parbench {

#ifdef PARBENCH_WITH_CUDA
struct CollectiveClock::Events {
  std::vector<std::unique_ptr<at::cuda::CUDAEvent>> starts, ends;  // reused step after step
  size_t used = 0;             // pairs recorded this step
  bool timed = false;          // a step recorded events
  bool captured = false;       // a collective ran while its stream was captured
  bool pending = false;        // a start without its end yet
};

CollectiveClock::CollectiveClock() : events_(std::make_unique<Events>()) {}
CollectiveClock::~CollectiveClock() = default;

void CollectiveClock::start_step() { events_->used = 0; }

void CollectiveClock::before(const torch::Tensor& x) {
  if (!x.is_cuda()) return;
  const auto stream = c10::cuda::getCurrentCUDAStream(x.device().index());
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  C10_CUDA_CHECK(cudaStreamIsCapturing(stream.stream(), &status));
  if (status != cudaStreamCaptureStatusNone) {
    events_->captured = true;
    return;
  }
  auto& events = *events_;
  if (events.used == events.starts.size()) {
    events.starts.push_back(std::make_unique<at::cuda::CUDAEvent>(cudaEventDefault));
    events.ends.push_back(std::make_unique<at::cuda::CUDAEvent>(cudaEventDefault));
  }
  events.starts[events.used]->record(stream);
  events.pending = true;
}

void CollectiveClock::after(const torch::Tensor& x) {
  auto& events = *events_;
  if (!events.pending) return;
  events.ends[events.used]->record(c10::cuda::getCurrentCUDAStream(x.device().index()));
  events.pending = false;
  ++events.used;
  events.timed = true;
}

std::optional<double> CollectiveClock::last_step_ms() const {
  const auto& events = *events_;
  if (!events.timed || events.captured) return std::nullopt;
  double total = 0;
  for (size_t i = 0; i < events.used; ++i) {
    events.ends[i]->synchronize();
    total += events.starts[i]->elapsed_time(*events.ends[i]);
  }
  return total;
}
#else
struct CollectiveClock::Events {};
CollectiveClock::CollectiveClock() = default;
CollectiveClock::~CollectiveClock() = default;
void CollectiveClock::start_step() {}
void CollectiveClock::before(const torch::Tensor&) {}
void CollectiveClock::after(const torch::Tensor&) {}
std::optional<double> CollectiveClock::last_step_ms() const { return std::nullopt; }
#endif

}  // namespace parbench
