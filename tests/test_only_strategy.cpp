// A strategy that exists only in tests, with one option of its own, registered from this file
// alone: tests/python/test_plugin_strategy.py checks that it is listed, filtered, named, run,
// written to the JSON with its fields, reported and gated like the strategies parbench ships.
// --knob=once trains as single does; twice takes two steps per step (so it is measurably slower).
#include "strategies/strategy.h"
#include "strategies/training.h"

#include <stdexcept>

namespace parbench {
namespace {

class TestOnly final : public Strategy {
 public:
  void setup(const ModelFactory& make_model, const std::vector<torch::Device>& devices,
             const RunConfig& config) override {
    devices_ = {devices.front()};
    config_ = config;
    // Its option comes in RunConfig::options, by field: RunConfig has no member for it.
    steps_ = config.options.at("knob") == "twice" ? 2 : 1;
    model_ = make_model_on(make_model, devices_.front(), config.precision);
    optimizer_ = make_sgd(*model_, config.learning_rate);
  }

  torch::Device input_device() const override { return devices_.front(); }
  torch::Device target_device() const override { return devices_.front(); }

  torch::Tensor train_step(const Batch& batch) override {
    torch::Tensor loss;
    for (int step = 0; step < steps_; ++step) {
      optimizer_->zero_grad();
      loss = compute_loss(model_->forward(batch.inputs), batch.targets, config_.loss);
      loss.backward();
      optimizer_->step();
    }
    return loss.detach();
  }

  std::map<std::string, std::string> describe() const override { return {{"steps_per_step", std::to_string(steps_)}}; }

 private:
  RunConfig config_;
  int steps_ = 1;
  std::unique_ptr<torch::optim::SGD> optimizer_;
};

StrategyInfo test_only_info() {
  return StrategyInfo("test_only")
      .creates<TestOnly>()
      .summary("a test's plug-in: single's step, once or twice")
      .order(10)
      .option(StrategyOption::choice("knob", "knob", {"once", "twice"})
                  .help("test_only: once | twice (two steps per step); default once")
                  .defaults({"once"}))
      .obstacle([](const CaseConditions& conditions) -> std::optional<CaseObstacle> {
        if (conditions.config.options.at("knob") == "twice" && conditions.named_batch < 2) {
          return CaseObstacle{"knob:twice needs a batch of at least 2"};
        }
        return std::nullopt;
      });
}

PARBENCH_REGISTER_STRATEGY(test_only_info());

}  // namespace
}  // namespace parbench
