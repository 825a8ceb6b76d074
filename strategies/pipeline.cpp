// Pipelined model parallelism: the batch is cut into micro-batches of `split_size`, so that
// while stage k works on micro-batch i, stage k-1 already works on micro-batch i+1. The
// schedules are in strategies/pipeline_schedule.h; strategies/stage_executor.h runs them, one
// host thread per device, each stage owning its backward.
#include "strategies/partition.h"
#include "strategies/pipeline_schedule.h"
#include "strategies/stage_executor.h"
#include "strategies/strategy.h"

#include <algorithm>
#include <stdexcept>

namespace parbench {
namespace {

class Pipeline final : public StagedStrategy {
 public:
  void setup(const ModelFactory& make_model, const std::vector<torch::Device>& devices,
             const RunConfig& config) override {
    if (config.split_size <= 0) {
      throw std::invalid_argument("split_size must be a positive number of images, got " +
                                  std::to_string(config.split_size));
    }
    TORCH_CHECK(devices.size() >= 2, "pipeline needs at least 2 devices, got ", devices.size());
    const size_t chunks = schedule_info(config.schedule).uses_chunks ? static_cast<size_t>(config.chunks) : 1;
    const auto micro_batches = static_cast<size_t>(micro_batch_count(config.batch_size, config.split_size));
    make_schedule(config.schedule, devices.size(), micro_batches, chunks);  // throws for what it cannot run
    set_up_stages(make_model, devices, config, std::min(config.split_size, config.batch_size), config.stage_lanes,
                  chunks);
  }

  torch::Tensor train_step(const Batch& batch) override {
    return executor_->train_step(batch, config_.split_size, config_.schedule);
  }

  std::map<std::string, std::string> describe() const override {
    std::map<std::string, std::string> facts = {
        {"cut", format_cut(cut_)}, {"schedule", config_.schedule}, {"lanes", std::to_string(config_.stage_lanes)}};
    if (schedule_info(config_.schedule).uses_chunks) facts["chunks"] = std::to_string(config_.chunks);
    return facts;
  }
};

PARBENCH_REGISTER_STRATEGY({"pipeline", "stages split across devices, micro-batches of split_size in flight",
                            /*order=*/2, /*min_devices=*/2, /*distributed=*/false,
                            [] { return std::make_unique<Pipeline>(); }, /*graph_capturable=*/true,
                            /*device_role=*/"stages"});

}  // namespace
}  // namespace parbench
