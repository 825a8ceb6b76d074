// Naive model parallelism: the model's stages split across devices, the whole batch passing
// through one device after the other (the tutorial's ModelParallelResNet50).
#include "strategies/partition.h"
#include "strategies/strategy.h"
#include "strategies/training.h"

namespace parbench {
namespace {

class ModelParallel final : public Strategy {
 public:
  void setup(const ModelFactory& make_model, const std::vector<torch::Device>& devices,
             const RunConfig& config) override {
    TORCH_CHECK(devices.size() >= 2, "model_parallel needs at least 2 devices, got ", devices.size());
    devices_ = devices;
    config_ = config;
    model_ = make_model();
    partitions_ = partition_model(*model_, devices, config, config.batch_size, &cut_);
    optimizer_ = make_sgd(*model_, config.learning_rate);
  }

  torch::Device input_device() const override { return partitions_.front().device; }
  torch::Device target_device() const override { return partitions_.back().device; }

  torch::Tensor train_step(const Batch& batch) override {
    optimizer_->zero_grad();
    auto x = batch.inputs;
    for (const auto& partition : partitions_) {
      AutocastScope autocast(partition.device.type(), model_->autocast_dtype());
      x = partition.forward(x.to(partition.device));
    }
    auto loss = compute_loss(x, batch.targets, config_.loss);
    loss.backward();
    optimizer_->step();
    return loss.detach();
  }

  std::map<std::string, std::string> describe() const override { return {{"cut", format_cut(cut_)}}; }

 private:
  RunConfig config_;
  std::vector<Partition> partitions_;
  Cut cut_;
  std::unique_ptr<torch::optim::SGD> optimizer_;
};

PARBENCH_REGISTER_STRATEGY({"model_parallel", "stages split across devices, whole batch one device at a time",
                            /*order=*/1, /*min_devices=*/2, /*distributed=*/false,
                            [] { return std::make_unique<ModelParallel>(); }});

}  // namespace
}  // namespace parbench
