// The equivalence test every model that runs on CPU goes through (tests/strategy_test.cpp): each
// strategy that runs in one process, every pipeline schedule among them, gives single's loss,
// gradients and updated weights. Declared here so that a model's own test file can instantiate
// it for that model (tests/test_only_model_test.cpp does).
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

namespace parbench {

struct EquivalenceCase {
  std::string model;
  int64_t batch, image;  // image: a language model's sequence length
  bool eval_mode;  // batch-norm models: eval mode, so per-micro-batch statistics do not differ
  size_t devices;
  std::vector<int64_t> split_sizes;
};

inline void PrintTo(const EquivalenceCase& c, std::ostream* os) {
  *os << c.model << " batch " << c.batch << " on " << c.devices << " devices";
}

class SplitEquivalence : public ::testing::TestWithParam<EquivalenceCase> {};

}  // namespace parbench
