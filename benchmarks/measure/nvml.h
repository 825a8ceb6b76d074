// The GPU driver and each GPU's clocks and power limits, read through NVML
// (libnvidia-ml.so.1, loaded at run time: parbench neither links nor needs it).
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace parbench {

// A visible CUDA device's PCI address, to match it with NVML's devices (which NVML numbers in
// its own order, ignoring CUDA_VISIBLE_DEVICES).
struct PciAddress {
  unsigned domain = 0, bus = 0, device = 0;
};

struct NvmlReport {
  std::string status;          // "ok", or "unavailable: <why>"
  std::string driver_version;  // "unknown" unless status is ok
  // One object per GPU NVML sees (docs/JSON.md, gpu_settings); values it cannot read are null.
  nlohmann::json gpus = nlohmann::json::array();
};

// Loads NVML (dlopen, found as the dynamic linker finds libraries: LD_LIBRARY_PATH first),
// reads it and shuts it down. `cuda_devices`: the visible CUDA devices, by CUDA index.
NvmlReport read_nvml(const std::vector<PciAddress>& cuda_devices);

// NVML's clock-event (formerly "clocks throttle") reasons, nvmlClocksEventReason* in nvml.h.
inline constexpr uint64_t kClockEventGpuIdle = 0x1;
inline constexpr uint64_t kClockEventApplicationsClocksSetting = 0x2;
inline constexpr uint64_t kClockEventSwPowerCap = 0x4;
inline constexpr uint64_t kClockEventHwSlowdown = 0x8;
inline constexpr uint64_t kClockEventSyncBoost = 0x10;
inline constexpr uint64_t kClockEventSwThermalSlowdown = 0x20;
inline constexpr uint64_t kClockEventHwThermalSlowdown = 0x40;
inline constexpr uint64_t kClockEventHwPowerBrakeSlowdown = 0x80;
inline constexpr uint64_t kClockEventDisplayClockSetting = 0x100;
// The reasons that are not throttling: an idle GPU, and clocks the user set (nvidia-smi -ac).
// Every other reason (power cap, thermal, hardware slowdown, power brake, sync boost, display
// clock) lowers the clocks below what the GPU could run at, and counts (docs/METRICS.md).
inline constexpr uint64_t kClockEventsNotThrottling = kClockEventGpuIdle | kClockEventApplicationsClocksSetting;

// One GPU at one moment, as NVML gives it; a value it cannot read is empty.
struct ClockSample {
  std::optional<double> sm_clock_mhz;
  std::optional<double> sm_clock_max_mhz;
  std::optional<double> power_w;
  std::optional<double> temperature_c;
  std::optional<uint64_t> reasons;  // clock-event reasons, kClockEvent* bits
};

// One GPU over one repetition, from a sample just before its first timed step and one just after
// its last (docs/METRICS.md, "Clocks and throttling"): the clock, power and temperature after it;
// the reasons of either sample.
struct RepetitionClocks {
  std::optional<double> sm_clock_mhz, sm_clock_max_mhz, power_w, temperature_c;
  std::optional<uint64_t> reasons;
  bool idle_after = false;  // NVML called the GPU idle after the repetition: its clock says nothing

  static RepetitionClocks from(const ClockSample& before, const ClockSample& after);
  nlohmann::json to_json() const;
  static RepetitionClocks from_json(const nlohmann::json& json);
};

// Whether a repetition ran throttled on this GPU: a reason other than kClockEventsNotThrottling,
// or an SM clock below `threshold` (--throttle-threshold) x its maximum (unless the GPU was idle).
bool throttled(const RepetitionClocks& clocks, double threshold);

// Names the reasons set in `reasons`, e.g. "sw_power_cap,sw_thermal_slowdown"; "none" for 0.
std::string clock_event_names(uint64_t reasons);

// Samples the GPUs of a case through NVML, kept loaded from the first use to the process's end.
// Outside every timed step: a sample costs NVML calls of tens of microseconds per GPU.
class ClockSampler {
 public:
  // The process's sampler; NVML is loaded and initialised on the first call.
  static ClockSampler& instance();
  ~ClockSampler();
  ClockSampler(const ClockSampler&) = delete;
  ClockSampler& operator=(const ClockSampler&) = delete;

  // "ok", or "unavailable: <why>" (NVML missing or failing).
  const std::string& status() const { return status_; }
  // A sample of the GPU of each device given by its CUDA index (-1: a CPU device, which has
  // none, unless the test hook PARBENCH_TEST_NVML_DEVICE=<nvml index> names a GPU for it). Empty
  // where NVML is unavailable or knows no such GPU.
  std::vector<std::optional<ClockSample>> sample(const std::vector<int>& cuda_indices);

 private:
  ClockSampler();
  struct Library;
  std::unique_ptr<Library> library_;
  std::string status_;
  std::vector<void*> by_cuda_index_;  // NVML's handle of each visible CUDA device, or null
  void* test_device_ = nullptr;       // PARBENCH_TEST_NVML_DEVICE's handle
};

}  // namespace parbench
