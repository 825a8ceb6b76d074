#include "benchmarks/measure/memory.h"

#include "core/device_timer.h"
#include "strategies/optimizer.h"

#ifdef PARBENCH_WITH_CUDA
#include <ATen/cuda/CUDAContextLight.h>
#include <c10/cuda/CUDACachingAllocator.h>
#endif

#include <algorithm>
#include <string>

namespace parbench {

std::vector<ModelStateBytes> model_state_bytes(const Strategy& strategy) {
  std::vector<ModelStateBytes> bytes;
  for (const auto& device : strategy.model_states()) {
    ModelStateBytes sum;
    for (const auto& parameter : device.parameters) {
      sum.parameters += static_cast<double>(tensor_bytes(parameter));
      sum.gradients += static_cast<double>(tensor_bytes(parameter.grad()));
    }
    for (const auto& state : device.optimizer_state) sum.optimizer_state += static_cast<double>(tensor_bytes(state));
    bytes.push_back(sum);
  }
  return bytes;
}

void release_cached_memory() {
#ifdef PARBENCH_WITH_CUDA
  if (torch::cuda::is_available()) c10::cuda::CUDACachingAllocator::emptyCache();
#endif
}

#ifdef PARBENCH_WITH_CUDA
namespace {

// LibTorch's cuBLAS workspaces back to the allocator, once `devices` have finished with them.
// Those devices only: synchronising another would open a CUDA context on it (about half a GiB,
// on every GPU a launcher's rank can see); a workspace on another device is freed in its own
// stream's order, as any tensor is, and earlier cases ended synchronised.
void hand_back_cublas_workspaces(const std::vector<torch::Device>& devices) {
  synchronize_devices(devices);
  at::cuda::clearCublasWorkspaces();
}

}  // namespace
#endif

void release_leftover_memory(const std::vector<torch::Device>& devices) {
#ifdef PARBENCH_WITH_CUDA
  if (!all_cuda(devices)) return;
  hand_back_cublas_workspaces(devices);
  c10::cuda::CUDACachingAllocator::emptyCache();
#else
  (void)devices;
#endif
}

std::map<int, double> reserved_gib_by_gpu() {
  std::map<int, double> gib;
#ifdef PARBENCH_WITH_CUDA
  if (!torch::cuda::is_available()) return gib;
  const int gpus = static_cast<int>(torch::cuda::device_count());
  // An allocator not yet used has no device state to read (and reserves nothing).
  const bool used = c10::cuda::CUDACachingAllocator::get()->initialized();
  constexpr auto kAggregate = static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE);
  for (int i = 0; i < gpus; ++i) {
    double bytes = 0;
    if (used) {
      bytes = static_cast<double>(
          c10::cuda::CUDACachingAllocator::getDeviceStats(static_cast<c10::DeviceIndex>(i)).reserved_bytes[kAggregate].current);
    }
    gib[i] = bytes / (1024.0 * 1024.0 * 1024.0);
  }
#endif
  return gib;
}

std::vector<AllocatorStats> allocator_stats(const std::vector<torch::Device>& devices, bool release_cublas_workspaces) {
  std::vector<AllocatorStats> all;
#ifdef PARBENCH_WITH_CUDA
  if (!all_cuda(devices)) return all;
  if (release_cublas_workspaces) hand_back_cublas_workspaces(devices);
  constexpr auto kAggregate = static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE);
  for (const auto& device : devices) {
    const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(device.index());
    all.push_back({static_cast<double>(stats.allocated_bytes[kAggregate].current),
                   static_cast<double>(stats.allocated_bytes[kAggregate].peak),
                   static_cast<double>(stats.reserved_bytes[kAggregate].peak),
                   static_cast<double>(stats.num_alloc_retries), static_cast<double>(stats.num_ooms)});
  }
#else
  (void)devices;
  (void)release_cublas_workspaces;
#endif
  return all;
}

benchmark::UserCounters memory_counters(const std::vector<ModelStateBytes>& tensors, const AllocatorWindow& allocator) {
  constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
  benchmark::UserCounters counters;
  const bool measured = !allocator.now.empty() && allocator.before_setup.size() == allocator.now.size();
  const bool between = measured && allocator.between_steps.size() == allocator.now.size();
  for (size_t i = 0; i < tensors.size(); ++i) {
    const auto suffix = "_dev" + std::to_string(i);
    counters["param_mem_gib" + suffix] = tensors[i].parameters / kGiB;
    counters["grad_mem_gib" + suffix] = tensors[i].gradients / kGiB;
    counters["optim_mem_gib" + suffix] = tensors[i].optimizer_state / kGiB;
    if (!measured) counters["model_state_mem_gib" + suffix] = tensors[i].total() / kGiB;
  }
  if (!measured) return counters;
  for (size_t i = 0; i < allocator.now.size(); ++i) {
    const auto suffix = "_dev" + std::to_string(i);
    const auto& before = allocator.before_setup[i];
    const auto& now = allocator.now[i];
    if (between) {
      const auto& steady = allocator.between_steps[i];
      const double batch = i < allocator.batch_bytes.size() ? allocator.batch_bytes[i] : 0.0;
      counters["model_state_mem_gib" + suffix] = std::max(0.0, steady.allocated - before.allocated - batch) / kGiB;
      counters["activation_mem_gib" + suffix] = std::max(0.0, now.peak_allocated - steady.allocated) / kGiB;
    }
    counters["peak_reserved_gib" + suffix] = now.peak_reserved / kGiB;
    counters["alloc_retries" + suffix] = now.alloc_retries - before.alloc_retries;
    counters["ooms" + suffix] = now.ooms - before.ooms;
  }
  return counters;
}

}  // namespace parbench
