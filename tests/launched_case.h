// The one train case a set of parbench options selects, ready for launch_case: tests launch cases
// as the benchmark process does, by the fields the case builder made, not by a name they spell.
#pragma once

#include "benchmarks/cases/cases.h"
#include "benchmarks/config/options.h"
#include "benchmarks/launch/launcher.h"
#include "tests/option_parsing.h"

#include <gtest/gtest.h>
#include <torch/cuda.h>

#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

namespace parbench {

// Ranks this test starts run on CPUs (the store backend), until the end of the scope: the variable
// is the process's, so a test that left it set would turn a later GPU test's ranks into CPU ones.
// CUDA reads it once, when the process first asks for a device: asked here first, so that a GPU
// test run after this one in the same process still sees the GPUs.
class GpusHiddenFromRanks {
 public:
  GpusHiddenFromRanks() {
    (void)torch::cuda::device_count();
    if (const char* value = std::getenv("CUDA_VISIBLE_DEVICES")) before_ = value;
    setenv("CUDA_VISIBLE_DEVICES", "", /*overwrite=*/1);
  }
  ~GpusHiddenFromRanks() {
    if (before_) {
      setenv("CUDA_VISIBLE_DEVICES", before_->c_str(), /*overwrite=*/1);
    } else {
      unsetenv("CUDA_VISIBLE_DEVICES");
    }
  }
  GpusHiddenFromRanks(const GpusHiddenFromRanks&) = delete;
  GpusHiddenFromRanks& operator=(const GpusHiddenFromRanks&) = delete;

 private:
  std::optional<std::string> before_;
};

// `arguments` must select exactly one train case that runs on `ranks` devices.
inline LaunchedCase only_train_case(std::vector<std::string> arguments, int ranks) {
  arguments.push_back("--gpus=" + std::to_string(ranks));
  const auto options = parsed_options(arguments, torch::cuda::is_available());
  std::vector<CaseSpec> cases;
  for (auto& spec : build_cases(options, /*visible_gpus=*/ranks)) {
    if (spec.skip_reason.empty()) cases.push_back(spec);
  }
  EXPECT_EQ(cases.size(), 1u) << "the options select " << cases.size() << " cases";
  if (cases.empty()) return {};
  return {cases.front().name, fields_json(cases.front().fields).dump()};
}

}  // namespace parbench
