// What a case reports to Google Benchmark beside its time: the counters its measurements become
// (docs/METRICS.md) and its label (docs/JSON.md), for a case run in this process and for a
// distributed case's ranks alike.
#pragma once

#include "benchmarks/cases/cases.h"
#include "benchmarks/measure/mfu.h"
#include "benchmarks/measure/nvml.h"

#include <benchmark/benchmark.h>

#include <map>
#include <optional>
#include <string>
#include <vector>

namespace parbench {

// Per device (or ddp rank): peak memory, and where --busy-profile measured it, the busy and
// bubble fractions of a step of step_seconds (docs/METRICS.md).
benchmark::UserCounters device_counters(const std::vector<double>& peak_bytes, const std::vector<double>& busy_seconds,
                                        double step_seconds);
void set_device_counters(benchmark::State& state, const std::vector<double>& peak_bytes,
                         const std::vector<double>& busy_seconds, double step_seconds);

// The GPU (CUDA index) of each device, -1 for a CPU device: what ClockSampler samples.
std::vector<int> clock_device_indices(const std::vector<torch::Device>& devices);

// Each device's repetition from its samples before and after it (empty where not sampled).
std::vector<std::optional<RepetitionClocks>> repetition_clocks(const std::vector<std::optional<ClockSample>>& before,
                                                               const std::vector<std::optional<ClockSample>>& after);

// Per device (or ddp rank) that NVML sampled around the repetition (benchmarks/measure/nvml.h):
// sm_clock_mhz_dev<i>, sm_clock_max_mhz_dev<i>, power_w_dev<i>, temperature_c_dev<i> and
// throttle_reasons_dev<i>, and `throttled` (1 if any device ran throttled, else 0); nothing
// where no device was sampled (docs/METRICS.md, "Clocks and throttling").
void set_clock_counters(benchmark::State& state, const std::vector<std::optional<RepetitionClocks>>& devices,
                        double throttle_threshold);

// Step time, tokens/s for a language model, TFLOP/s and the case's shape, from `seconds` spent
// on `steps` training steps; `samples`, the items processed (Google Benchmark divides them by
// the time for items_per_second): steps x the global batch.
struct TrainingCounters {
  double samples = 0;
  benchmark::UserCounters counters;
};
TrainingCounters training_counters(const CaseSpec& spec, double seconds, int64_t steps, double params,
                                   double forward_flops_per_sample);
// training_counters, set on `state`.
void set_training_counters(benchmark::State& state, const CaseSpec& spec, double seconds, int64_t steps,
                           double params, double forward_flops_per_sample);

// A stall inside a repetition (docs/METRICS.md): `iteration_max_over_median`, its slowest
// iteration's time over its median iteration's, and `stalled` = 1 where that is at least
// kStallRatio over at least kStallMinIterations iterations (fewer cannot tell a stall from the
// rest); absent otherwise. Per repetition.
inline constexpr double kStallRatio = 3.0;
inline constexpr size_t kStallMinIterations = 3;
benchmark::UserCounters stall_counters(const std::vector<double>& iteration_seconds);

// add_mfu (benchmarks/measure/mfu.h) for a case's achieved FLOP/s over the GPUs it runs on: its
// distinct GPUs (stages placed on one GPU share its peak), as every case's runner hands them.
void add_case_mfu(const ComputePeaks& peaks, double achieved_flops, const CaseSpec& spec,
                  benchmark::UserCounters& counters, std::map<std::string, std::string>& facts);

// "cuda" or "cpu": the label's `devices` fact (docs/JSON.md).
std::string device_kind(torch::Device device);

// A benchmark label: key=value pairs joined by ';' (docs/JSON.md).
std::string format_label(const std::map<std::string, std::string>& facts);

}  // namespace parbench
