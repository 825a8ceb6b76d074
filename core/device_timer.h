// Times the work a step queues on a set of devices; below strategies/ and benchmarks/, which
// both time and synchronise through it.
#pragma once

#include <torch/torch.h>

#include <chrono>
#include <functional>
#include <memory>
#include <vector>

namespace parbench {

// How a case's steps are timed (--timer).
enum class TimerKind { kEvent, kHost };

// kEvent: start() waits until every device is idle, then records a CUDA event on each
// device's current stream; stop() records the end events and returns the longest
// start-to-end span over the devices (on the CPU: the host clock, which is exact there).
// kHost: the host clock with no device synchronisation, as the tutorial timed.
// Move-only: it owns CUDA events.
class DeviceTimer {
 public:
  DeviceTimer(std::vector<torch::Device> devices, TimerKind kind);
  ~DeviceTimer();
  DeviceTimer(DeviceTimer&&) noexcept;
  DeviceTimer& operator=(DeviceTimer&&) noexcept;
  DeviceTimer(const DeviceTimer&) = delete;
  DeviceTimer& operator=(const DeviceTimer&) = delete;

  // `line_up`, when given, runs between the wait and the start events (kEvent only): the
  // work it queues is not timed, the step behind it starts the clock on each device.
  void start(const std::function<void()>& line_up = {});
  // Seconds since start(); waits for the end events.
  double stop();

 private:
  struct CudaEvents;
  std::vector<torch::Device> devices_;
  TimerKind kind_;
  bool use_events_ = false;
  std::chrono::steady_clock::time_point host_start_;
  std::unique_ptr<CudaEvents> events_;
};

// The time of an iteration on `devices` devices, from each device's start-to-end span in ms as
// `span_ms(i)` reads it (for a CUDA event timer: waits for device i's end event, then the time
// between its start and end events): the longest span, in seconds. DeviceTimer::stop's
// reading, apart from the events, so that it is tested without a GPU.
double longest_span_seconds(size_t devices, const std::function<double(size_t device)>& span_ms);

// The GPUs this process sees (0 where CUDA is not available).
int visible_gpu_count();

// Whether `devices` is not empty and every one is a GPU.
bool all_cuda(const std::vector<torch::Device>& devices);

// Waits until every CUDA device in `devices` has finished its queued work.
void synchronize_devices(const std::vector<torch::Device>& devices);

// `waiter` queues behind the work queued so far on `stream` (an event recorded on one and waited
// for on the other, also inside a CUDA graph's capture), without the host waiting.
void stream_waits_for(const c10::Stream& waiter, const c10::Stream& stream);

// Host seconds `work` takes with `devices` synchronised before and after: the median of
// `repeats` runs after one untimed run. For measurements made at set-up, outside the timed steps.
double median_synchronised_seconds(const std::vector<torch::Device>& devices, int repeats,
                                   const std::function<void()>& work);

}  // namespace parbench
