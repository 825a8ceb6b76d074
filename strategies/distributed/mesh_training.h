// A data-parallel strategy's case on a mesh (strategies/distributed/device_mesh.h): ddp or zero
// runs on the `dp` axis, and the replica it keeps, averages or shards is the tensor-parallel
// shard the `tp` axis holds (torchtitan's 2-D: tensor parallel applied first, on its own group,
// then data parallel on the other). Without a tp axis (every rank on dp, the default) the dp
// group is the world's and nothing else changes.
//
// The batch rule, one for every mesh: --batch is one replica's batch; each of its tp ranks draws
// --batch/tp sequences and the tp group all-gathers them (as tensor_parallel's ranks share one
// batch), so the global batch is --batch x dp (ddp's strong scaling: --batch is the global batch,
// --batch/dp a replica's).
#pragma once

#include "strategies/distributed/device_mesh.h"
#include "strategies/strategy.h"
#include "models/tensor_parallel/layers.h"
#include "models/tensor_parallel/plan.h"

#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/torch.h>

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace parbench {

class World;

// --mesh=LIST for a data-parallel strategy: its cases' meshes (dp4, dp2.tp2, all).
StrategyOption mesh_option(const std::string& strategy);
// --sequence-parallel=LIST on the mesh's tp axis; a case without one has no such option.
StrategyOption mesh_sequence_parallel_option(const std::string& strategy);
// The case's mesh: its "mesh" option, or all of its ranks on dp.
MeshShape case_mesh(const RunConfig& config);
// The ranks each replica's batch is divided among (1 without a tp axis).
int tensor_parallel_degree(const RunConfig& config);
// Why a mesh case cannot run; nullopt where it can (and always without a tp axis).
std::optional<CaseObstacle> mesh_obstacle(const CaseConditions& conditions);
// `predictor`, covering only the cases without a tp axis: its profile is of a whole replica.
StrategyPredictor one_axis_only(StrategyPredictor predictor);

class MeshTraining {
 public:
  // Makes the mesh's groups where it has a tp axis (every rank of the world calls it).
  MeshTraining(World& world, const RunConfig& config);
  ~MeshTraining();
  MeshTraining(const MeshTraining&) = delete;
  MeshTraining& operator=(const MeshTraining&) = delete;

  // The group data parallelism averages or shards over.
  const c10::intrusive_ptr<c10d::Backend>& data_parallel_group() const;
  bool tensor_parallel() const { return mesh_ != nullptr; }

  // The model this rank trains: the whole model, or this rank's tensor-parallel shard of it.
  ModelPtr build_model(const ModelFactory& make_model, torch::Device device, Precision precision);
  // The replica's inputs from this rank's draw (its tp group's draws, all-gathered), and the
  // loss of the model's output against this rank's draw of the targets.
  torch::Tensor replica_inputs(const torch::Tensor& rank_inputs);
  torch::Tensor loss(const torch::Tensor& output, const torch::Tensor& rank_targets, LossKind kind);
  // With sequence parallelism, the parameters whose gradients each tp rank holds a partial sum
  // of (its slice of the sequence's); empty otherwise.
  const std::vector<torch::Tensor>& partial_gradient_parameters() const;
  // Sums `contiguous` over the tp group, in place.
  void sum_over_tensor_parallel(torch::Tensor& contiguous);
  // After backward, where every parameter's whole gradient is its grad(): the partial ones summed.
  void finish_gradients();
  // The whole model's parameters from this rank's shards, in the model's order (a collective of
  // the tp group); the tensors as they are without a tp axis.
  std::vector<torch::Tensor> whole_tensors(const std::vector<torch::Tensor>& shards) const;

  void start_step();
  void end_step();
  std::map<std::string, std::string> facts() const;
  std::map<std::string, double> counters() const;

 private:
  World& world_;
  MeshShape shape_;
  bool sequence_parallel_ = false;
  std::unique_ptr<DeviceMesh> mesh_;
  TensorParallelGroup tp_;
  CollectiveTally tally_, last_step_;
  TensorParallelModel* sharded_ = nullptr;
  std::vector<ShardKind> kinds_;
  std::vector<torch::Tensor> partial_;
};

}  // namespace parbench
