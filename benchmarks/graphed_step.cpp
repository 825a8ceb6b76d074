#include "benchmarks/graphed_step.h"

#include <ATen/autocast_mode.h>

#ifdef PARBENCH_WITH_CUDA
#include <ATen/cuda/CUDAEvent.h>
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

#include <stdexcept>

namespace parbench {

#ifdef PARBENCH_WITH_CUDA

struct GraphedStep::Captured {
  explicit Captured(torch::Device device) : device(device) {}
  torch::Device device;
  at::cuda::CUDAGraph graph;
  Batch input;
  torch::Tensor loss;
};

namespace {

class AutocastCacheOff {
 public:
  AutocastCacheOff() : was_enabled_(at::autocast::is_autocast_cache_enabled()) {
    at::autocast::set_autocast_cache_enabled(false);
  }
  ~AutocastCacheOff() { at::autocast::set_autocast_cache_enabled(was_enabled_); }
  AutocastCacheOff(const AutocastCacheOff&) = delete;
  AutocastCacheOff& operator=(const AutocastCacheOff&) = delete;

 private:
  bool was_enabled_;
};

void copy_unless_same(torch::Tensor& destination, const torch::Tensor& source) {
  if (!destination.is_same(source)) destination.copy_(source, /*non_blocking=*/true);
}

}  // namespace

GraphedStep::GraphedStep(Strategy& strategy, Batch example) {
  const auto& devices = strategy.devices();
  if (devices.size() != 1 || !devices.front().is_cuda()) {
    throw std::invalid_argument("a CUDA graph captures a step on one GPU; this strategy runs on " +
                                std::to_string(devices.size()) + " device(s)" +
                                (devices.empty() ? "" : ", the first " + devices.front().str()));
  }
  const auto device = devices.front();
  c10::cuda::CUDAGuard on_device(device);
  captured_ = std::make_unique<Captured>(device);
  captured_->input = std::move(example);

  const auto caller = c10::cuda::getCurrentCUDAStream(device.index());
  const auto side = c10::cuda::getStreamFromPool(/*isHighPriority=*/false, device.index());
  at::cuda::CUDAEvent caller_done;
  caller_done.record(caller);
  caller_done.block(side);
  {
    c10::cuda::CUDAStreamGuard on_side(side);
    for (int step = 0; step < kGraphWarmupSteps; ++step) strategy.train_step(captured_->input);
    AutocastCacheOff no_cached_casts;
    // Thread-local mode: other threads' CUDA calls (NCCL's watchdog polling its events) stay
    // legal while this thread captures.
    captured_->graph.capture_begin(/*pool=*/{0, 0}, cudaStreamCaptureModeThreadLocal);
    try {
      captured_->loss = strategy.train_step(captured_->input);
    } catch (...) {
      // End the capture so the stream and the allocator work again for the cases after this one.
      try {
        captured_->graph.capture_end();
      } catch (const std::exception&) {
        // The step's own error is the one to report.
      }
      throw;
    }
    captured_->graph.capture_end();
  }
  at::cuda::CUDAEvent side_done;
  side_done.record(side);
  side_done.block(caller);
}

GraphedStep::~GraphedStep() = default;

torch::Tensor GraphedStep::run(const Batch& batch) {
  c10::cuda::CUDAGuard on_device(captured_->device);
  copy_unless_same(captured_->input.inputs, batch.inputs);
  copy_unless_same(captured_->input.targets, batch.targets);
  captured_->graph.replay();
  return captured_->loss;
}

#else

struct GraphedStep::Captured {};

GraphedStep::GraphedStep(Strategy&, Batch) {
  throw std::invalid_argument("a CUDA graph captures a step on one GPU, and this parbench was built without CUDA");
}

GraphedStep::~GraphedStep() = default;

torch::Tensor GraphedStep::run(const Batch&) { return {}; }

#endif

}  // namespace parbench
