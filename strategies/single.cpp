// The whole model on one device: the baseline every other strategy is compared with.
#include "strategies/optimizer.h"
#include "strategies/prediction.h"
#include "strategies/strategy.h"
#include "strategies/training.h"

#include <ATen/record_function.h>

namespace parbench {
namespace {

class SingleDevice final : public Strategy {
 public:
  void setup(const ModelFactory& make_model, const std::vector<torch::Device>& devices,
             const RunConfig& config) override {
    TORCH_CHECK(devices.size() == 1, "single runs on exactly one device, got ", devices.size());
    devices_ = devices;
    config_ = config;
    model_ = make_model_on(make_model, devices.front(), config.precision);
    optimizer_ = make_optimizer(*model_, config, Optimizer::SgdKernels::kPerParameter);
  }

  torch::Device input_device() const override { return devices_.front(); }
  torch::Device target_device() const override { return devices_.front(); }

  torch::Tensor train_step(const Batch& batch) override {
    optimizer_->zero_grad();
    torch::Tensor loss;
    {
      RECORD_USER_SCOPE("forward");
      loss = compute_loss(model_->forward(batch.inputs), batch.targets, config_.loss);
    }
    {
      RECORD_USER_SCOPE("backward");
      loss.backward();
    }
    RECORD_USER_SCOPE("optimizer");
    optimizer_->step();
    return loss.detach();
  }

  std::vector<DeviceModelStates> model_states() const override {
    return {{optimizer_->parameters(), optimizer_->state()}};
  }

 private:
  RunConfig config_;
  std::unique_ptr<Optimizer> optimizer_;
};

// --advise: the reference every set-up profiles; its prediction is its profiled step.
StrategyPredictor single_predictor() {
  StrategyPredictor predictor;
  predictor.reference = true;
  predictor.predict = [](const AdviseProfile& profile, const CaseConditions&) {
    return Prediction{profile.single_step_ms, profile.parts.cut};
  };
  predictor.memory = [](const AdviseProfile& profile, const CaseConditions& conditions) {
    return MemoryPrediction{{whole_model_memory(profile.memory, conditions.config, conditions.config.batch_size)}};
  };
  return predictor;
}

PARBENCH_REGISTER_STRATEGY(StrategyInfo("single")
                               .creates<SingleDevice>()
                               .summary("the whole model on one device")
                               .order(0)
                               .graph_capturable()
                               .predictor(single_predictor()));

}  // namespace
}  // namespace parbench
