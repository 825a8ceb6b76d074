// Splitting a model's stages across devices: the cut shared by model_parallel and pipeline.
#pragma once

#include "strategies/staged_options.h"
#include "strategies/strategy.h"

namespace parbench {

// Consecutive stages that live on one device.
struct Partition {
  torch::Device device;
  std::vector<Stage> stages;
  torch::Tensor forward(torch::Tensor x) const;
  std::vector<torch::Tensor> parameters() const;  // of every module of its stages, in order
};

// Stage names per part (device, or a device's chunk), in order.
using Cut = std::vector<std::vector<std::string>>;

// "stem,layer1.0|layer1.1,head" for a cut; with the model's groups, a group whose stages all lie
// in one part is written by its name: "stem,layer1|layer2,head".
std::string format_cut(const Cut& cut, const std::vector<StageGroup>& groups = {});

// Parses a cut spec (StagedOptions::cut, strategies/staged_options.h) against the model's stage names, a group's name standing
// for its stages. Throws std::invalid_argument for an unknown or repeated stage or group, stages
// out of order or left out, an empty part, or parts other than num_parts.
Cut parse_cut(const std::string& spec, const std::vector<std::string>& stage_names, size_t num_parts,
              const std::vector<StageGroup>& groups = {});

// The cut into `num_parts` contiguous parts minimising the slowest part, from per-stage times.
Cut balanced_cut(const std::vector<std::string>& stage_names, const std::vector<double>& stage_seconds,
                 size_t num_parts);

// The cut into `num_parts` parts: the config's --cut (staged_options), or the default (the tutorial's split of ResNet
// over two devices, stem,layer1,layer2|layer3,layer4,head, where it applies, else "balanced").
// "balanced" balances the stages' times at `measure_batch` on `device`, timed once per process
// for each set-up (stage_seconds_once), so every case that asks the same gets the same cut, and
// --advise predicts a case from the cut it runs. Throws std::invalid_argument for a cut the
// model cannot make.
Cut choose_cut(StagedModel& model, size_t num_parts, const RunConfig& config, int64_t measure_batch,
               torch::Device device);

// Chooses the cut (choose_cut, timed on the first device) and moves each part's modules to its
// device (one part per entry of `devices`). `measure_batch` is the batch size that per-stage
// timing uses for "balanced".
std::vector<Partition> partition_model(StagedModel& model, const std::vector<torch::Device>& devices,
                                       const RunConfig& config, int64_t measure_batch, Cut* cut_used);

}  // namespace parbench
