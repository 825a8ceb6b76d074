#include "benchmarks/context.h"

#include <benchmark/benchmark.h>
#include <torch/version.h>

#ifdef PARBENCH_WITH_CUDA
#include <ATen/cuda/CUDAContext.h>
#include <ATen/detail/CUDAHooksInterface.h>
#include <torch/csrc/distributed/c10d/NCCLUtils.hpp>
#endif

#include <unistd.h>

#include <array>
#include <cstdio>
#include <fstream>
#include <memory>

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

}  // namespace

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
  context.emplace_back("libtorch_version", TORCH_VERSION);

  std::string cuda = "none", cudnn = "none", nccl = "none", gpu_names;
  int gpu_count = 0;
#ifdef PARBENCH_WITH_CUDA
  cuda = dotted_version(at::detail::getCUDAHooks().versionCUDART(), 1000, 10);
  const long cudnn_version = at::detail::getCUDAHooks().versionCuDNN();
  if (cudnn_version > 0) cudnn = std::to_string(cudnn_version / 10000) + "." + std::to_string(cudnn_version / 100 % 100) + "." + std::to_string(cudnn_version % 100);
  nccl = c10d::getNcclVersion();
  gpu_count = static_cast<int>(torch::cuda::device_count());
  for (int i = 0; i < gpu_count; ++i) gpu_names += (i ? ";" : "") + std::string(at::cuda::getDeviceProperties(i)->name);
#endif
  context.emplace_back("cuda_version", cuda);
  context.emplace_back("cudnn_version", cudnn);
  context.emplace_back("nccl_version", nccl);
  context.emplace_back("gpu_count", std::to_string(gpu_count));
  context.emplace_back("gpu_names", gpu_names.empty() ? "none" : gpu_names);
  // Without GPUs every case runs on CPU devices, multi-device ones on CPU stand-ins (docs/JSON.md).
  context.emplace_back("devices", gpu_count > 0 ? "cuda" : "cpu");
  context.emplace_back("tf32_cudnn", bool_text(at::globalContext().allowTF32CuDNN()));
  context.emplace_back("tf32_matmul", bool_text(at::globalContext().allowTF32CuBLAS()));
  std::array<char, 256> host{};
  gethostname(host.data(), host.size() - 1);
  context.emplace_back("host", host.data());
  context.emplace_back("cpu_model", cpu_model());
  return context;
}

void add_run_context(const Options& options) {
  for (const auto& [key, value] : run_context(options)) benchmark::AddCustomContext(key, value);
}

}  // namespace parbench
