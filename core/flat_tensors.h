// One flat buffer per dtype: a copy or a collective over many tensors then costs one call per
// dtype instead of one per tensor (data_parallel's broadcast and reduce, ddp's initial broadcast).
#pragma once

#include <torch/torch.h>

#include <vector>

namespace parbench {

// Indices of `tensors` grouped by dtype, groups in order of first appearance.
std::vector<std::vector<size_t>> indices_by_dtype(const std::vector<torch::Tensor>& tensors);

// The group's tensors, flattened and concatenated (a new tensor).
torch::Tensor concatenated(const std::vector<torch::Tensor>& tensors, const std::vector<size_t>& group);

// Views of consecutive pieces of `flat`, shaped like the group's tensors, in the group's order.
std::vector<torch::Tensor> split_like(const torch::Tensor& flat, const std::vector<torch::Tensor>& tensors,
                                      const std::vector<size_t>& group);

}  // namespace parbench
