// The options of the staged strategies (model_parallel and pipeline), read from a case's
// RunConfig::options: --cut's placement, which every case holds, and the pipeline's own options,
// which strategies/pipeline.cpp declares. The strategies, the partition, --advise's staged
// predictor and the predicted timeline read them here.
#pragma once

#include "strategies/strategy.h"

#include <cstdint>
#include <string>

namespace parbench {

// The key under which every case holds --cut (benchmarks/cases/cases.cpp, set_up_case): a global option,
// not one a strategy declares, so the registry refuses a strategy option of this field.
inline constexpr char kCutField[] = "cut";

// Where model_parallel and pipeline place the model's stages (and --advise cuts its profiles).
struct StagedOptions {
  // "" (the default cut), "balanced", or stage names per device, devices separated by '|' and
  // stages by ',': "stem,layer1,layer2|layer3,layer4,head" (strategies/partition.h).
  std::string cut;
};

inline StagedOptions staged_options(const RunConfig& config) {
  return StagedOptions{option_choice(config, kCutField, "")};
}

// Sets the cut a staged set-up uses ("": the default).
inline void set_cut(RunConfig& config, const std::string& cut) {
  if (cut.empty()) {
    config.options.erase(kCutField);
  } else {
    config.options[kCutField] = cut;
  }
}

// pipeline's options, each under its declared field; the defaults are the declarations'
// (Strategies.OptionStructsDefaultToTheirDeclarations checks). A model_parallel case holds none of
// them: no split, the whole batch at once.
struct PipelineOptions {
  int64_t split_size = 0;             // "split": images (sequences) per micro-batch; 0: no split
  std::string schedule = "tutorial";  // "schedule": strategies/pipeline_schedule.h
  int chunks = 2;                     // "chunks": interleaved-1f1b's model chunks (stages) per device
  int lanes = 1;                      // "lanes": compute streams per stage on GPUs, 1 or 2
};

inline PipelineOptions pipeline_options(const RunConfig& config) {
  const PipelineOptions defaults;
  PipelineOptions options;
  options.split_size = option_integer(config, "split", defaults.split_size);
  options.schedule = option_choice(config, "schedule", defaults.schedule);
  options.chunks = static_cast<int>(option_integer(config, "chunks", defaults.chunks));
  options.lanes = static_cast<int>(option_integer(config, "lanes", defaults.lanes));
  return options;
}

}  // namespace parbench
