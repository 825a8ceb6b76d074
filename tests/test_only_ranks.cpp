// A distributed strategy that exists only in tests, registered from this file alone: one process
// per device (a rank), as ddp, each with a whole replica of the model and its own batch, whose
// gradients are averaged after backward by one all-reduce per parameter (--reduce=each) or one
// over all of them (--reduce=flat), with no buckets and no overlap. It reports two counters of
// its own: `allreduces_per_step`, the same on every rank, and `allreduce_ms`, the host time this
// rank spent in its all-reduces per step, which differs between ranks.
// tests/python/test_plugin_ranks.py runs it as ranks on CPU stand-ins and checks that both reach
// the JSON as docs/JSON.md says a distributed strategy's counters do.
#include "core/counter_table.h"
#include "strategies/distributed/world.h"
#include "strategies/prediction.h"
#include "strategies/strategy.h"
#include "strategies/training.h"

#include <chrono>
#include <stdexcept>

namespace parbench {

PARBENCH_DECLARE_COUNTER(Counter("allreduces_per_step").unit("all-reduces").means("test_ranks: all-reduces per step"));
PARBENCH_DECLARE_COUNTER(Counter("allreduce_ms").unit("ms").lower_is_better()
                             .means("test_ranks: host time of a step's all-reduces, per rank"));

namespace {

class TestRanks final : public Strategy {
 public:
  void setup(const ModelFactory& make_model, const std::vector<torch::Device>& devices,
             const RunConfig& config) override {
    world_ = config.world;
    TORCH_CHECK(world_, "test_ranks runs one process per device and needs their process group");
    TORCH_CHECK(devices.size() == 1, "test_ranks runs on one device per rank, got ", devices.size());
    devices_ = devices;
    config_ = config;
    flat_ = config.options.at("reduce") == "flat";
    model_ = make_model_on(make_model, devices.front(), config.precision);
    optimizer_ = make_sgd(*model_, config.learning_rate);
  }

  torch::Device input_device() const override { return devices_.front(); }
  torch::Device target_device() const override { return devices_.front(); }

  torch::Tensor train_step(const Batch& batch) override {
    optimizer_->zero_grad();
    auto loss = compute_loss(model_->forward(batch.inputs), batch.targets, config_.loss);
    loss.backward();
    average_gradients();
    optimizer_->step();
    ++steps_;
    return loss.detach();
  }

  std::map<std::string, std::string> describe() const override {
    return {{"backend", world_->backend_name()}, {"reduce", flat_ ? "flat" : "each"}};
  }

  std::map<std::string, double> counters() const override {
    return {{"allreduces_per_step", static_cast<double>(flat_ ? 1 : model_->module().parameters().size())},
            {"allreduce_ms", steps_ > 0 ? reduce_seconds_ * 1e3 / static_cast<double>(steps_) : 0.0}};
  }

 private:
  void all_reduce(const torch::Tensor& tensor) {
    std::vector<at::Tensor> tensors{tensor};
    world_->backend()->allreduce(tensors)->wait();
    tensor.div_(world_->size());
  }

  // Every rank all-reduces the same tensors in the same order; a parameter without a gradient
  // counts as zero.
  void average_gradients() {
    torch::NoGradGuard no_grad;
    const auto start = std::chrono::steady_clock::now();
    std::vector<torch::Tensor> gradients;
    for (auto& parameter : model_->module().parameters()) {
      if (!parameter.grad().defined()) parameter.mutable_grad() = torch::zeros_like(parameter);
      gradients.push_back(parameter.grad());
    }
    if (flat_) {
      std::vector<torch::Tensor> flattened;
      for (const auto& gradient : gradients) flattened.push_back(gradient.reshape(-1));
      const auto flat = torch::cat(flattened);
      all_reduce(flat);
      int64_t offset = 0;
      for (auto& gradient : gradients) {
        gradient.copy_(flat.narrow(0, offset, gradient.numel()).view_as(gradient));
        offset += gradient.numel();
      }
    } else {
      for (const auto& gradient : gradients) all_reduce(gradient);
    }
    reduce_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }

  World* world_ = nullptr;
  RunConfig config_;
  bool flat_ = false;
  std::unique_ptr<torch::optim::SGD> optimizer_;
  int64_t steps_ = 0;
  double reduce_seconds_ = 0;
};

// --advise's model of it, a test's: each rank trains the per-rank batch as single trains the
// set-up's batch, and its all-reduces are not modelled, so a case is predicted at single's step.
StrategyPredictor test_ranks_predictor() {
  StrategyPredictor predictor;
  predictor.predict = [](const AdviseProfile& profile, const CaseConditions&) {
    return Prediction{profile.single_step_ms, ""};
  };
  return predictor;
}

StrategyInfo test_ranks_info() {
  return StrategyInfo("test_ranks")
      .creates<TestRanks>()
      .summary("a test's distributed plug-in: replicas on ranks, gradients all-reduced after backward")
      .order(11)
      .distributed()
      .device_role("ranks")
      .option(StrategyOption::choice("reduce", "reduce", {"each", "flat"})
                  .help("test_ranks: each (an all-reduce per parameter) | flat (one); default each")
                  .defaults({"each"}))
      .obstacle([](const CaseConditions& conditions) -> std::optional<CaseObstacle> {
        if (conditions.config.options.at("reduce") == "flat" && conditions.named_batch < 2) {
          return CaseObstacle{"reduce:flat needs a batch of at least 2"};
        }
        return std::nullopt;
      })
      .predictor(test_ranks_predictor());
}

PARBENCH_REGISTER_STRATEGY(test_ranks_info());

}  // namespace
}  // namespace parbench
