// How long each of a model's stages takes: what a "balanced" cut (strategies/partition.h) is
// balanced on. Kept apart from the cut logic, which only reads the times.
#pragma once

#include "models/staged_model.h"
#include "strategies/strategy.h"

#include <torch/torch.h>

#include <vector>

namespace parbench {

// Forward+backward seconds of each stage on `device` for a batch of `batch_size`: the median of
// five synchronised runs after two warm-up passes, on a copy of the model.
std::vector<double> measure_stage_seconds(StagedModel& model, const RunConfig& config, int64_t batch_size,
                                          torch::Device device);

// measure_stage_seconds, once per process for each model, sample shape, precision, checkpointing,
// loss, batch and device, and the same times after: every case of a set-up that balances its
// cut at one batch gets the same cut, and so does --advise's profile of those cases. (Timed
// afresh per case, the cut followed each measurement's noise: gpipe and 1f1b at one split ran
// different cuts.)
std::vector<double> stage_seconds_once(StagedModel& model, const RunConfig& config, int64_t batch_size,
                                       torch::Device device);

}  // namespace parbench
