#include "benchmarks/measure/nvml.h"
#include "benchmarks/config/test_hooks.h"

#ifdef PARBENCH_WITH_CUDA
#include <ATen/cuda/CUDAContext.h>
#include <torch/cuda.h>
#endif

#include <dlfcn.h>

#include <cstdlib>
#include <memory>

namespace parbench {
namespace {

// NVML's C API, as declared in nvml.h (its types are plain ints and an opaque handle).
using NvmlReturn = int;
using NvmlDevice = struct NvmlDeviceOpaque*;
constexpr NvmlReturn kNvmlSuccess = 0;
constexpr int kNvmlClockSm = 1;
constexpr int kNvmlClockMemory = 2;
constexpr int kNvmlTemperatureGpu = 0;
struct NvmlPciInfo {  // nvmlPciInfo_t, as nvmlDeviceGetPciInfo_v3 fills it
  char bus_id_legacy[16];
  unsigned domain, bus, device, pci_device_id, pci_subsystem_id;
  char bus_id[32];
};

using LibraryHandle = std::unique_ptr<void, int (*)(void*)>;

template <typename Function>
Function* symbol(void* library, const char* name) {
  return reinterpret_cast<Function*>(dlsym(library, name));
}

class Nvml {
 public:
  explicit Nvml(void* library) : library_(library) {}

  // The named function called with `arguments`; false where it is missing or fails.
  template <typename... Arguments>
  bool call(const char* name, Arguments... arguments) const {
    auto* function = symbol<NvmlReturn(Arguments...)>(library_, name);
    return function != nullptr && function(arguments...) == kNvmlSuccess;
  }

  // An unsigned value read by `name(device, [type,] &value)`, scaled; null where unreadable.
  nlohmann::json value(const char* name, NvmlDevice device, double scale = 1) const {
    unsigned value = 0;
    return call(name, device, &value) ? nlohmann::json(value * scale) : nlohmann::json();
  }
  nlohmann::json clock(const char* name, NvmlDevice device, int type) const {
    unsigned value = 0;
    return call(name, device, type, &value) ? nlohmann::json(value) : nlohmann::json();
  }

 private:
  void* library_;
};

// The PCI address of each visible CUDA device, by CUDA index.
std::vector<PciAddress> visible_cuda_pci_addresses() {
  std::vector<PciAddress> addresses;
#ifdef PARBENCH_WITH_CUDA
  if (!torch::cuda::is_available()) return addresses;
  const auto count = static_cast<int>(torch::cuda::device_count());
  for (int i = 0; i < count; ++i) {
    const auto* properties = at::cuda::getDeviceProperties(i);
    addresses.push_back({static_cast<unsigned>(properties->pciDomainID), static_cast<unsigned>(properties->pciBusID),
                         static_cast<unsigned>(properties->pciDeviceID)});
  }
#endif
  return addresses;
}

// Loads NVML into `library` and initialises it: "ok", or "unavailable: <why>".
std::string open_nvml(LibraryHandle& library) {
  constexpr const char* kLibrary = "libnvidia-ml.so.1";
  library.reset(dlopen(kLibrary, RTLD_NOW | RTLD_LOCAL));
  if (!library) {
    const char* why = dlerror();
    return std::string("unavailable: ") + (why != nullptr ? why : kLibrary);
  }
  if (!Nvml(library.get()).call("nvmlInit_v2")) return "unavailable: nvmlInit_v2 failed (no driver loaded?)";
  return "ok";
}

// The visible CUDA device at NVML's PCI address, if any: NVML numbers its GPUs in its own order,
// whatever CUDA_VISIBLE_DEVICES says.
std::optional<size_t> cuda_index_of(const NvmlPciInfo& pci, const std::vector<PciAddress>& cuda_devices) {
  for (size_t cuda = 0; cuda < cuda_devices.size(); ++cuda) {
    const auto& address = cuda_devices[cuda];
    if (address.domain == pci.domain && address.bus == pci.bus && address.device == pci.device) return cuda;
  }
  return std::nullopt;
}

}  // namespace

NvmlReport read_nvml(const std::vector<PciAddress>& cuda_devices) {
  NvmlReport report;
  report.driver_version = "unknown";
  LibraryHandle library(nullptr, dlclose);
  report.status = open_nvml(library);
  if (report.status != "ok") return report;
  const Nvml nvml(library.get());
  char version[96] = {};
  if (nvml.call("nvmlSystemGetDriverVersion", static_cast<char*>(version), static_cast<unsigned>(sizeof version))) {
    report.driver_version = version;
  }
  unsigned count = 0;
  if (!nvml.call("nvmlDeviceGetCount_v2", &count)) count = 0;
  for (unsigned index = 0; index < count; ++index) {
    NvmlDevice device = nullptr;
    if (!nvml.call("nvmlDeviceGetHandleByIndex_v2", index, &device)) continue;
    nlohmann::json gpu = {{"nvml_index", index}};
    char name[96] = {};
    gpu["name"] = nvml.call("nvmlDeviceGetName", device, static_cast<char*>(name), static_cast<unsigned>(sizeof name))
                      ? nlohmann::json(name)
                      : nlohmann::json();
    NvmlPciInfo pci{};
    gpu["pci_bus_id"] = nullptr;
    gpu["cuda_index"] = nullptr;
    if (nvml.call("nvmlDeviceGetPciInfo_v3", device, &pci)) {
      gpu["pci_bus_id"] = pci.bus_id;
      if (const auto cuda = cuda_index_of(pci, cuda_devices)) gpu["cuda_index"] = *cuda;
    }
    gpu["sm_clock_mhz"] = nvml.clock("nvmlDeviceGetClockInfo", device, kNvmlClockSm);
    gpu["sm_clock_max_mhz"] = nvml.clock("nvmlDeviceGetMaxClockInfo", device, kNvmlClockSm);
    gpu["applications_sm_clock_mhz"] = nvml.clock("nvmlDeviceGetApplicationsClock", device, kNvmlClockSm);
    gpu["memory_clock_mhz"] = nvml.clock("nvmlDeviceGetClockInfo", device, kNvmlClockMemory);
    gpu["memory_clock_max_mhz"] = nvml.clock("nvmlDeviceGetMaxClockInfo", device, kNvmlClockMemory);
    gpu["power_limit_w"] = nvml.value("nvmlDeviceGetEnforcedPowerLimit", device, 1e-3);
    gpu["default_power_limit_w"] = nvml.value("nvmlDeviceGetPowerManagementDefaultLimit", device, 1e-3);
    int persistence = 0;
    gpu["persistence_mode"] =
        nvml.call("nvmlDeviceGetPersistenceMode", device, &persistence) ? nlohmann::json(persistence == 1) : nlohmann::json();
    report.gpus.push_back(std::move(gpu));
  }
  nvml.call("nvmlShutdown");
  return report;
}

RepetitionClocks RepetitionClocks::from(const ClockSample& before, const ClockSample& after) {
  RepetitionClocks clocks;
  clocks.sm_clock_mhz = after.sm_clock_mhz;
  clocks.sm_clock_max_mhz = after.sm_clock_max_mhz ? after.sm_clock_max_mhz : before.sm_clock_max_mhz;
  clocks.power_w = after.power_w;
  clocks.temperature_c = after.temperature_c;
  if (before.reasons || after.reasons) clocks.reasons = before.reasons.value_or(0) | after.reasons.value_or(0);
  clocks.idle_after = after.reasons && (*after.reasons & kClockEventGpuIdle) != 0;
  return clocks;
}

nlohmann::json RepetitionClocks::to_json() const {
  const auto value = [](const auto& optional) { return optional ? nlohmann::json(*optional) : nlohmann::json(); };
  return {{"sm_clock_mhz", value(sm_clock_mhz)},   {"sm_clock_max_mhz", value(sm_clock_max_mhz)},
          {"power_w", value(power_w)},             {"temperature_c", value(temperature_c)},
          {"reasons", value(reasons)},             {"idle_after", idle_after}};
}

RepetitionClocks RepetitionClocks::from_json(const nlohmann::json& json) {
  RepetitionClocks clocks;
  const auto number = [&json](const char* key) {
    const auto& value = json.at(key);
    return value.is_null() ? std::optional<double>() : std::optional<double>(value.get<double>());
  };
  clocks.sm_clock_mhz = number("sm_clock_mhz");
  clocks.sm_clock_max_mhz = number("sm_clock_max_mhz");
  clocks.power_w = number("power_w");
  clocks.temperature_c = number("temperature_c");
  if (!json.at("reasons").is_null()) clocks.reasons = json.at("reasons").get<uint64_t>();
  clocks.idle_after = json.at("idle_after").get<bool>();
  return clocks;
}

bool throttled(const RepetitionClocks& clocks, double threshold) {
  if (clocks.reasons && (*clocks.reasons & ~kClockEventsNotThrottling) != 0) return true;
  return !clocks.idle_after && clocks.sm_clock_mhz && clocks.sm_clock_max_mhz && *clocks.sm_clock_max_mhz > 0 &&
         *clocks.sm_clock_mhz < threshold * *clocks.sm_clock_max_mhz;
}

std::string clock_event_names(uint64_t reasons) {
  static const std::vector<std::pair<uint64_t, const char*>> kNames = {
      {kClockEventGpuIdle, "gpu_idle"},
      {kClockEventApplicationsClocksSetting, "applications_clocks_setting"},
      {kClockEventSwPowerCap, "sw_power_cap"},
      {kClockEventHwSlowdown, "hw_slowdown"},
      {kClockEventSyncBoost, "sync_boost"},
      {kClockEventSwThermalSlowdown, "sw_thermal_slowdown"},
      {kClockEventHwThermalSlowdown, "hw_thermal_slowdown"},
      {kClockEventHwPowerBrakeSlowdown, "hw_power_brake_slowdown"},
      {kClockEventDisplayClockSetting, "display_clock_setting"}};
  std::string names;
  uint64_t known = 0;
  for (const auto& [bit, name] : kNames) {
    known |= bit;
    if ((reasons & bit) != 0) names += (names.empty() ? "" : ",") + std::string(name);
  }
  if ((reasons & ~known) != 0) names += (names.empty() ? "" : ",") + std::string("other");
  return names.empty() ? "none" : names;
}

struct ClockSampler::Library {
  LibraryHandle handle{nullptr, dlclose};
  std::unique_ptr<Nvml> nvml;
  bool initialised = false;
  ~Library() {
    if (initialised) nvml->call("nvmlShutdown");
  }
};

ClockSampler& ClockSampler::instance() {
  static ClockSampler sampler;
  return sampler;
}

ClockSampler::~ClockSampler() = default;

ClockSampler::ClockSampler() : library_(std::make_unique<Library>()) {
  status_ = open_nvml(library_->handle);
  if (status_ != "ok") return;
  library_->nvml = std::make_unique<Nvml>(library_->handle.get());
  const auto& nvml = *library_->nvml;
  library_->initialised = true;
  const auto cuda_devices = visible_cuda_pci_addresses();
  by_cuda_index_.assign(cuda_devices.size(), nullptr);
  unsigned count = 0;
  if (!nvml.call("nvmlDeviceGetCount_v2", &count)) count = 0;
  for (unsigned index = 0; index < count; ++index) {
    NvmlDevice device = nullptr;
    NvmlPciInfo pci{};
    if (!nvml.call("nvmlDeviceGetHandleByIndex_v2", index, &device)) continue;
    if (!nvml.call("nvmlDeviceGetPciInfo_v3", device, &pci)) continue;
    if (const auto cuda = cuda_index_of(pci, cuda_devices)) by_cuda_index_[*cuda] = device;
  }
  // A test hook (benchmarks/config/test_hooks.h): CPU devices sample this NVML device, so that the fake
  // library's GPU (tests/fake_nvml.cpp) is sampled by runs without a GPU.
  if (const auto hook = test_hooks::nvml_device()) {
    NvmlDevice device = nullptr;
    if (nvml.call("nvmlDeviceGetHandleByIndex_v2", *hook, &device)) {
      test_device_ = device;
    }
  }
}

std::vector<std::optional<ClockSample>> ClockSampler::sample(const std::vector<int>& cuda_indices) {
  std::vector<std::optional<ClockSample>> samples(cuda_indices.size());
  if (!library_->initialised) return samples;
  const auto& nvml = *library_->nvml;
  const auto unsigned_value = [](const nlohmann::json& value) {
    return value.is_null() ? std::optional<double>() : std::optional<double>(value.get<double>());
  };
  for (size_t i = 0; i < cuda_indices.size(); ++i) {
    const int cuda = cuda_indices[i];
    void* handle = cuda < 0 ? test_device_
                            : (static_cast<size_t>(cuda) < by_cuda_index_.size() ? by_cuda_index_[static_cast<size_t>(cuda)] : nullptr);
    if (handle == nullptr) continue;
    auto* device = static_cast<NvmlDevice>(handle);
    ClockSample sample;
    sample.sm_clock_mhz = unsigned_value(nvml.clock("nvmlDeviceGetClockInfo", device, kNvmlClockSm));
    sample.sm_clock_max_mhz = unsigned_value(nvml.clock("nvmlDeviceGetMaxClockInfo", device, kNvmlClockSm));
    sample.power_w = unsigned_value(nvml.value("nvmlDeviceGetPowerUsage", device, 1e-3));
    sample.temperature_c = unsigned_value(nvml.clock("nvmlDeviceGetTemperature", device, kNvmlTemperatureGpu));
    unsigned long long reasons = 0;
    // Renamed in driver 535 (CUDA 12.2); the old name stays as a deprecated alias.
    if (nvml.call("nvmlDeviceGetCurrentClocksEventReasons", device, &reasons) ||
        nvml.call("nvmlDeviceGetCurrentClocksThrottleReasons", device, &reasons)) {
      sample.reasons = static_cast<uint64_t>(reasons);
    }
    samples[i] = sample;
  }
  return samples;
}

}  // namespace parbench
