#include "benchmarks/output/counters.h"

#include "core/statistics.h"
#include "models/model_zoo.h"

#include <algorithm>

namespace parbench {

std::string device_kind(torch::Device device) { return c10::DeviceTypeName(device.type(), /*lower_case=*/true); }

std::string format_label(const std::map<std::string, std::string>& facts) {
  std::string label;
  for (const auto& [key, value] : facts) label += (label.empty() ? "" : ";") + key + "=" + value;
  return label;
}

benchmark::UserCounters device_counters(const std::vector<double>& peak_bytes, const std::vector<double>& busy_seconds,
                                        double step_seconds) {
  constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
  benchmark::UserCounters counters;
  for (size_t i = 0; i < peak_bytes.size(); ++i) counters["peak_mem_gib_dev" + std::to_string(i)] = peak_bytes[i] / kGiB;
  for (size_t i = 0; i < busy_seconds.size(); ++i) {
    const double busy = std::min(1.0, busy_seconds[i] / step_seconds);
    counters["busy_frac_dev" + std::to_string(i)] = busy;
    counters["bubble_frac_dev" + std::to_string(i)] = 1.0 - busy;
  }
  return counters;
}

void set_device_counters(benchmark::State& state, const std::vector<double>& peak_bytes,
                         const std::vector<double>& busy_seconds, double step_seconds) {
  for (const auto& [name, value] : device_counters(peak_bytes, busy_seconds, step_seconds)) state.counters[name] = value;
}

std::vector<int> clock_device_indices(const std::vector<torch::Device>& devices) {
  std::vector<int> indices;
  for (const auto& device : devices) indices.push_back(device.is_cuda() ? device.index() : -1);
  return indices;
}

std::vector<std::optional<RepetitionClocks>> repetition_clocks(const std::vector<std::optional<ClockSample>>& before,
                                                               const std::vector<std::optional<ClockSample>>& after) {
  std::vector<std::optional<RepetitionClocks>> clocks(after.size());
  for (size_t i = 0; i < after.size(); ++i) {
    if (after[i]) clocks[i] = RepetitionClocks::from(i < before.size() && before[i] ? *before[i] : ClockSample{}, *after[i]);
  }
  return clocks;
}

void set_clock_counters(benchmark::State& state, const std::vector<std::optional<RepetitionClocks>>& devices,
                        double throttle_threshold) {
  bool sampled = false, any_throttled = false;
  for (size_t i = 0; i < devices.size(); ++i) {
    if (!devices[i]) continue;
    sampled = true;
    const auto& clocks = *devices[i];
    const auto suffix = "_dev" + std::to_string(i);
    if (clocks.sm_clock_mhz) state.counters["sm_clock_mhz" + suffix] = *clocks.sm_clock_mhz;
    if (clocks.sm_clock_max_mhz) state.counters["sm_clock_max_mhz" + suffix] = *clocks.sm_clock_max_mhz;
    if (clocks.power_w) state.counters["power_w" + suffix] = *clocks.power_w;
    if (clocks.temperature_c) state.counters["temperature_c" + suffix] = *clocks.temperature_c;
    if (clocks.reasons) state.counters["throttle_reasons" + suffix] = static_cast<double>(*clocks.reasons);
    any_throttled = any_throttled || throttled(clocks, throttle_threshold);
  }
  if (sampled) state.counters["throttled"] = any_throttled ? 1 : 0;
}

TrainingCounters training_counters(const CaseSpec& spec, double seconds, int64_t steps, double params,
                                   double forward_flops_per_sample) {
  TrainingCounters result;
  auto& counters = result.counters;
  const double samples = static_cast<double>(steps) * spec.global_batch;
  result.samples = samples;
  counters["step_ms"] = seconds / steps * 1e3;
  // Training is counted as 3 forwards (docs/METRICS.md).
  counters["tflops"] = 3.0 * forward_flops_per_sample * samples / seconds / 1e12;
  counters["params"] = params;
  counters["batch"] = static_cast<double>(spec.global_batch);
  if (is_language_model(spec.config.model)) {
    counters["seq"] = static_cast<double>(spec.config.seq_len);
    counters["tokens_per_second"] = samples * static_cast<double>(spec.config.seq_len) / seconds;
  } else {
    counters["image"] = static_cast<double>(spec.config.image_size);
  }
  counters["gpus"] = spec.gpus;
  for (const auto& option : spec.strategy->options()) {
    const auto value = spec.config.options.find(option.field());
    if (!option.counter().empty() && value != spec.config.options.end()) counters[option.counter()] = std::stod(value->second);
  }
  if (spec.predicted_step_ms) counters["predicted_step_ms"] = *spec.predicted_step_ms;
  // A case with its memory predicted alone (checkpointed) is ranked too.
  if (spec.predicted_step_ms || !spec.predicted_peak_bytes.empty()) counters["predicted_rank"] = spec.predicted_rank;
  for (size_t i = 0; i < spec.predicted_peak_bytes.size(); ++i) {
    counters["predicted_peak_gib_dev" + std::to_string(i)] = spec.predicted_peak_bytes[i] / (1024.0 * 1024.0 * 1024.0);
  }
  if (spec.fit) {
    counters["fit_batch"] = static_cast<double>(spec.fit->largest_batch);
    if (spec.fit->oom_batch) counters["fit_oom_batch"] = static_cast<double>(*spec.fit->oom_batch);
    counters["fit_step"] = static_cast<double>(spec.fit->step);
    counters["fit_probes"] = spec.fit->probes;
  }
  return result;
}

void set_training_counters(benchmark::State& state, const CaseSpec& spec, double seconds, int64_t steps,
                           double params, double forward_flops_per_sample) {
  const auto training = training_counters(spec, seconds, steps, params, forward_flops_per_sample);
  state.SetItemsProcessed(static_cast<int64_t>(training.samples));
  for (const auto& [name, value] : training.counters) state.counters[name] = value;
}

benchmark::UserCounters stall_counters(const std::vector<double>& iteration_seconds) {
  benchmark::UserCounters counters;
  if (iteration_seconds.empty()) return counters;
  const double middle = median(iteration_seconds);
  const double slowest = *std::max_element(iteration_seconds.begin(), iteration_seconds.end());
  const double ratio = middle > 0 ? slowest / middle : 1.0;
  counters["iteration_max_over_median"] = ratio;
  // Only where set: a counter that is 0 in every repetition has a mean of 0, and Google Benchmark
  // writes its coefficient of variation, 0/0, as NaN, which is not JSON.
  if (iteration_seconds.size() >= kStallMinIterations && ratio >= kStallRatio) counters["stalled"] = 1.0;
  return counters;
}

void add_case_mfu(const ComputePeaks& peaks, double achieved_flops, const CaseSpec& spec,
                  benchmark::UserCounters& counters, std::map<std::string, std::string>& facts) {
  const int gpus = distinct_gpus(spec);
  add_mfu(peaks, achieved_flops, gpus, counters, facts);
  if (counters.count("tokens_per_second") != 0) {
    add_torchtitan_mfu(peaks.gpu_name, peaks.math, spec.config.model, spec.config.seq_len,
                       counters["tokens_per_second"], gpus, counters);
  }
}

}  // namespace parbench
