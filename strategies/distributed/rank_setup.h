// What a distributed strategy's set-up does first on each rank: find the process group it joined
// (one device per rank), and start from rank 0's weights where every rank holds them.
#pragma once

#include "strategies/distributed/world.h"
#include "core/flat_tensors.h"
#include "strategies/strategy.h"

#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/torch.h>

#include <string>
#include <vector>

namespace parbench {

// The rank's world from `config`, checked: it exists (the case runs as ranks) and `devices` is
// its one device. Throws c10::Error naming `strategy` and how to start its ranks.
inline World& rank_world(const std::string& strategy, const RunConfig& config, const std::vector<torch::Device>& devices) {
  TORCH_CHECK(config.world, strategy,
              " runs one process per device and needs their process group: start it through parbench's launcher, "
              "torchrun, srun or mpirun");
  TORCH_CHECK(devices.size() == 1, strategy, " runs on one device per rank, got ", devices.size());
  TORCH_CHECK(devices.front() == config.world->device(), strategy, " was given ", devices.front(),
              " but this rank's device is ", config.world->device());
  return *config.world;
}

// Copies rank 0's values of `tensors` to every rank: one flat broadcast per dtype.
inline void broadcast_from_rank0(const std::vector<torch::Tensor>& tensors, c10d::Backend& backend) {
  torch::NoGradGuard no_grad;
  for (const auto& group : indices_by_dtype(tensors)) {
    std::vector<at::Tensor> flat{concatenated(tensors, group)};
    backend.broadcast(flat)->wait();
    const auto parts = split_like(flat.front(), tensors, group);
    for (size_t k = 0; k < group.size(); ++k) tensors[group[k]].copy_(parts[k]);
  }
}

}  // namespace parbench
