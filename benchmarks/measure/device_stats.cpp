#include "benchmarks/measure/device_stats.h"

#include "core/device_timer.h"

#ifdef PARBENCH_WITH_CUDA
#include <c10/cuda/CUDACachingAllocator.h>
#endif
#include <torch/csrc/autograd/profiler_kineto.h>

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <sstream>

namespace parbench {
namespace {

// Kineto's line when it asks CUDA for the devices' properties, which every trace records: with no
// GPU visible CUDA answers an error (35: no driver; 100: no device), which says what the run's
// context says already (gpu_count 0).
constexpr const char* kNoGpuQueryLine = "gpuGetDeviceCount failed with code";

// Runs `work` with this process's stderr (fd 2) going to a temporary file, then writes what it
// caught back to stderr, less the lines that hold `dropped`: nothing else is hidden, only delayed.
template <typename Work>
void with_stderr_lines_dropped(const char* dropped, Work&& work) {
  std::FILE* caught = std::tmpfile();
  const int saved = caught != nullptr ? dup(STDERR_FILENO) : -1;
  if (saved < 0) {  // nothing to catch with: the line passes
    if (caught != nullptr) std::fclose(caught);
    work();
    return;
  }
  std::fflush(stderr);
  dup2(fileno(caught), STDERR_FILENO);
  const auto restore = [&] {
    std::fflush(stderr);
    dup2(saved, STDERR_FILENO);
    close(saved);
    std::string text, line;
    std::rewind(caught);
    for (int c = std::fgetc(caught); c != EOF; c = std::fgetc(caught)) text += static_cast<char>(c);
    std::fclose(caught);
    std::istringstream lines(text);
    std::string kept;
    while (std::getline(lines, line)) {
      if (line.find(dropped) == std::string::npos) kept += line + "\n";
    }
    if (!kept.empty()) {
      [[maybe_unused]] const auto written = write(STDERR_FILENO, kept.data(), kept.size());
    }
  };
  try {
    work();
  } catch (...) {
    restore();
    throw;
  }
  restore();
}

// Length of the union of [start, end) intervals.
double covered_ns(std::vector<std::pair<uint64_t, uint64_t>> intervals) {
  std::sort(intervals.begin(), intervals.end());
  double total = 0;
  uint64_t covered_until = 0;
  for (const auto& [start, end] : intervals) {
    const uint64_t from = std::max(start, covered_until);
    if (end > from) total += static_cast<double>(end - from);
    covered_until = std::max(covered_until, end);
  }
  return total;
}

}  // namespace

void reset_peak_memory(const std::vector<torch::Device>& devices) {
#ifdef PARBENCH_WITH_CUDA
  // The caching allocator only exists once CUDA is initialised; before the first allocation
  // of a process it rejects every device.
  if (all_cuda(devices)) at::globalContext().lazyInitDevice(c10::DeviceType::CUDA);
  for (const auto& device : devices) {
    if (device.is_cuda()) c10::cuda::CUDACachingAllocator::resetPeakStats(device.index());
  }
#endif
}

std::vector<double> peak_memory_bytes(const std::vector<torch::Device>& devices) {
  std::vector<double> peaks;
#ifdef PARBENCH_WITH_CUDA
  if (!all_cuda(devices)) return peaks;
  for (const auto& device : devices) {
    const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(device.index());
    peaks.push_back(static_cast<double>(
        stats.allocated_bytes[static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE)].peak));
  }
#endif
  return peaks;
}

std::optional<std::vector<double>> measure_busy_seconds(const std::vector<torch::Device>& devices,
                                                        const std::function<void()>& step) {
#ifdef PARBENCH_WITH_CUDA
  if (!all_cuda(devices)) return std::nullopt;
  namespace profiler = torch::autograd::profiler;
  using torch::profiler::impl::ActivityType;
  const torch::profiler::impl::ProfilerConfig config(torch::profiler::impl::ProfilerState::KINETO);
  const std::set<ActivityType> activities = {ActivityType::CUDA};
  synchronize_devices(devices);
  profiler::prepareProfiler(config, activities);
  profiler::enableProfiler(config, activities);
  step();
  synchronize_devices(devices);
  const auto result = profiler::disableProfiler();

  std::vector<std::vector<std::pair<uint64_t, uint64_t>>> intervals(devices.size());
  bool any = false;
  for (const auto& event : result->events()) {
    if (event.deviceType() != c10::DeviceType::CUDA) continue;
    for (size_t i = 0; i < devices.size(); ++i) {
      if (devices[i].index() == event.deviceIndex()) {
        intervals[i].emplace_back(event.startNs(), event.endNs());
        any = true;
      }
    }
  }
  if (!any) return std::nullopt;
  std::vector<double> busy;
  for (auto& device_intervals : intervals) busy.push_back(covered_ns(std::move(device_intervals)) / 1e9);
  return busy;
#else
  return std::nullopt;
#endif
}

void save_step_trace(const std::vector<torch::Device>& devices, const std::function<void()>& step,
                     const std::string& path) {
  namespace profiler = torch::autograd::profiler;
  using torch::profiler::impl::ActivityType;
  torch::profiler::impl::ExperimentalConfig experimental;
  experimental.profile_all_threads = true;  // the stage and replica threads issue most of a step
  const torch::profiler::impl::ProfilerConfig config(torch::profiler::impl::ProfilerState::KINETO,
                                                     /*report_input_shapes=*/false, /*profile_memory=*/false,
                                                     /*with_stack=*/false, /*with_flops=*/false,
                                                     /*with_modules=*/false, experimental);
  std::set<ActivityType> activities = {ActivityType::CPU};
  if (all_cuda(devices)) activities.insert(ActivityType::CUDA);
  synchronize_devices(devices);
  profiler::prepareProfiler(config, activities);
  profiler::enableProfiler(config, activities);
  step();
  synchronize_devices(devices);
  const auto finish = [&] {
    const auto result = profiler::disableProfiler();
    if (!std::ofstream(path)) throw std::runtime_error("cannot write the trace " + path);
    result->save(path);
  };
  // Without a visible GPU, kineto's device query fails as expected (kNoGpuQueryLine): only that
  // line is dropped.
  if (!all_cuda(devices) && !torch::cuda::is_available()) {
    with_stderr_lines_dropped(kNoGpuQueryLine, finish);
  } else {
    finish();
  }
}

}  // namespace parbench
