// Pipelined model parallelism: the batch is cut into micro-batches of `split_size`, so that
// while stage k works on micro-batch i, stage k-1 already works on micro-batch i+1. The
// schedules are in strategies/pipeline_schedule.h; strategies/stage_executor.h runs them, one
// host thread per device, each stage owning its backward.
#include "core/counter_table.h"
#include "models/model_traits.h"
#include "strategies/partition.h"
#include "strategies/pipeline_schedule.h"
#include "strategies/prediction.h"
#include "strategies/stage_executor.h"
#include "strategies/staged_options.h"
#include "strategies/strategy.h"

#include <algorithm>
#include <set>
#include <stdexcept>

namespace parbench {
namespace {

// The split option's counter (StrategyOption::counter, below).
PARBENCH_DECLARE_COUNTER(Counter("split_size").unit("items").means("pipeline: images (sequences) per micro-batch"));

class Pipeline final : public StagedStrategy {
 public:
  void setup(const ModelFactory& make_model, const std::vector<torch::Device>& devices,
             const RunConfig& config) override {
    options_ = pipeline_options(config);
    if (options_.split_size <= 0) {
      throw std::invalid_argument("split_size must be a positive number of images, got " +
                                  std::to_string(options_.split_size));
    }
    TORCH_CHECK(devices.size() >= 2, "pipeline needs at least 2 devices, got ", devices.size());
    const size_t chunks = schedule_info(options_.schedule).uses_chunks ? static_cast<size_t>(options_.chunks) : 1;
    const auto micro_batches = static_cast<size_t>(micro_batch_count(config.batch_size, options_.split_size));
    programs_ = make_schedule(options_.schedule, devices.size(), micro_batches, chunks);  // throws for what it cannot run
    set_up_stages(make_model, devices, config, std::min(options_.split_size, config.batch_size), options_.lanes,
                  chunks);
  }

  torch::Tensor train_step(const Batch& batch) override {
    return executor_->train_step(batch, options_.split_size, programs_);
  }

  std::map<std::string, std::string> describe() const override {
    std::map<std::string, std::string> facts = {
        {"cut", cut_text()}, {"schedule", options_.schedule}, {"lanes", std::to_string(options_.lanes)}};
    if (schedule_info(options_.schedule).uses_chunks) facts["chunks"] = std::to_string(options_.chunks);
    return facts;
  }

 private:
  PipelineOptions options_;
};

// The tutorial's split-size sweep; the full batch is added to it.
const std::vector<int64_t> kTutorialSplitSizes = {1, 3, 5, 8, 10, 12, 20, 40, 60};

// --split-sizes: ascending, each once; by default the tutorial's sweep below the batch (a split
// beyond it is one micro-batch, the same case as the full batch) and the full batch.
std::vector<std::string> split_sizes_for(const std::vector<std::string>& values, bool defaulted, const RunConfig& config) {
  std::set<int64_t> sizes;
  if (defaulted) {
    for (auto split : kTutorialSplitSizes) {
      if (split < config.batch_size) sizes.insert(split);
    }
    sizes.insert(config.batch_size);
  } else {
    for (const auto& value : values) sizes.insert(std::stoll(value));
  }
  std::vector<std::string> texts;
  for (auto split : sizes) texts.push_back(std::to_string(split));
  return texts;
}

std::string schedules_help() {
  std::string text = "pipeline schedules; default tutorial, gpipe, 1f1b:";
  for (const auto& info : schedule_table()) text += "\n  " + info.name + ": " + info.summary;
  return text;
}

StrategyInfo pipeline_info() {
  std::vector<std::string> schedules;
  for (const auto& schedule : schedule_table()) schedules.push_back(schedule.name);
  return StrategyInfo("pipeline")
      .creates<Pipeline>()
      .summary("stages split across devices, micro-batches of split_size in flight")
      .order(2)
      .min_devices(2)
      .graph_capturable()
      .device_role("stages")
      .option(StrategyOption::integer("split", "split-sizes")
                  .help("pipeline micro-batch sizes; default 1,3,5,8,10,12,20,40,60 (those below the\nbatch) and the "
                        "full batch")
                  .counter("split_size")
                  .values_for(split_sizes_for))
      .option(StrategyOption::choice("schedule", "schedules", schedules)
                  .help(schedules_help())
                  .defaults({"tutorial", "gpipe", "1f1b"}))
      .option(StrategyOption::integer("chunks", "chunks")
                  .help("interleaved-1f1b: stages (model chunks) per device; default 2")
                  .defaults({"2"})
                  .values_for([](const std::vector<std::string>& values, bool, const RunConfig& config) {
                    return schedule_info(pipeline_options(config).schedule).uses_chunks ? values
                                                                                        : std::vector<std::string>{};
                  }))
      // One lane is the default and keeps the names that baselines already hold.
      .option(StrategyOption::integer("lanes", "stage-lanes")
                  .help("pipeline on GPUs: compute streams per stage, 1 | 2 (micro-batches take the\ntwo in turn, so "
                        "a forward can overlap a backward); default 1")
                  .choices({"1", "2"})
                  .defaults({"1"})
                  .unnamed_value("1"))
      .obstacle([](const CaseConditions& conditions) -> std::optional<CaseObstacle> {
        const auto& config = conditions.config;
        const auto options = pipeline_options(config);
        if (const auto reason = shared_weights_obstacle(config.model, "pipeline places stages on separate devices");
            !reason.empty()) {
          return CaseObstacle{reason};
        }
        if (schedule_info(options.schedule).splits_backward && config.checkpoint != Checkpointing::kOff) {
          return CaseObstacle{options.schedule + " splits each backward into input and weight gradients; "
                              "--checkpoint=blocks recomputes a block's whole backward at once"};
        }
        if (schedule_info(options.schedule).uses_chunks && options.chunks > 1 &&
            micro_batch_count(config.batch_size, options.split_size) % conditions.devices != 0) {
          return CaseObstacle{options.schedule + " needs the micro-batches to be a multiple of the devices"};
        }
        return std::nullopt;
      })
      // --advise: the schedule simulator replays the case's schedule over its profiled cut.
      .predictor(staged_predictor([](const CaseConditions& conditions) {
        const auto options = pipeline_options(conditions.config);
        // The simulator gives each device one compute stream; two lanes overlap a forward with a backward.
        if (options.lanes != 1) return false;
        // An interleaved schedule that cannot run (its own skip says so) has nothing to predict.
        return !schedule_info(options.schedule).uses_chunks || options.chunks == 1 ||
               micro_batch_count(conditions.config.batch_size, options.split_size) % conditions.devices == 0;
      }));
}

PARBENCH_REGISTER_STRATEGY(pipeline_info());

}  // namespace
}  // namespace parbench
