#include "models/tensor_parallel/plan.h"

#include <algorithm>
#include <stdexcept>

namespace parbench {
namespace {

// A function-local static: plans register from other files' static initialisers.
std::vector<TensorParallelPlan>& plans() {
  static std::vector<TensorParallelPlan> registered;
  return registered;
}

}  // namespace

torch::Tensor TensorParallelModel::data_parallel_forward(const torch::Tensor&, const std::vector<torch::Device>&) {
  throw std::invalid_argument(name() + "'s tensor-parallel shards are not replicated across devices");
}

std::vector<torch::Tensor> TensorParallelModel::forward_halves(const torch::Tensor&, const std::vector<int64_t>&) {
  throw std::invalid_argument(name() + "'s tensor-parallel plan has no halves (--tp-halves)");
}

bool register_tensor_parallel_plan(TensorParallelPlan plan) {
  for (const auto& other : plans()) {
    if (other.family == plan.family) throw std::logic_error("two tensor-parallel plans for " + plan.family);
  }
  plans().push_back(std::move(plan));
  return true;
}

const TensorParallelPlan* find_tensor_parallel_plan(const std::string& model) {
  for (const auto& plan : plans()) {
    if (plan.covers(model)) return &plan;
  }
  return nullptr;
}

std::string tensor_parallel_families() {
  // Sorted: the plans register in static initialisation order, which the link decides.
  std::vector<std::string> names;
  for (const auto& plan : plans()) names.push_back(plan.family);
  std::sort(names.begin(), names.end());
  std::string families;
  for (const auto& name : names) families += (families.empty() ? "" : ", ") + name;
  return families;
}

std::string tensor_parallel_obstacle_for(const std::string& model, int degree, int64_t seq_len, bool sequence_parallel) {
  const auto* plan = find_tensor_parallel_plan(model);
  if (plan == nullptr) {
    return model + " has no tensor-parallel plan (the " + tensor_parallel_families() + " families have one)";
  }
  return plan->obstacle(model, degree, seq_len, sequence_parallel);
}

}  // namespace parbench
