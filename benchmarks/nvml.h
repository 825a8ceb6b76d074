// The GPU driver and each GPU's clocks and power limits, read through NVML
// (libnvidia-ml.so.1, loaded at run time: parbench neither links nor needs it).
#pragma once

#include <nlohmann/json.hpp>

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

}  // namespace parbench
