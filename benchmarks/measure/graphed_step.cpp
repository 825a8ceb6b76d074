#include "benchmarks/measure/graphed_step.h"

#include "core/device_timer.h"
#include "models/autocast_cache.h"

#ifdef PARBENCH_WITH_CUDA
#include <ATen/core/CachingHostAllocator.h>
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

#include <algorithm>
#include <stdexcept>

namespace parbench {

#ifdef PARBENCH_WITH_CUDA

// The graph spans every device of the step: its capture begins on the first device's
// capture stream, and the other devices' capture streams join it through events. Each device's
// allocations during the capture go to one private pool id, on each device.
struct GraphedStep::Captured {
  explicit Captured(std::vector<torch::Device> devices) : devices(std::move(devices)) {}
  ~Captured() {
    graph.reset();  // releases the pool on the first device
    if (!pool_ended) return;
    for (size_t d = 1; d < devices.size(); ++d) c10::cuda::CUDACachingAllocator::releasePool(devices[d].index(), pool);
  }
  std::vector<torch::Device> devices;
  at::cuda::CUDAGraph graph;
  c10::MempoolId_t pool{0, 0};
  c10::CaptureId_t capture_id = 0;
  bool pool_ended = false;  // the other devices' pools were begun and ended: release them
  Batch input;
  torch::Tensor loss;
};

namespace {

void copy_unless_same(torch::Tensor& destination, const torch::Tensor& source) {
  if (!destination.is_same(source)) destination.copy_(source, /*non_blocking=*/true);
}

}  // namespace

GraphedStep::GraphedStep(Strategy& strategy, Batch example) {
  // Each GPU once: stages that share a GPU (tests on a one-GPU machine) share its capture stream and pool.
  std::vector<torch::Device> devices;
  for (const auto& device : strategy.devices()) {
    if (!device.is_cuda()) {
      throw std::invalid_argument("a CUDA graph captures a step on GPUs; this strategy runs on " + device.str());
    }
    if (std::find(devices.begin(), devices.end(), device) == devices.end()) devices.push_back(device);
  }
  if (devices.empty()) throw std::invalid_argument("a CUDA graph captures a step on GPUs; this strategy has no device");
  const auto primary = devices.front();
  c10::cuda::CUDAGuard on_primary(primary);
  captured_ = std::make_unique<Captured>(devices);
  captured_->input = std::move(example);

  // On each device a side stream behind the caller's current one becomes current: the warm-up
  // steps and the capture run there.
  std::vector<c10::cuda::CUDAStream> callers, sides;
  for (const auto& device : devices) {
    callers.push_back(c10::cuda::getCurrentCUDAStream(device.index()));
    sides.push_back(c10::cuda::getStreamFromPool(/*isHighPriority=*/false, device.index()));
    stream_waits_for(sides.back(), callers.back());
  }
  {
    c10::cuda::CUDAMultiStreamGuard on_sides(sides);
    for (int step = 0; step < kGraphWarmupSteps; ++step) strategy.train_step(captured_->input);
    // The warm-up's memory stays cached outside the graph's private pool, where the capture cannot
    // use it: handed back first, or a big model (gpt2-medium in fp32) runs out during capture.
    for (const auto& device : devices) torch::cuda::synchronize(device.index());
    c10::cuda::CUDACachingAllocator::emptyCache();
    AutocastCacheSetting no_cached_casts(/*enabled=*/false);
    auto& captured = *captured_;
    captured.pool = at::cuda::graph_pool_handle();
    // As CUDAGraph does for its own device: routed to the pool before the capture begins, so
    // an autograd thread's free cannot race the capture's start.
    for (size_t d = 1; d < devices.size(); ++d) {
      c10::cuda::CUDACachingAllocator::beginAllocateToPool(
          devices[d].index(), captured.pool, [&captured](cudaStream_t stream) {
            cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
            unsigned long long id = 0;
            return cudaStreamGetCaptureInfo(stream, &status, &id) == cudaSuccess &&
                   status == cudaStreamCaptureStatusActive && id == captured.capture_id;
          });
    }
    const auto end_pools = [&captured] {
      if (captured.pool_ended) return;
      for (size_t d = 1; d < captured.devices.size(); ++d) {
        c10::cuda::CUDACachingAllocator::endAllocateToPool(captured.devices[d].index(), captured.pool);
      }
      captured.pool_ended = true;
    };
    // Thread-local mode: other threads' CUDA calls (NCCL's watchdog polling its events, a
    // pipeline stage's host thread) stay legal while this thread captures.
    try {
      captured.graph.capture_begin(captured.pool, cudaStreamCaptureModeThreadLocal);
      cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
      C10_CUDA_CHECK(cudaStreamGetCaptureInfo(sides.front(), &status, &captured.capture_id));
      // The other devices' side streams join the capture behind its start.
      for (size_t d = 1; d < sides.size(); ++d) stream_waits_for(sides[d], sides.front());
      captured.loss = strategy.train_step(captured.input);
      for (size_t d = 1; d < sides.size(); ++d) stream_waits_for(sides.front(), sides[d]);
    } catch (...) {
      // End the capture so the streams and the allocator work again for the cases after this one.
      try {
        captured.graph.capture_end();
      } catch (const std::exception&) {
        // The step's own error is the one to report. CUDAGraph::capture_end stops at a failed
        // cudaStreamEndCapture (an invalidated capture) before it ends its device's pool, and
        // its reset() then never releases it: the allocator would keep a capture underway on
        // that device, deferring every cross-stream free for the rest of the process (on a
        // 2-GPU run, 128 GiB reserved and the next cases out of memory). Done here instead.
        bool graph_owns_pool = true;  // it releases the pool itself once its capture has ended
        try {
          captured.graph.pool();
        } catch (const std::exception&) {
          graph_owns_pool = false;
        }
        if (!graph_owns_pool) {
          try {
            c10::cuda::CUDACachingAllocator::endAllocateToPool(primary.index(), captured.pool);
            at::getHostAllocator(at::kCUDA)->end_allocate_to_pool(captured.pool);
          } catch (const std::exception&) {
            // capture_end got as far as ending them.
          }
          c10::cuda::CUDACachingAllocator::releasePool(primary.index(), captured.pool);
          at::getHostAllocator(at::kCUDA)->release_pool(captured.pool);
        }
      }
      end_pools();
      throw;
    }
    captured.graph.capture_end();
    end_pools();
  }
  for (size_t d = 0; d < devices.size(); ++d) stream_waits_for(callers[d], sides[d]);
}

GraphedStep::~GraphedStep() = default;

torch::Tensor GraphedStep::run(const Batch& batch) {
  auto& captured = *captured_;
  copy_unless_same(captured.input.inputs, batch.inputs);
  copy_unless_same(captured.input.targets, batch.targets);
  // The graph launches on the first device's current stream, behind every device's current
  // work, and every device's current stream then waits for the whole graph.
  const auto& devices = captured.devices;
  const auto primary = c10::cuda::getCurrentCUDAStream(devices.front().index());
  for (size_t d = 1; d < devices.size(); ++d) stream_waits_for(primary, c10::cuda::getCurrentCUDAStream(devices[d].index()));
  {
    c10::cuda::CUDAGuard on_primary(devices.front());
    captured.graph.replay();
  }
  for (size_t d = 1; d < devices.size(); ++d) stream_waits_for(c10::cuda::getCurrentCUDAStream(devices[d].index()), primary);
  return captured.loss;
}

#else

struct GraphedStep::Captured {};

GraphedStep::GraphedStep(Strategy&, Batch) {
  throw std::invalid_argument("a CUDA graph captures a step on GPUs, and this parbench was built without CUDA");
}

GraphedStep::~GraphedStep() = default;

torch::Tensor GraphedStep::run(const Batch&) { return {}; }

#endif

}  // namespace parbench
