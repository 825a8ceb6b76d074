#include "benchmarks/context.h"

#include "benchmarks/nvml.h"
#include "core/text.h"
#include "strategies/distributed/world.h"
#include "strategies/pipeline_schedule.h"

#include <benchmark/benchmark.h>
#include <nlohmann/json.hpp>
#include <torch/version.h>

#ifdef PARBENCH_WITH_CUDA
#include <ATen/cuda/CUDAContext.h>
#include <ATen/detail/CUDAHooksInterface.h>
#include <torch/csrc/distributed/c10d/NCCLUtils.hpp>
#endif

#include <array>
#include <cstdlib>
#include <cstdio>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>

extern char** environ;

namespace parbench {
namespace {

std::string command_output(const std::string& command) {
  std::array<char, 256> buffer{};
  std::string output;
  std::unique_ptr<FILE, int (*)(FILE*)> pipe(popen(command.c_str(), "r"), pclose);
  if (!pipe) return "";
  while (fgets(buffer.data(), buffer.size(), pipe.get())) output += buffer.data();
  while (!output.empty() && (output.back() == '\n' || output.back() == ' ')) output.pop_back();
  return output;
}

// The host CPU's model name (/proc/cpuinfo), or "unknown": CPU timings compare only on the same CPU.
std::string cpu_model() {
  std::ifstream cpuinfo("/proc/cpuinfo");
  std::string line;
  while (std::getline(cpuinfo, line)) {
    if (line.rfind("model name", 0) != 0) continue;
    const auto colon = line.find(':');
    if (colon == std::string::npos) break;
    const auto start = line.find_first_not_of(' ', colon + 1);
    return start == std::string::npos ? "unknown" : line.substr(start);
  }
  return "unknown";
}

std::string bool_text(bool value) { return value ? "true" : "false"; }

std::string dotted_version(long version, long major_divisor, long minor_divisor) {
  return std::to_string(version / major_divisor) + "." + std::to_string(version % major_divisor / minor_divisor);
}

// The NCCL_*, CUDA_*, TORCH_* and NVSHMEM_* variables in this process's environment, as a JSON object.
std::string library_environment() {
  nlohmann::json variables = nlohmann::json::object();
  for (char** entry = environ; *entry != nullptr; ++entry) {
    const std::string text = *entry;
    const auto equals = text.find('=');
    const auto name = text.substr(0, equals);
    for (const char* prefix : {"NCCL_", "CUDA_", "TORCH_", "NVSHMEM_"}) {
      if (name.rfind(prefix, 0) == 0) variables[name] = equals == std::string::npos ? "" : text.substr(equals + 1);
    }
  }
  return variables.dump();
}

struct RankHosts {
  std::mutex mutex;
  std::vector<std::string> hosts;
};

RankHosts& rank_hosts() {
  static RankHosts hosts;
  return hosts;
}

}  // namespace

void note_rank_hosts(const std::vector<std::string>& hosts) {
  auto& noted = rank_hosts();
  std::lock_guard<std::mutex> lock(noted.mutex);
  if (hosts.size() > noted.hosts.size()) noted.hosts = hosts;
}

std::vector<std::pair<std::string, std::string>> late_run_context() {
  auto& noted = rank_hosts();
  std::lock_guard<std::mutex> lock(noted.mutex);
  return {{"rank_hosts", nlohmann::json(noted.hosts).dump()}};
}

std::vector<std::pair<std::string, std::string>> run_context(const Options& options) {
  std::vector<std::pair<std::string, std::string>> context;
  context.emplace_back("parbench_version", PARBENCH_VERSION);
  context.emplace_back("parbench_json_schema", kJsonSchemaVersion);
  // The source: as declared when the build was configured (CMakeLists.txt), else the checkout
  // as it is when the binary runs. Dirty is only known where the checkout can be asked.
  std::string sha = PARBENCH_DECLARED_GIT_SHA;
  std::string dirty = "unknown";
  if (sha.empty()) {
    const std::string git = "git -C '" PARBENCH_SOURCE_DIR "' ";
    sha = command_output(git + "rev-parse --verify -q HEAD 2>/dev/null");
    if (sha.empty()) {
      sha = "unknown";
    } else {
      const auto status = command_output(git + "status --porcelain --untracked-files=no 2>/dev/null || echo unknown");
      if (status != "unknown") dirty = bool_text(!status.empty());
    }
  }
  context.emplace_back("git_sha", sha);
  context.emplace_back("git_dirty", dirty);
  context.emplace_back("argv", options.argv);
  context.emplace_back("preset", options.preset);
  context.emplace_back("timer", options.timer == TimerKind::kEvent ? "event" : "host");
  // The binary's strategies and schedules in listing order, for readers that order them.
  context.emplace_back("strategies",
                       joined(StrategyRegistry::instance().all(), ",", [](const StrategyInfo* info) { return info->name; }));
  context.emplace_back("schedules", joined(schedule_table(), ",", [](const ScheduleInfo& info) { return info.name; }));
  context.emplace_back("libtorch_version", TORCH_VERSION);

  std::string cuda = "none", cudnn = "none", nccl = "none", gpu_names;
  int gpu_count = 0;
  std::vector<PciAddress> cuda_devices;
#ifdef PARBENCH_WITH_CUDA
  cuda = dotted_version(at::detail::getCUDAHooks().versionCUDART(), 1000, 10);
  const long cudnn_version = at::detail::getCUDAHooks().versionCuDNN();
  if (cudnn_version > 0) cudnn = std::to_string(cudnn_version / 10000) + "." + std::to_string(cudnn_version / 100 % 100) + "." + std::to_string(cudnn_version % 100);
  nccl = c10d::getNcclVersion();
  gpu_count = static_cast<int>(torch::cuda::device_count());
  for (int i = 0; i < gpu_count; ++i) {
    const auto* properties = at::cuda::getDeviceProperties(i);
    gpu_names += (i ? ";" : "") + std::string(properties->name);
    cuda_devices.push_back({static_cast<unsigned>(properties->pciDomainID), static_cast<unsigned>(properties->pciBusID),
                            static_cast<unsigned>(properties->pciDeviceID)});
  }
#endif
  const auto nvml = read_nvml(cuda_devices);
  context.emplace_back("cuda_version", cuda);
  context.emplace_back("cudnn_version", cudnn);
  context.emplace_back("nccl_version", nccl);
  context.emplace_back("nvml", nvml.status);
  context.emplace_back("driver_version", nvml.driver_version);
  context.emplace_back("gpu_settings", nvml.gpus.dump());
  context.emplace_back("gpu_count", std::to_string(gpu_count));
  context.emplace_back("gpu_names", gpu_names.empty() ? "none" : gpu_names);
  // Without GPUs every case runs on CPU devices, multi-device ones on CPU stand-ins (docs/JSON.md).
  context.emplace_back("devices", gpu_count > 0 ? "cuda" : "cpu");
  context.emplace_back("tf32_cudnn", bool_text(at::globalContext().allowTF32CuDNN()));
  context.emplace_back("tf32_matmul", bool_text(at::globalContext().allowTF32CuBLAS()));
  context.emplace_back("host", this_host());
  context.emplace_back("cpu_model", cpu_model());
  context.emplace_back("environment", library_environment());
  context.emplace_back("environment_set_by_parbench", nlohmann::json(set_parbench_environment()).dump());
  // Per-repetition clocks (docs/METRICS.md, "Clocks and throttling"): sampled where there is a
  // GPU and NVML answers; the test hook stands a CPU device in for the fake library's GPU.
  const auto& sampler = ClockSampler::instance();
  const bool hooked = std::getenv("PARBENCH_TEST_NVML_DEVICE") != nullptr;
  context.emplace_back("clock_sampling", sampler.status() != "ok" ? sampler.status()
                                         : gpu_count == 0 && !hooked ? "unavailable: no GPU visible"
                                                                     : "ok");
  context.emplace_back("throttle_threshold", format_number(options.throttle_threshold));
  if (options.max_noise > 0) {
    context.emplace_back("max_noise", format_number(options.max_noise));
    context.emplace_back("min_repetitions", std::to_string(options.min_repetitions));
    context.emplace_back("max_repetitions", std::to_string(options.max_repetitions));
  }
  return context;
}

void add_run_context(const Options& options) {
  for (const auto& [key, value] : run_context(options)) benchmark::AddCustomContext(key, value);
}

}  // namespace parbench
