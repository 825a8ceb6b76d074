// DataParallel in one process: every step replicates the model onto the devices, scatters
// the batch, runs the replicas in parallel threads, gathers the outputs on the first device
// and sums the gradients there, through LibTorch's torch::nn::parallel::data_parallel.
//
// Batch-norm: LibTorch's replicas are deep clones, so each replica normalises with its own
// shard's statistics and its running-statistics updates are dropped with the replica: the
// original module's running mean and variance never change (Python's DataParallel keeps
// replica 0's updates). Training-mode outputs are unaffected; docs/STRATEGIES.md says more.
#include "benchmarks/device_timer.h"
#include "strategies/strategy.h"
#include "strategies/training.h"

namespace parbench {
namespace {

class DataParallel final : public Strategy {
 public:
  void setup(const ModelFactory& make_model, const std::vector<torch::Device>& devices,
             const RunConfig& config) override {
    TORCH_CHECK(devices.size() >= 2, "data_parallel needs at least 2 devices, got ", devices.size());
    devices_ = devices;
    config_ = config;
    model_ = make_model_on(make_model, devices.front(), config.precision);
    optimizer_ = make_sgd(*model_, config.learning_rate);
    replicate_ms_ = measure_replicate_ms();
  }

  std::map<std::string, double> counters() const override { return {{"replicate_ms", replicate_ms_}}; }

  torch::Device input_device() const override { return devices_.front(); }
  torch::Device target_device() const override { return devices_.front(); }

  torch::Tensor train_step(const Batch& batch) override {
    optimizer_->zero_grad();
    auto outputs = model_->data_parallel_forward(batch.inputs, devices_);
    auto loss = compute_loss(outputs, batch.targets, config_.loss);
    loss.backward();
    optimizer_->step();
    return loss.detach();
  }

 private:
  // What the replicate part of every step costs: one clone() of the model per device, as
  // torch::nn::parallel::replicate does.
  double measure_replicate_ms() const {
    constexpr int kRepeats = 5;
    return 1e3 * median_synchronised_seconds(devices_, kRepeats, [this] {
             for (const auto& device : devices_) model_->module().clone(device);
           });
  }

  RunConfig config_;
  double replicate_ms_ = 0;
  std::unique_ptr<torch::optim::SGD> optimizer_;
};

PARBENCH_REGISTER_STRATEGY({"data_parallel", "one process; replicate, scatter, parallel apply, gather every step",
                            /*order=*/3, /*min_devices=*/2, /*distributed=*/false,
                            [] { return std::make_unique<DataParallel>(); }, /*graph_capturable=*/false,
                            /*needs_gpus_because=*/"LibTorch's data_parallel gathers CUDA tensors only"});

}  // namespace
}  // namespace parbench
