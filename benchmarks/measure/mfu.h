// Model FLOPs utilisation (docs/METRICS.md): a case's achieved model FLOP/s over its GPUs' peak
// at the arithmetic its matrix products run in, against two peaks: the datasheet's, from a table
// of known GPUs, and one measured by a short GEMM probe, so that a GPU missing from the table
// still gets a figure.
#pragma once

#include "models/model_zoo.h"
#include "strategies/strategy.h"

#include <benchmark/benchmark.h>

#include <map>
#include <optional>
#include <string>

namespace parbench {

// "bf16" (autocast), "tf32" (fp32 where TF32 is allowed for the library that runs the model's
// main products, as the model declares it: ModelInfo::fp32_engine, cuDNN's convolutions or
// cuBLAS's matmuls) or "fp32".
std::string peak_math(Precision precision, Fp32Engine fp32_engine);

struct DatasheetPeak {
  double flops = 0;  // dense, per GPU
  std::string source;
};

// The dense peak of the GPU named `gpu_name` (as CUDA names it) at `math`; none for a GPU not
// in the table.
std::optional<DatasheetPeak> datasheet_peak(const std::string& gpu_name, const std::string& math);

struct ComputePeaks {
  std::string math;
  std::string gpu_name;
  std::optional<DatasheetPeak> datasheet;
  double gemm_flops = 0;  // measured
};

// Both peaks of `device` (a GPU) at `math`. The probe, square GEMMs of 8192 at that math for
// half a second or so, runs once per device and math in a process.
ComputePeaks measure_compute_peaks(torch::Device device, const std::string& math);

// mfu (against the datasheet, where the GPU is in the table), mfu_gemm, gemm_tflops and
// peak_tflops for `achieved_flops` over `gpus` GPUs; the label's peak_math and peak_source.
void add_mfu(const ComputePeaks& peaks, double achieved_flops, int gpus, benchmark::UserCounters& counters,
             std::map<std::string, std::string>& facts);

}  // namespace parbench
