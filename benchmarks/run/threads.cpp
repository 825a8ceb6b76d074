#include "benchmarks/run/threads.h"

#include <ATen/Parallel.h>

#include <sched.h>

#include <algorithm>
#include <thread>

namespace parbench {

int usable_cores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0) return std::max(1, CPU_COUNT(&set));
  return std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
}

int devices_in_run(const std::vector<CaseSpec>& cases) {
  int most = 1;
  for (const auto& spec : cases) {
    if (spec.skip_reason.empty()) most = std::max(most, spec.gpus);
  }
  return most;
}

int resolve_threads_per_device(int requested, int cores, int devices) {
  if (requested != kThreadsPerDeviceAuto) return requested;
  return std::max(1, cores / std::max(1, devices));
}

void apply_threads_per_device(int threads_per_device, int devices) {
  if (threads_per_device <= 0) return;
  const int threads = threads_per_device * std::max(1, devices);
  if (at::get_num_threads() != threads) at::set_num_threads(threads);
}

void set_interop_threads_once(int threads_per_device) {
  if (threads_per_device <= 0) return;
  try {
    at::set_num_interop_threads(threads_per_device);
  } catch (const std::exception&) {
    // Set already, or inter-op work has started: LibTorch keeps the pool it has.
  }
}

}  // namespace parbench
