// DistributedDataParallel: one process per device (a rank), each with a whole replica of the
// model and its own share of the batch. Rank 0's parameters and buffers are broadcast at
// set-up; every step, gradients are averaged across ranks by bucketed all-reduces that start
// while backward is still running (strategies/distributed/gradient_buckets.h), so every rank
// applies the same update. The process group is the one this rank joined
// (strategies/distributed/world.h): NCCL on GPUs, the store backend on the CPU.
//
// Batch-norm: buffers are broadcast once, at set-up; afterwards each rank's running
// statistics follow its own shard (PyTorch's DDP re-broadcasts rank 0's buffers before every
// forward by default). Training-mode outputs do not depend on them.
#include "core/text.h"
#include "strategies/ddp_options.h"
#include "strategies/distributed/rank_setup.h"
#include "strategies/distributed/gradient_buckets.h"
#include "strategies/distributed/mesh_training.h"
#include "strategies/distributed/world.h"
#include "core/flat_tensors.h"
#include "strategies/optimizer.h"
#include "strategies/prediction.h"
#include "strategies/strategy.h"
#include "strategies/training.h"

#include <algorithm>


namespace parbench {
namespace {

class DistributedDataParallel final : public Strategy {
 public:
  void setup(const ModelFactory& make_model, const std::vector<torch::Device>& devices,
             const RunConfig& config) override {
    world_ = &rank_world("ddp", config, devices);
    devices_ = devices;
    config_ = config;
    options_ = ddp_options(config);
    mesh_ = std::make_unique<MeshTraining>(*world_, config);
    model_ = mesh_->build_model(make_model, devices.front(), config.precision);
    auto state = model_->module().parameters();
    for (const auto& buffer : model_->module().buffers()) state.push_back(buffer);
    // The replicas are the dp group's: with a tp axis each holds its tp rank's shards.
    broadcast_from_rank0(state, *mesh_->data_parallel_group());
    optimizer_ = make_optimizer(*model_, config, Optimizer::SgdKernels::kPerParameter);
    buckets_ = std::make_unique<GradientBuckets>(model_->module().parameters(), mesh_->data_parallel_group(),
                                                 options_.bucket_mib, options_.overlap);
  }

  torch::Device input_device() const override { return devices_.front(); }
  torch::Device target_device() const override { return devices_.front(); }

  torch::Tensor train_step(const Batch& batch) override {
    mesh_->start_step();
    buckets_->prepare();
    auto loss = mesh_->loss(model_->forward(mesh_->replica_inputs(batch.inputs)), batch.targets, config_.loss);
    loss.backward();
    buckets_->finish();
    mesh_->finish_gradients();  // averaged over dp, then summed over tp: the two commute
    optimizer_->step();
    mesh_->end_step();
    return loss.detach();
  }

  std::vector<torch::Tensor> parameters_for_check() const override {
    return mesh_->whole_tensors(Strategy::parameters_for_check());
  }
  std::vector<torch::Tensor> gradients_for_check() const override {
    return mesh_->whole_tensors(Strategy::gradients_for_check());
  }

  std::map<std::string, double> counters() const override { return mesh_->counters(); }

  std::vector<DeviceModelStates> model_states() const override {
    return {{optimizer_->parameters(), optimizer_->state()}};
  }

  std::map<std::string, std::string> describe() const override {
    std::map<std::string, std::string> facts = {{"backend", world_->backend_name()},
                                                {"bucket_mib", format_number(options_.bucket_mib)},
                                                {"buckets", std::to_string(buckets_->bucket_count())},
                                                {"overlap", options_.overlap ? "on" : "off"}};
    if (const auto scaling = config_.options.find("scaling"); scaling != config_.options.end()) {
      facts["scaling"] = scaling->second;
    }
    for (const auto& [key, value] : mesh_->facts()) facts[key] = value;
    return facts;
  }

 private:
  RunConfig config_;
  DdpOptions options_;
  World* world_ = nullptr;
  std::unique_ptr<MeshTraining> mesh_;
  std::unique_ptr<Optimizer> optimizer_;
  std::unique_ptr<GradientBuckets> buckets_;
};

// --advise: a rank's step (the whole model's at the per-rank batch) plus the all-reduce time its
// backward does not hide, from each gradient bucket's ready time and all-reduce across the ranks'
// GPUs, plus what the hidden all-reduces cost the step beside them (docs/METRICS.md, "Predicted
// step time").
StrategyPredictor ddp_predictor() {
  auto predictor = rank_predictor(
      at_bucket_and_batch, [](const AdviseProfile& profile, const CaseConditions& conditions, const RankProfile& rank) {
        const double exposed_ms = exposed_allreduce_ms(rank.bucket_ready_ms, rank.bucket_allreduce_ms, rank.backward_ms,
                                                       ddp_options(conditions.config).overlap);
        double allreduce_ms = 0;
        for (double ms : rank.bucket_allreduce_ms) allreduce_ms += ms;
        return Prediction{rank.rank_step_ms + exposed_ms + hidden_comm_cost_ms(rank, allreduce_ms - exposed_ms),
                          profile.parts.cut};
      });
  // Memory: each rank the whole model at its batch, and the flat gradient buckets, as many bytes
  // as the parameters, kept from set-up.
  predictor.memory = [](const AdviseProfile& profile, const CaseConditions& conditions) {
    auto rank = whole_model_memory(profile.memory, conditions.config, conditions.config.batch_size);
    rank.strategy = rank.parameters;
    return MemoryPrediction{std::vector<DeviceMemory>(static_cast<size_t>(conditions.devices), rank)};
  };
  return predictor;
}

StrategyInfo ddp_info() {
  return StrategyInfo("ddp")
      .creates<DistributedDataParallel>()
      .summary("one process per device; gradients averaged by bucketed all-reduce during backward")
      .order(4)
      .distributed()
      .graph_capturable()
      .device_role("ranks")
      .option(mesh_option("ddp"))
      .option(mesh_sequence_parallel_option("ddp"))
      .option(StrategyOption::number("bucket_mib", "bucket-mib")
                  .help("ddp gradient bucket size in MiB; default 25")
                  .defaults({"25"}))
      .option(StrategyOption::choice("overlap", "overlap", {"on", "off"})
                  .help("ddp: on (all-reduce during backward) | off (after backward); default on")
                  .defaults({"on"}))
      // --batch is per rank in weak scaling, global in strong.
      .option(StrategyOption::choice("scaling", "scaling", {"weak", "strong"})
                  .help("ddp: weak (per-rank batch fixed) | strong (global batch fixed); default weak")
                  .defaults({"weak"})
                  // --mesh has divided the batch among a replica's tp ranks: now among the replicas.
                  .apply([](RunConfig& config, const std::string& value, int ranks) {
                    if (value == "strong") config.batch_size /= ranks / tensor_parallel_degree(config);
                  }))
      .obstacle([](const CaseConditions& conditions) -> std::optional<CaseObstacle> {
        if (auto obstacle = mesh_obstacle(conditions)) return obstacle;
        if (conditions.config.options.at("scaling") == "strong" && conditions.named_batch % conditions.devices != 0) {
          return CaseObstacle{"strong scaling needs a batch divisible by " + std::to_string(conditions.devices) +
                              " ranks"};
        }
        return std::nullopt;
      })
      .predictor(one_axis_only(ddp_predictor()));
}

PARBENCH_REGISTER_STRATEGY(ddp_info());

}  // namespace
}  // namespace parbench
