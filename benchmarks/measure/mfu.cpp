#include "benchmarks/measure/mfu.h"

#ifdef PARBENCH_WITH_CUDA
#include <ATen/cuda/CUDAContext.h>
#endif

#include <algorithm>
#include <chrono>
#include <mutex>
#include <stdexcept>
#include <vector>

namespace parbench {
namespace {

// Dense tensor-core peaks (sparsity halved away) and CUDA-core fp32, in TFLOP/s.
struct KnownGpu {
  std::vector<std::string> name_has;  // every part is in CUDA's name of the GPU
  double bf16, tf32, fp32;
  std::string source;
};

// Most specific first: "H100" alone is the SXM part.
const std::vector<KnownGpu>& known_gpus() {
  static const std::vector<KnownGpu> table = {
      {{"H100", "PCIe"}, 756.0, 378.0, 51.0, "NVIDIA H100 Tensor Core GPU datasheet (PCIe)"},
      {{"H100", "NVL"}, 835.0, 417.5, 60.0, "NVIDIA H100 Tensor Core GPU datasheet (NVL)"},
      {{"H100"}, 989.4, 494.7, 66.9, "NVIDIA H100 Tensor Core GPU datasheet (SXM)"},
      {{"H200", "NVL"}, 835.0, 417.5, 60.0, "NVIDIA H200 Tensor Core GPU datasheet (NVL)"},
      {{"H200"}, 989.4, 494.7, 66.9, "NVIDIA H200 Tensor Core GPU datasheet (SXM)"},
      {{"A100"}, 312.0, 156.0, 19.5, "NVIDIA A100 Tensor Core GPU datasheet"},
  };
  return table;
}

#ifdef PARBENCH_WITH_CUDA
double probe_gemm_flops(torch::Device device, const std::string& math) {
  constexpr int64_t kSide = 8192;
  constexpr int kSamples = 10;
  constexpr double kWarmupSeconds = 0.25;  // an idle GPU's clocks take this long to ramp up
  auto& context = at::globalContext();
  const bool tf32_was = context.allowTF32CuBLAS();
  context.setAllowTF32CuBLAS(math == "tf32");
  const auto dtype = math == "bf16" ? torch::kBFloat16 : torch::kFloat32;
  const auto options = torch::TensorOptions().dtype(dtype).device(device);
  double seconds = 0;
  {
    const auto a = torch::randn({kSide, kSide}, options), b = torch::randn({kSide, kSide}, options);
    auto c = torch::empty({kSide, kSide}, options);
    // A sample is 10 GEMMs at bf16 (~15 ms on an H100), 1 at fp32 (~20 ms).
    const int per_sample = math == "fp32" ? 1 : 10;
    const auto sample = [&] {
      torch::cuda::synchronize(device.index());
      const auto began = std::chrono::steady_clock::now();
      for (int i = 0; i < per_sample; ++i) torch::mm_out(c, a, b);
      torch::cuda::synchronize(device.index());
      return std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count() / per_sample;
    };
    for (double warm = 0; warm < kWarmupSeconds;) warm += sample() * per_sample;
    // The peak: the fastest sample.
    seconds = sample();
    for (int i = 1; i < kSamples; ++i) seconds = std::min(seconds, sample());
  }
  context.setAllowTF32CuBLAS(tf32_was);
  return 2.0 * kSide * kSide * kSide / seconds;
}
#endif

}  // namespace

std::string peak_math(Precision precision, Fp32Engine fp32_engine) {
  if (precision == Precision::kBFloat16) return "bf16";
  const auto& context = at::globalContext();
  const bool tf32 = fp32_engine == Fp32Engine::kCublasMatmul ? context.allowTF32CuBLAS() : context.allowTF32CuDNN();
  return tf32 ? "tf32" : "fp32";
}

std::optional<DatasheetPeak> datasheet_peak(const std::string& gpu_name, const std::string& math) {
  for (const auto& gpu : known_gpus()) {
    bool matches = true;
    for (const auto& part : gpu.name_has) matches = matches && gpu_name.find(part) != std::string::npos;
    if (!matches) continue;
    const double tflops = math == "bf16" ? gpu.bf16 : math == "tf32" ? gpu.tf32 : gpu.fp32;
    return DatasheetPeak{tflops * 1e12, gpu.source + ", dense " + math};
  }
  return std::nullopt;
}

ComputePeaks measure_compute_peaks(torch::Device device, const std::string& math) {
#ifdef PARBENCH_WITH_CUDA
  static std::mutex mutex;
  static std::map<std::pair<int, std::string>, ComputePeaks> measured;
  std::lock_guard<std::mutex> lock(mutex);
  const auto key = std::make_pair(static_cast<int>(device.index()), math);
  if (auto found = measured.find(key); found != measured.end()) return found->second;
  ComputePeaks peaks;
  peaks.math = math;
  peaks.gpu_name = at::cuda::getDeviceProperties(device.index())->name;
  peaks.datasheet = datasheet_peak(peaks.gpu_name, math);
  peaks.gemm_flops = probe_gemm_flops(device, math);
  measured[key] = peaks;
  return peaks;
#else
  (void)device, (void)math;
  throw std::logic_error("compute peaks are measured on GPUs, and this parbench was built without CUDA");
#endif
}

void add_mfu(const ComputePeaks& peaks, double achieved_flops, int gpus, benchmark::UserCounters& counters,
             std::map<std::string, std::string>& facts) {
  facts["peak_math"] = peaks.math;
  counters["gemm_tflops"] = peaks.gemm_flops / 1e12;
  counters["mfu_gemm"] = achieved_flops / (peaks.gemm_flops * gpus);
  if (!peaks.datasheet) {
    facts["peak_source"] = "none: " + peaks.gpu_name + " is not in the datasheet table (benchmarks/measure/mfu.cpp)";
    return;
  }
  facts["peak_source"] = peaks.datasheet->source;
  counters["peak_tflops"] = peaks.datasheet->flops / 1e12;
  counters["mfu"] = achieved_flops / (peaks.datasheet->flops * gpus);
}

}  // namespace parbench
