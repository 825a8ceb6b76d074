// A stand-in for libnvidia-ml.so.1 with one GPU of fixed settings, for the provenance tests on
// machines without NVIDIA's driver (tests/provenance_test.cpp puts its directory first on
// LD_LIBRARY_PATH). FAKE_NVML_INIT_FAILS=1 makes nvmlInit_v2 fail as it does without a driver.
// For the per-repetition clocks (tests/clocks_test.cpp): FAKE_NVML_SM_CLOCK_MHZ sets the SM clock
// (default 1755 of a maximum of 1980), FAKE_NVML_CLOCK_EVENT_REASONS the clock-event reasons
// (a number, 0x20 for SW thermal slowdown; default 0), and FAKE_NVML_OLD_DRIVER=1 answers
// nvmlDeviceGetCurrentClocksEventReasons as a driver older than 535 does (not found), leaving the
// deprecated nvmlDeviceGetCurrentClocksThrottleReasons. FAKE_NVML_CALL_LOG: see below.
#include <cstdio>
#include <cstdlib>
#include <cstring>

extern "C" {

using nvmlReturn_t = int;
using nvmlDevice_t = void*;
constexpr nvmlReturn_t kSuccess = 0;
constexpr nvmlReturn_t kInvalidArgument = 2;
constexpr nvmlReturn_t kNotSupported = 3;
constexpr nvmlReturn_t kDriverNotLoaded = 9;
constexpr nvmlReturn_t kFunctionNotFound = 13;
static int fake_device;

static unsigned long long environment_number(const char* name, unsigned long long fallback) {
  const char* text = std::getenv(name);
  return text != nullptr && *text != '\0' ? std::strtoull(text, nullptr, 0) : fallback;
}

struct nvmlPciInfo_t {
  char busIdLegacy[16];
  unsigned domain, bus, device, pciDeviceId, pciSubSystemId;
  char busId[32];
};

nvmlReturn_t nvmlInit_v2() {
  const char* fails = std::getenv("FAKE_NVML_INIT_FAILS");
  return fails != nullptr && std::strcmp(fails, "1") == 0 ? kDriverNotLoaded : kSuccess;
}
nvmlReturn_t nvmlShutdown() { return kSuccess; }
nvmlReturn_t nvmlSystemGetDriverVersion(char* version, unsigned length) {
  std::strncpy(version, "555.42.06-fake", length);
  return kSuccess;
}
nvmlReturn_t nvmlDeviceGetCount_v2(unsigned* count) {
  *count = 1;
  return kSuccess;
}
nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned index, nvmlDevice_t* device) {
  if (index != 0) return kInvalidArgument;
  *device = &fake_device;
  return kSuccess;
}
nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t, char* name, unsigned length) {
  std::strncpy(name, "Fake GPU", length);
  return kSuccess;
}
nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t, nvmlPciInfo_t* pci) {
  *pci = {};
  pci->domain = 0;
  pci->bus = 0x17;
  pci->device = 0;
  std::strcpy(pci->busId, "00000000:17:00.0");
  return kSuccess;
}
// Clock types: 1 SM, 2 memory.
nvmlReturn_t nvmlDeviceGetClockInfo(nvmlDevice_t, int type, unsigned* mhz) {
  *mhz = type == 1 ? static_cast<unsigned>(environment_number("FAKE_NVML_SM_CLOCK_MHZ", 1755)) : 2619;
  return kSuccess;
}
nvmlReturn_t nvmlDeviceGetMaxClockInfo(nvmlDevice_t, int type, unsigned* mhz) {
  *mhz = type == 1 ? 1980 : 2619;
  return kSuccess;
}
nvmlReturn_t nvmlDeviceGetApplicationsClock(nvmlDevice_t, int, unsigned*) { return kNotSupported; }
nvmlReturn_t nvmlDeviceGetEnforcedPowerLimit(nvmlDevice_t, unsigned* milliwatts) {
  *milliwatts = 700000;
  return kSuccess;
}
nvmlReturn_t nvmlDeviceGetPowerManagementDefaultLimit(nvmlDevice_t, unsigned* milliwatts) {
  *milliwatts = 700000;
  return kSuccess;
}
nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t, unsigned* milliwatts) {
  *milliwatts = 312500;
  return kSuccess;
}
// Sensor 0: the GPU's core.
nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t, int sensor, unsigned* celsius) {
  if (sensor != 0) return kInvalidArgument;
  *celsius = 64;
  return kSuccess;
}
nvmlReturn_t nvmlDeviceGetCurrentClocksThrottleReasons(nvmlDevice_t, unsigned long long* reasons) {
  // FAKE_NVML_CALL_LOG=FILE: a line per reading of the reasons (one per sample), so that a test can
  // count the samples a run took.
  if (const char* log = std::getenv("FAKE_NVML_CALL_LOG"); log != nullptr && *log != '\0') {
    if (FILE* file = std::fopen(log, "a")) {
      std::fputs("reasons\n", file);
      std::fclose(file);
    }
  }
  *reasons = environment_number("FAKE_NVML_CLOCK_EVENT_REASONS", 0);
  return kSuccess;
}
nvmlReturn_t nvmlDeviceGetCurrentClocksEventReasons(nvmlDevice_t device, unsigned long long* reasons) {
  if (environment_number("FAKE_NVML_OLD_DRIVER", 0) == 1) return kFunctionNotFound;
  return nvmlDeviceGetCurrentClocksThrottleReasons(device, reasons);
}
nvmlReturn_t nvmlDeviceGetPersistenceMode(nvmlDevice_t, int* mode) {
  *mode = 1;
  return kSuccess;
}
}
