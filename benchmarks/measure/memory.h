// The memory breakdown a case reports per device (docs/METRICS.md, "Memory"): what persists
// between steps (parameters, gradients, optimizer state) from the strategy's tensors, and on
// GPUs what the CUDA caching allocator saw (model states, activations at the peak, peak
// reserved, retries and out-of-memory errors).
#pragma once

#include "strategies/strategy.h"

#include <benchmark/benchmark.h>

#include <map>
#include <vector>

namespace parbench {

// Bytes of the tensors one device holds between steps.
struct ModelStateBytes {
  double parameters = 0;
  double gradients = 0;  // of those parameters, where defined
  double optimizer_state = 0;
  double total() const { return parameters + gradients + optimizer_state; }
};

// Per device, in the strategy's devices() order, from its model_states().
std::vector<ModelStateBytes> model_state_bytes(const Strategy& strategy);

// One device's caching-allocator statistics (c10::cuda::CUDACachingAllocator::getDeviceStats).
struct AllocatorStats {
  double allocated = 0;       // bytes allocated now
  double peak_allocated = 0;  // since the last reset_peak_memory
  double peak_reserved = 0;
  double alloc_retries = 0;   // cumulative over the process
  double ooms = 0;
};

// Hands what the caching allocator holds unused back to the driver (where there is a GPU): after
// a case, or a failed piece of --advise's profile, so that the next one starts from free memory,
// also for what allocates outside the allocator (cuBLAS's handles, NCCL's buffers).
void release_cached_memory();

// Before a case's set-up, where no CUDA graph of this process is alive: the devices synchronised,
// the cuBLAS workspaces that earlier work left allocated handed back (LibTorch keeps one per
// handle and stream, about 32 MiB each on Hopper, and every graphed case's warm-up takes new ones
// on a fresh pool stream; --advise's graphed profile, many), and the cache emptied. Without it
// a case's peak counted what the cases before it left: up to 2.5 GiB on a pipeline's second GPU
// in one process (ResNet-50 on 2 H200s, reports/2026-11-27-2xh200-tp-halves/RUN.md). A live graph's
// kernels use its workspaces, so never while one is.
void release_leftover_memory(const std::vector<torch::Device>& devices);

// What this process's CUDA caching allocator reserves on each visible GPU now, in GiB (0 where
// it has not been used); empty without CUDA. What a launch's ranks share their GPUs with.
std::map<int, double> reserved_gib_by_gpu();

// Per device; empty off CUDA (every device must be a GPU). `release_cublas_workspaces`: first hand
// the cuBLAS workspaces that LibTorch keeps allocated per handle and stream (up to 32 MiB each
// on Hopper, ResNet-50's SGD model states being 200 MiB) back to the cache, so that what stays
// allocated is the case's own tensors; the next matrix product takes one again from the cache.
// Not where a CUDA graph is yet to be captured.
std::vector<AllocatorStats> allocator_stats(const std::vector<torch::Device>& devices,
                                            bool release_cublas_workspaces = false);

// What the allocator saw over a case, per device: before its set-up (right after
// reset_peak_memory), between two steps (the devices synchronised, the batch held), and now
// (after the timed steps; an eager case's between-steps reading is this one, its cuBLAS
// workspaces released). Empty vectors off CUDA.
struct AllocatorWindow {
  std::vector<AllocatorStats> before_setup, between_steps, now;
  std::vector<double> batch_bytes;  // per device: the batch held between steps (device data)
};

// The counters: param_mem_gib_dev<i>, grad_mem_gib_dev<i>, optim_mem_gib_dev<i> from the
// tensors; model_state_mem_gib_dev<i> from the allocator where measured (GPUs), else the sum of
// the three; and on GPUs activation_mem_gib_dev<i>, peak_reserved_gib_dev<i>,
// alloc_retries_dev<i> and ooms_dev<i>.
benchmark::UserCounters memory_counters(const std::vector<ModelStateBytes>& tensors, const AllocatorWindow& allocator);

}  // namespace parbench
