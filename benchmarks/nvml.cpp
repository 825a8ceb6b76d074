#include "benchmarks/nvml.h"

#include <dlfcn.h>

#include <memory>

namespace parbench {
namespace {

// NVML's C API, as declared in nvml.h (its types are plain ints and an opaque handle).
using NvmlReturn = int;
using NvmlDevice = struct NvmlDeviceOpaque*;
constexpr NvmlReturn kNvmlSuccess = 0;
constexpr int kNvmlClockSm = 1;
constexpr int kNvmlClockMemory = 2;
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

}  // namespace

NvmlReport read_nvml(const std::vector<PciAddress>& cuda_devices) {
  NvmlReport report;
  report.driver_version = "unknown";
  constexpr const char* kLibrary = "libnvidia-ml.so.1";
  LibraryHandle library(dlopen(kLibrary, RTLD_NOW | RTLD_LOCAL), dlclose);
  if (!library) {
    const char* why = dlerror();
    report.status = std::string("unavailable: ") + (why != nullptr ? why : kLibrary);
    return report;
  }
  const Nvml nvml(library.get());
  if (!nvml.call("nvmlInit_v2")) {
    report.status = std::string("unavailable: nvmlInit_v2 failed (no driver loaded?)");
    return report;
  }
  report.status = "ok";
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
      for (size_t cuda = 0; cuda < cuda_devices.size(); ++cuda) {
        const auto& address = cuda_devices[cuda];
        if (address.domain == pci.domain && address.bus == pci.bus && address.device == pci.device) {
          gpu["cuda_index"] = cuda;
        }
      }
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

}  // namespace parbench
