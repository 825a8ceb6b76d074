#include "strategies/distributed/mesh_training.h"

#include "strategies/distributed/world.h"
#include "strategies/training.h"

#include <stdexcept>

namespace parbench {
namespace {

// A case's mesh text, checked against its ranks; std::invalid_argument (a usage error: the run
// stops before it starts) naming what is wrong.
MeshShape checked_mesh(const std::string& text, const RunConfig& config) {
  const auto shape = MeshShape::parse(text);
  if (shape.product() != config.devices) {
    throw std::invalid_argument("--mesh=" + text + " places " + std::to_string(shape.product()) +
                                " ranks, but the case runs on " + std::to_string(config.devices) +
                                " (the product of the axes' sizes must be the GPU count, --gpus)");
  }
  const int tp = shape.size("tp");
  if (tp == 1) return shape;
  const auto reason = tensor_parallel_obstacle_for(config.model, tp, config.seq_len, /*sequence_parallel=*/false);
  if (!reason.empty()) throw std::invalid_argument("--mesh=" + text + ": " + reason);
  if (config.batch_size % tp != 0) {
    throw std::invalid_argument("--mesh=" + text + ": each replica's " + std::to_string(tp) + " tp ranks draw --batch/" +
                                std::to_string(tp) + " sequences each, so --batch=" +
                                std::to_string(config.batch_size) + " must divide by " + std::to_string(tp));
  }
  return shape;
}

}  // namespace

StrategyOption mesh_option(const std::string& strategy) {
  return StrategyOption::choice("mesh", "mesh", {})
      .help(strategy + ": the ranks' mesh, axes outer to inner with their sizes: dp4, dp2.tp2, tp4, or\n"
                       "all (every one of the GPU count); the replica is the tp group's shards;\n"
                       "default every rank on dp")
      .values_for([](const std::vector<std::string>& given, bool defaulted, const RunConfig& config) {
        if (defaulted) return std::vector<std::string>{MeshShape::along("dp", config.devices).str()};
        std::vector<std::string> meshes;
        for (const auto& text : given) {
          if (text == "all") {
            for (const auto& shape : MeshShape::all_of(config.devices)) {
              // "all" leaves out the meshes the model cannot take, instead of refusing the run.
              try {
                meshes.push_back(checked_mesh(shape.str(), config).str());
              } catch (const std::invalid_argument&) {
              }
            }
          } else {
            meshes.push_back(checked_mesh(text, config).str());
          }
        }
        return meshes;
      })
      .unnamed_when([](const std::string& value) { return MeshShape::parse(value).size("tp") == 1; })
      // Each tp rank draws its share of the replica's batch (strong scaling has divided it among
      // the replicas already).
      .apply([](RunConfig& config, const std::string& value, int) {
        config.batch_size /= MeshShape::parse(value).size("tp");
      });
}

StrategyOption mesh_sequence_parallel_option(const std::string& strategy) {
  return StrategyOption::choice("sp", "sequence-parallel", {"off", "on"})
      .help(strategy + " on a mesh with a tp axis: on (sequence parallelism on tp) | off; default off")
      .defaults({"off"})
      .values_for([](const std::vector<std::string>& given, bool, const RunConfig& config) {
        if (tensor_parallel_degree(config) == 1) return std::vector<std::string>{};
        return given;
      });
}

MeshShape case_mesh(const RunConfig& config) {
  const auto found = config.options.find("mesh");
  if (found == config.options.end()) return MeshShape::along("dp", config.devices);
  return MeshShape::parse(found->second);
}

int tensor_parallel_degree(const RunConfig& config) {
  const auto found = config.options.find("mesh");
  return found == config.options.end() ? 1 : MeshShape::parse(found->second).size("tp");
}

std::optional<CaseObstacle> mesh_obstacle(const CaseConditions& conditions) {
  const auto& config = conditions.config;
  const int tp = tensor_parallel_degree(config);
  if (tp == 1 || option_choice(config, "sp", "off") != "on") return std::nullopt;
  const auto reason = tensor_parallel_obstacle_for(config.model, tp, config.seq_len, /*sequence_parallel=*/true);
  if (!reason.empty()) return CaseObstacle{reason};
  return std::nullopt;
}

StrategyPredictor one_axis_only(StrategyPredictor predictor) {
  auto covers = predictor.covers;
  predictor.covers = [covers](const CaseConditions& conditions) {
    return tensor_parallel_degree(conditions.config) == 1 && (!covers || covers(conditions));
  };
  return predictor;
}

MeshTraining::MeshTraining(World& world, const RunConfig& config)
    : world_(world), shape_(case_mesh(config)), sequence_parallel_(option_choice(config, "sp", "off") == "on") {
  TORCH_CHECK(shape_.product() == world.size(), "the mesh ", shape_.str(), " has ", shape_.product(),
              " ranks, the run ", world.size());
  if (shape_.size("tp") == 1) return;
  mesh_ = std::make_unique<DeviceMesh>(world, shape_);
  tp_ = {mesh_->group("tp").get(), mesh_->coordinate("tp"), shape_.size("tp"), &tally_, nullptr};
  // A stall's message names each rank's place on the mesh beside its number (a tp axis and a
  // dp axis: here only a mesh with a tp axis has groups, and tp alone names nothing new).
  if (shape_.size("dp") > 1) world.set_places([shape = shape_](int rank) { return shape.coordinates_text(rank); });
}

MeshTraining::~MeshTraining() {
  if (mesh_) world_.set_places(nullptr);
}

const c10::intrusive_ptr<c10d::Backend>& MeshTraining::data_parallel_group() const {
  return mesh_ ? mesh_->group("dp") : world_.backend();
}

ModelPtr MeshTraining::build_model(const ModelFactory& make_model, torch::Device device, Precision precision) {
  if (!mesh_) return make_model_on(make_model, device, precision);
  // Built whole and seeded on the CPU, as single's is; only this rank's shards reach the device.
  auto whole = make_model(torch::kCPU);
  const auto* plan = find_tensor_parallel_plan(whole->name());
  TORCH_CHECK(plan != nullptr, whole->name(), " has no tensor-parallel plan (the ", tensor_parallel_families(),
              " families have one)");
  auto sharded = plan->shard(*whole, tp_, sequence_parallel_);
  whole.reset();
  sharded->module().to(device);
  prepare_model(*sharded, precision);
  kinds_ = sharded->shard_kinds();
  partial_ = sharded->partial_gradient_parameters();
  sharded_ = sharded.get();
  return sharded;
}

torch::Tensor MeshTraining::replica_inputs(const torch::Tensor& rank_inputs) {
  return mesh_ ? all_gather_first_dim(rank_inputs, tp_) : rank_inputs;
}

torch::Tensor MeshTraining::loss(const torch::Tensor& output, const torch::Tensor& rank_targets, LossKind kind) {
  if (!mesh_) return compute_loss(output, rank_targets, kind);
  // The shard's vocabulary columns of the logits, sequence-first (T, N, V/tp).
  const auto targets = all_gather_first_dim(rank_targets, tp_);
  return vocab_parallel_cross_entropy(output.flatten(0, 1), targets.t().flatten(), tp_);
}

const std::vector<torch::Tensor>& MeshTraining::partial_gradient_parameters() const { return partial_; }

void MeshTraining::sum_over_tensor_parallel(torch::Tensor& contiguous) { all_reduce_sum_in_place(contiguous, tp_); }

void MeshTraining::finish_gradients() {
  if (sharded_ != nullptr) sharded_->finish_gradients();
}

std::vector<torch::Tensor> MeshTraining::whole_tensors(const std::vector<torch::Tensor>& shards) const {
  if (!mesh_) return shards;
  TORCH_CHECK(shards.size() == kinds_.size(), "a tensor per parameter: ", kinds_.size(), ", got ", shards.size());
  TensorParallelGroup untallied = tp_;
  untallied.tally = nullptr;
  std::vector<torch::Tensor> whole;
  for (size_t i = 0; i < shards.size(); ++i) whole.push_back(gather_shards(shards[i], kinds_[i], untallied));
  return whole;
}

void MeshTraining::start_step() { tally_.clear(); }

void MeshTraining::end_step() { last_step_ = tally_; }

std::map<std::string, std::string> MeshTraining::facts() const {
  std::map<std::string, std::string> facts = {{"mesh", shape_.str()},
                                              {"mesh_coordinates", shape_.coordinates_text(world_.rank())}};
  if (mesh_) facts["sequence_parallel"] = sequence_parallel_ ? "on" : "off";
  return facts;
}

std::map<std::string, double> MeshTraining::counters() const {
  if (!mesh_) return {};
  return {{"tp_comm_mib_per_step", last_step_.bytes / (1 << 20)},
          {"tp_gather_scatter_mib_per_step", last_step_.gather_scatter_bytes / (1 << 20)},
          {"tp_collectives_per_step", static_cast<double>(last_step_.calls)}};
}

}  // namespace parbench
