// The one train case a set of parbench options selects, ready for launch_case: tests launch cases
// as the benchmark process does, by the fields the case builder made, not by a name they spell.
#pragma once

#include "benchmarks/cases/cases.h"
#include "benchmarks/config/options.h"
#include "benchmarks/launch/launcher.h"
#include "tests/option_parsing.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace parbench {

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
