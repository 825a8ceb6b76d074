#include "strategies/distributed/collective_lane.h"

#ifdef PARBENCH_WITH_CUDA
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

#include <vector>

namespace parbench {

#ifdef PARBENCH_WITH_CUDA
struct CollectiveLane::Streams {
  explicit Streams(size_t kinds) : kinds(kinds) {}
  size_t kinds;
  std::optional<c10::cuda::CUDAStream> side;  // made at the first collective, on its device
  at::cuda::CUDAEvent ready;                  // the current stream's work so far (no timing)
  // Per collective of a step, reused step after step.
  std::vector<std::unique_ptr<at::cuda::CUDAEvent>> starts, ends;
  std::vector<size_t> kind_of;
  size_t used = 0;        // collectives of the last timed step issued through the side stream
  bool active = false;    // this step is timed
  bool captured = false;  // a collective was issued while its stream was captured
};

CollectiveLane::CollectiveLane(size_t kinds) : streams_(std::make_unique<Streams>(kinds)) {}
CollectiveLane::~CollectiveLane() = default;

void CollectiveLane::start_step(bool timed) {
  streams_->active = timed;
  if (timed) streams_->used = 0;
}

CollectiveLane::Issued CollectiveLane::issue(size_t kind, const torch::Tensor& on,
                                             const std::function<c10::intrusive_ptr<c10d::Work>()>& collective) {
  auto& s = *streams_;
  TORCH_CHECK(kind < s.kinds, "CollectiveLane: kind ", kind, " of ", s.kinds);
  if (!s.active || !on.is_cuda()) return Issued{collective(), -1};
  const auto device = on.device().index();
  const auto current = c10::cuda::getCurrentCUDAStream(device);
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  C10_CUDA_CHECK(cudaStreamIsCapturing(current.stream(), &status));
  if (status != cudaStreamCaptureStatusNone) {
    s.captured = true;
    return Issued{collective(), -1};
  }
  if (!s.side || s.side->device_index() != device) s.side = c10::cuda::getStreamFromPool(false, device);
  if (s.used == s.starts.size()) {
    s.starts.push_back(std::make_unique<at::cuda::CUDAEvent>(cudaEventDefault));
    s.ends.push_back(std::make_unique<at::cuda::CUDAEvent>(cudaEventDefault));
    s.kind_of.push_back(kind);
  }
  const size_t slot = s.used++;
  s.kind_of[slot] = kind;
  s.ready.record(current);
  s.ready.block(*s.side);
  c10::intrusive_ptr<c10d::Work> work;
  {
    // The process group orders NCCL's stream after the current stream: the side one here.
    c10::cuda::CUDAStreamGuard on_side(*s.side);
    s.starts[slot]->record(*s.side);
    work = collective();
    work->wait();  // the side stream waits for NCCL's end
    s.ends[slot]->record(*s.side);
  }
  return Issued{work, static_cast<int>(slot)};
}

std::optional<double> CollectiveLane::last_step_ms(size_t kind) const {
  const auto& s = *streams_;
  if (s.used == 0 || s.captured) return std::nullopt;
  double total = 0;
  for (size_t i = 0; i < s.used; ++i) {
    if (s.kind_of[i] != kind) continue;
    s.ends[i]->synchronize();
    total += s.starts[i]->elapsed_time(*s.ends[i]);
  }
  return total;
}
#else
struct CollectiveLane::Streams {};
CollectiveLane::CollectiveLane(size_t) {}
CollectiveLane::~CollectiveLane() = default;
void CollectiveLane::start_step(bool) {}
CollectiveLane::Issued CollectiveLane::issue(size_t, const torch::Tensor&,
                                             const std::function<c10::intrusive_ptr<c10d::Work>()>& collective) {
  return Issued{collective(), -1};
}
std::optional<double> CollectiveLane::last_step_ms(size_t) const { return std::nullopt; }
#endif

void CollectiveLane::wait(const Issued& issued, CollectiveClock& clock, const torch::Tensor& on) {
  if (!issued) return;
  clock.before(on);
  if (issued.slot < 0) {
    issued.work->wait();
  } else {
#ifdef PARBENCH_WITH_CUDA
    streams_->ends.at(static_cast<size_t>(issued.slot))->block(c10::cuda::getCurrentCUDAStream(on.device().index()));
#endif
  }
  clock.after(on);
}

}  // namespace parbench
