#include "core/flat_tensors.h"

#include <map>

namespace parbench {

std::vector<std::vector<size_t>> indices_by_dtype(const std::vector<torch::Tensor>& tensors) {
  std::map<c10::ScalarType, size_t> group_of;
  std::vector<std::vector<size_t>> groups;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const auto [slot, added] = group_of.emplace(tensors[i].scalar_type(), groups.size());
    if (added) groups.emplace_back();
    groups[slot->second].push_back(i);
  }
  return groups;
}

torch::Tensor concatenated(const std::vector<torch::Tensor>& tensors, const std::vector<size_t>& group) {
  std::vector<torch::Tensor> pieces;
  pieces.reserve(group.size());
  for (auto i : group) pieces.push_back(tensors[i].reshape(-1));
  return torch::cat(pieces);
}

std::vector<torch::Tensor> split_like(const torch::Tensor& flat, const std::vector<torch::Tensor>& tensors,
                                      const std::vector<size_t>& group) {
  std::vector<torch::Tensor> views;
  views.reserve(group.size());
  int64_t offset = 0;
  for (auto i : group) {
    views.push_back(flat.narrow(0, offset, tensors[i].numel()).view(tensors[i].sizes()));
    offset += tensors[i].numel();
  }
  return views;
}

}  // namespace parbench
