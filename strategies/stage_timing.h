// How long each of a model's stages takes: what a "balanced" cut (strategies/partition.h) is
// balanced on. Kept apart from the cut logic, which only reads the times.
#pragma once

#include "models/staged_model.h"
#include "strategies/strategy.h"

#include <torch/torch.h>

#include <vector>

namespace parbench {

// Forward+backward seconds of each stage on `device` for a batch of `batch_size`: the median of
// three synchronised runs after one warm-up pass, on a copy of the model.
std::vector<double> measure_stage_seconds(StagedModel& model, const RunConfig& config, int64_t batch_size,
                                          torch::Device device);

}  // namespace parbench
