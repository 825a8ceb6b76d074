// Splitting a model's stages across devices: the cut shared by model_parallel and pipeline.
#pragma once

#include "strategies/strategy.h"

namespace parbench {

// Consecutive stages that live on one device.
struct Partition {
  torch::Device device;
  std::vector<Stage> stages;
  torch::Tensor forward(torch::Tensor x) const;
  std::vector<torch::Tensor> parameters() const;  // of every module of its stages, in order
};

// Stage names per device, in order.
using Cut = std::vector<std::vector<std::string>>;

// "stem,layer1|layer2,head" for a cut.
std::string format_cut(const Cut& cut);

// Parses a cut spec (see RunConfig::cut) against the model's stage names. Throws
// std::invalid_argument for an unknown or repeated stage, stages out of order or left out,
// an empty device, or more parts than devices.
Cut parse_cut(const std::string& spec, const std::vector<std::string>& stage_names, size_t num_devices);

// The cut minimising the slowest part, from per-stage times (contiguous parts, one per device).
Cut balanced_cut(const std::vector<std::string>& stage_names, const std::vector<double>& stage_seconds,
                 size_t num_devices);

// Chooses the cut (`config.cut`, or the default: the tutorial's split of ResNet over two
// devices where it applies, else "balanced") and moves each part's modules to its device.
// `measure_batch` is the batch size that per-stage timing uses for "balanced".
std::vector<Partition> partition_model(StagedModel& model, const std::vector<torch::Device>& devices,
                                       const RunConfig& config, int64_t measure_batch, Cut* cut_used);

}  // namespace parbench
