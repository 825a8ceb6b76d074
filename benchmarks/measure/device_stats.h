// Per-device facts a case reports besides time: peak memory, and how busy each device was.
#pragma once

#include <torch/torch.h>

#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace parbench {

// Starts a new peak-memory window on every CUDA device in `devices`.
void reset_peak_memory(const std::vector<torch::Device>& devices);

// Peak allocated bytes per device since the last reset; empty off CUDA.
std::vector<double> peak_memory_bytes(const std::vector<torch::Device>& devices);

// Runs `step` once under the CUDA activity profiler and returns, per device, the seconds in
// which at least one kernel or copy ran (overlapping work counted once). nullopt off CUDA or
// where the profiler cannot trace.
std::optional<std::vector<double>> measure_busy_seconds(const std::vector<torch::Device>& devices,
                                                        const std::function<void()>& step);

// Runs `step` once under the profiler, host threads (every thread: stage and replica threads
// too) and, on GPUs, kernels and copies, and saves a Chrome/Perfetto trace to `path`. Throws
// std::runtime_error if the file cannot be written.
void save_step_trace(const std::vector<torch::Device>& devices, const std::function<void()>& step,
                     const std::string& path);

}  // namespace parbench
