#include "core/collective_clock.h"

#ifdef PARBENCH_WITH_CUDA
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAStream.h>
#endif

#include <algorithm>
#include <map>
#include <vector>

namespace parbench {

double exposed_wait_ms(const std::vector<WaitInterval>& waits) {
  std::map<intptr_t, std::pair<double, double>> spans;  // per stream: its first wait's start, its last wait's end
  for (const auto& wait : waits) {
    auto found = spans.find(wait.stream);
    if (found == spans.end()) {
      spans[wait.stream] = {wait.begin, wait.end};
    } else {
      found->second.first = std::min(found->second.first, wait.begin);
      found->second.second = std::max(found->second.second, wait.end);
    }
  }
  if (spans.size() <= 1) {
    double total = 0;
    for (const auto& wait : waits) total += wait.end - wait.begin;
    return total;
  }
  std::vector<double> edges;
  for (const auto& wait : waits) {
    edges.push_back(wait.begin);
    edges.push_back(wait.end);
  }
  std::sort(edges.begin(), edges.end());
  double exposed = 0;
  for (size_t k = 0; k + 1 < edges.size(); ++k) {
    const double from = edges[k], to = edges[k + 1];
    if (to <= from) continue;
    const double at = (from + to) / 2;
    std::map<intptr_t, bool> waiting;
    for (const auto& wait : waits) {
      if (wait.begin <= at && at < wait.end) waiting[wait.stream] = true;
    }
    if (waiting.empty()) continue;
    // Exposed unless a stream between its first and last wait is not waiting then (computing).
    bool another_computes = false;
    for (const auto& [stream, span] : spans) {
      if (span.first <= at && at < span.second && waiting.count(stream) == 0) another_computes = true;
    }
    if (!another_computes) exposed += to - from;
  }
  return exposed;
}

#ifdef PARBENCH_WITH_CUDA
struct CollectiveClock::Events {
  std::vector<std::unique_ptr<at::cuda::CUDAEvent>> starts, ends;  // reused step after step
  std::vector<cudaStream_t> streams;  // per pair: the stream that waited
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
    events.streams.push_back(nullptr);
  }
  events.starts[events.used]->record(stream);
  events.streams[events.used] = stream.stream();
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
  std::vector<WaitInterval> waits;
  for (size_t i = 0; i < events.used; ++i) {
    events.ends[i]->synchronize();
    // On the device's one timeline, from the step's first wait's start.
    const double begin = i == 0 ? 0.0 : events.starts[0]->elapsed_time(*events.starts[i]);
    waits.push_back({reinterpret_cast<intptr_t>(events.streams[i]), begin,
                     begin + events.starts[i]->elapsed_time(*events.ends[i])});
  }
  return exposed_wait_ms(waits);
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
