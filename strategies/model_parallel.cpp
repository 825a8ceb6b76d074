// Naive model parallelism: the model's stages split across devices, the whole batch passing
// through one device after the other (the tutorial's ModelParallelResNet50). It is a pipeline
// of one micro-batch: strategies/stage_executor.h runs it, each stage owning its backward.
#include "models/model_traits.h"
#include "strategies/partition.h"
#include "strategies/prediction.h"
#include "strategies/stage_executor.h"
#include "strategies/strategy.h"

namespace parbench {
namespace {

class ModelParallel final : public StagedStrategy {
 public:
  void setup(const ModelFactory& make_model, const std::vector<torch::Device>& devices,
             const RunConfig& config) override {
    TORCH_CHECK(devices.size() >= 2, "model_parallel needs at least 2 devices, got ", devices.size());
    set_up_stages(make_model, devices, config, config.batch_size, /*lanes=*/1);
    programs_ = make_schedule("gpipe", devices.size(), /*micro_batches=*/1, /*chunks=*/1);
  }

  torch::Tensor train_step(const Batch& batch) override {
    return executor_->train_step(batch, /*split_size=*/batch.inputs.size(0), programs_);
  }

  std::map<std::string, std::string> describe() const override { return {{"cut", cut_text()}}; }

};

PARBENCH_REGISTER_STRATEGY(StrategyInfo("model_parallel")
                               .creates<ModelParallel>()
                               .summary("stages split across devices, whole batch one device at a time")
                               .order(1)
                               .min_devices(2)
                               .graph_capturable()
                               .device_role("stages")
                               .obstacle([](const CaseConditions& conditions) -> std::optional<CaseObstacle> {
                                 const auto reason = shared_weights_obstacle(
                                     conditions.config.model, "model_parallel places stages on separate devices");
                                 if (reason.empty()) return std::nullopt;
                                 return CaseObstacle{reason};
                               })
                               // --advise: the schedule simulator over one micro-batch of the whole batch.
                               .predictor(staged_predictor()));

}  // namespace
}  // namespace parbench
