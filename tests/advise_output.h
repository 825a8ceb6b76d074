// --advise run with its table (stdout) and its reports (stderr) captured, for tests.
#pragma once

#include "benchmarks/advise/advise.h"
#include "benchmarks/config/options.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace parbench {

struct AdviseOutput {
  std::vector<CaseSpec> to_run;
  std::string table, errors;
};

// advise(cases, options), expected not to throw, with what it printed.
inline AdviseOutput advise_capturing(const std::vector<CaseSpec>& cases, const Options& options) {
  AdviseOutput output;
  testing::internal::CaptureStdout();
  testing::internal::CaptureStderr();
  EXPECT_NO_THROW(output.to_run = advise(cases, options));
  output.table = testing::internal::GetCapturedStdout();
  output.errors = testing::internal::GetCapturedStderr();
  return output;
}

}  // namespace parbench
