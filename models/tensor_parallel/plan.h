// A model family's tensor-parallel plan: how one rank's shards of a whole model are built and
// trained. Each plan lives with the models (models/tensor_parallel/gpt.cpp, llama.cpp, as torchtitan keeps a
// model's parallelize function beside it) and registers itself; tensor_parallel and a mesh's tp
// axis find it by the model's name, so neither names a model.
#pragma once

#include "models/staged_model.h"
#include "models/tensor_parallel/layers.h"

#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace parbench {

// One rank's part of a model: a StagedModel whose forward takes the whole batch's tokens (N, T)
// and returns this rank's vocabulary columns of the logits, sequence-first (T, N, V/w), and whose
// parameters carry the whole model's names in its order, each this rank's shard.
class TensorParallelModel : public StagedModel {
 public:
  // A rank's shards are not replicated across devices (data_parallel): refused.
  torch::Tensor data_parallel_forward(const torch::Tensor& input, const std::vector<torch::Device>& devices) override;
  // After backward, with sequence parallelism: the gradients of the parameters each rank saw
  // only its slice of the sequence through, summed across ranks. Nothing without it.
  virtual void finish_gradients() = 0;
  // Those parameters (empty without sequence parallelism).
  virtual const std::vector<torch::Tensor>& partial_gradient_parameters() const = 0;
  // How each parameter, in the model's order, is split across the ranks.
  virtual std::vector<ShardKind> shard_kinds() = 0;
  // --tp-halves: the batch's forward in two halves, each on its own stream (streams: a CUDA
  // stream id per half; empty off GPUs), their collectives alternating; each half's logits.
  virtual bool has_halves() const { return false; }
  virtual std::vector<torch::Tensor> forward_halves(const torch::Tensor& tokens, const std::vector<int64_t>& streams);
};

struct TensorParallelPlan {
  std::string family;  // named in messages: "GPT"
  // Whether the plan splits `model` (a model's registered name).
  std::function<bool(const std::string& model)> covers;
  // Why `degree` ranks cannot split it ("" : they can).
  std::function<std::string(const std::string& model, int degree, int64_t seq_len, bool sequence_parallel)> obstacle;
  // How the parameter of that name is split (for --advise's memory, from the whole model's names).
  std::function<ShardKind(const std::string& parameter_name)> shard_kind;
  // The model's width: each layer's collective moves a (T, N, width) activation.
  std::function<int64_t(const std::string& model)> width;
  // Whether its shards run --tp-halves (TensorParallelModel::forward_halves).
  bool halves = false;
  // This rank's shards of `whole` (built whole on the CPU, seeded), on the CPU.
  std::function<std::shared_ptr<TensorParallelModel>(StagedModel& whole, const TensorParallelGroup& group,
                                                     bool sequence_parallel)>
      shard;
};

// Registers a plan (at static initialisation, through PARBENCH_REGISTER_TENSOR_PARALLEL_PLAN).
bool register_tensor_parallel_plan(TensorParallelPlan plan);
// The plan that covers `model`, or null.
const TensorParallelPlan* find_tensor_parallel_plan(const std::string& model);
// "GPT, Llama": the families that have a plan, for messages.
std::string tensor_parallel_families();
// Why `degree` ranks cannot split `model` ("" : they can): no plan covers it, or its plan's reason.
std::string tensor_parallel_obstacle_for(const std::string& model, int degree, int64_t seq_len, bool sequence_parallel);

#define PARBENCH_TP_PLAN_CONCAT_INNER(a, b) a##b
#define PARBENCH_TP_PLAN_CONCAT(a, b) PARBENCH_TP_PLAN_CONCAT_INNER(a, b)
#define PARBENCH_REGISTER_TENSOR_PARALLEL_PLAN(plan)                                                  \
  static const bool PARBENCH_TP_PLAN_CONCAT(parbench_tensor_parallel_plan_, __LINE__) [[maybe_unused]] = \
      ::parbench::register_tensor_parallel_plan(plan)

}  // namespace parbench
