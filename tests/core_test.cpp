// The helpers below strategies/: text joining and per-dtype flattening.
#include "core/text.h"
#include "strategies/flat_tensors.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace parbench {
namespace {

TEST(Joined, PutsTheSeparatorBetweenItemsOnly) {
  EXPECT_EQ(joined(std::vector<std::string>{}), "");
  EXPECT_EQ(joined(std::vector<std::string>{"a"}), "a");
  EXPECT_EQ(joined(std::vector<std::string>{"a", "", "c"}), "a, , c");
  EXPECT_EQ(joined(std::vector<int>{0, 1, 2}, "|", [](int i) { return std::to_string(i * 10); }), "0|10|20");
}

TEST(FlatTensors, GroupsByDtypeInOrderOfFirstAppearanceAndCutsBack) {
  const std::vector<torch::Tensor> tensors = {torch::arange(6, torch::kFloat).view({2, 3}),
                                              torch::arange(3, torch::kLong), torch::full({2}, 7.0f),
                                              torch::ones({1, 1, 2}, torch::kDouble)};
  const auto groups = indices_by_dtype(tensors);
  ASSERT_EQ(groups, (std::vector<std::vector<size_t>>{{0, 2}, {1}, {3}}));

  const auto flat = concatenated(tensors, groups[0]);
  EXPECT_TRUE(flat.equal(torch::tensor({0.0f, 1.0f, 2.0f, 3.0f, 4.0f, 5.0f, 7.0f, 7.0f})));
  const auto parts = split_like(flat, tensors, groups[0]);
  ASSERT_EQ(parts.size(), 2u);
  EXPECT_TRUE(parts[0].equal(tensors[0]));
  EXPECT_TRUE(parts[1].equal(tensors[2]));
  // Views of the flat buffer, not copies: a collective into `flat` reaches them.
  flat.zero_();
  EXPECT_EQ(parts[1].sum().item<float>(), 0.0f);
}

}  // namespace
}  // namespace parbench
