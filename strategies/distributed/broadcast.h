// What every replicated distributed strategy does at set-up: start every rank from rank 0's
// weights and buffers.
#pragma once

#include "strategies/flat_tensors.h"

#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/torch.h>

#include <vector>

namespace parbench {

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
