#include "core/device_timer.h"

#ifdef PARBENCH_WITH_CUDA
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAStream.h>
#endif

#include <algorithm>

namespace parbench {

struct DeviceTimer::CudaEvents {
#ifdef PARBENCH_WITH_CUDA
  std::vector<at::cuda::CUDAEvent> start, stop;
#endif
};

int visible_gpu_count() { return torch::cuda::is_available() ? static_cast<int>(torch::cuda::device_count()) : 0; }

bool all_cuda(const std::vector<torch::Device>& devices) {
  return !devices.empty() && std::all_of(devices.begin(), devices.end(), [](const auto& d) { return d.is_cuda(); });
}

void synchronize_devices(const std::vector<torch::Device>& devices) {
  for (const auto& device : devices) {
    if (device.is_cuda()) torch::cuda::synchronize(device.index());
  }
}

void stream_waits_for(const c10::Stream& waiter, const c10::Stream& stream) {
  c10::Event done(stream.device_type());
  done.record(stream);
  done.block(waiter);
}

double median_synchronised_seconds(const std::vector<torch::Device>& devices, int repeats,
                                   const std::function<void()>& work) {
  std::vector<double> samples;
  for (int run = 0; run <= repeats; ++run) {
    synchronize_devices(devices);
    const auto begin = std::chrono::steady_clock::now();
    work();
    synchronize_devices(devices);
    if (run > 0) samples.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count());
  }
  std::sort(samples.begin(), samples.end());
  return samples[samples.size() / 2];
}

double longest_span_seconds(size_t devices, const std::function<double(size_t device)>& span_ms) {
  double longest_ms = 0;
  for (size_t i = 0; i < devices; ++i) longest_ms = std::max(longest_ms, span_ms(i));
  return longest_ms / 1e3;
}

DeviceTimer::DeviceTimer(std::vector<torch::Device> devices, TimerKind kind)
    : devices_(std::move(devices)), kind_(kind), events_(std::make_unique<CudaEvents>()) {
#ifdef PARBENCH_WITH_CUDA
  use_events_ = kind_ == TimerKind::kEvent && all_cuda(devices_);
  if (use_events_) {
    for (size_t i = 0; i < devices_.size(); ++i) {
      events_->start.emplace_back(cudaEventDefault);
      events_->stop.emplace_back(cudaEventDefault);
    }
  }
#endif
}

DeviceTimer::~DeviceTimer() = default;
DeviceTimer::DeviceTimer(DeviceTimer&&) noexcept = default;
DeviceTimer& DeviceTimer::operator=(DeviceTimer&&) noexcept = default;

void DeviceTimer::start(const std::function<void()>& line_up) {
  if (kind_ == TimerKind::kEvent) {
    synchronize_devices(devices_);
    if (line_up) line_up();
  }
#ifdef PARBENCH_WITH_CUDA
  if (use_events_) {
    for (size_t i = 0; i < devices_.size(); ++i) {
      events_->start[i].record(c10::cuda::getCurrentCUDAStream(devices_[i].index()));
    }
    return;
  }
#endif
  host_start_ = std::chrono::steady_clock::now();
}

double DeviceTimer::stop() {
#ifdef PARBENCH_WITH_CUDA
  if (use_events_) {
    for (size_t i = 0; i < devices_.size(); ++i) {
      events_->stop[i].record(c10::cuda::getCurrentCUDAStream(devices_[i].index()));
    }
    return longest_span_seconds(devices_.size(), [this](size_t i) {
      events_->stop[i].synchronize();
      return static_cast<double>(events_->start[i].elapsed_time(events_->stop[i]));
    });
  }
#endif
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - host_start_).count();
}

}  // namespace parbench
