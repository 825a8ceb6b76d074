// The helpers below strategies/: text joining and per-dtype flattening; temporary directories.
#include "benchmarks/launch/temporary_directory.h"
#include "core/text.h"
#include "strategies/flat_tensors.h"

#include <gtest/gtest.h>

#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
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

bool exists(const std::string& path) {
  struct stat info {};
  return lstat(path.c_str(), &info) == 0;
}

// A process id that no process has: a child that has exited and been reaped.
pid_t ended_process() {
  const pid_t child = fork();
  if (child == 0) _exit(0);
  waitpid(child, nullptr, 0);
  return child;
}

// --trace writes a folder inside a test's directory: removing a directory removes what is in its
// subdirectories too, and a symbolic link, not what it points to.
TEST(TemporaryDirectory, IsRemovedWithItsSubdirectoriesButNotWhatLinksPointTo) {
  TemporaryDirectory outside("parbench-core-test-kept");
  std::ofstream(outside.file("keep.txt")) << "keep";
  std::string path;
  {
    TemporaryDirectory dir("parbench-core-test");
    path = dir.path();
    EXPECT_NE(path.find("/parbench-core-test-" + std::to_string(getpid()) + "-"), std::string::npos) << path;
    ASSERT_EQ(mkdir(dir.file("traces").c_str(), 0755), 0);
    ASSERT_EQ(mkdir(dir.file("traces/deeper").c_str(), 0755), 0);
    std::ofstream(dir.file("traces/deeper/a.trace.json")) << "{}";
    std::ofstream(dir.file("run.json.partial")) << "{";
    ASSERT_EQ(symlink(outside.path().c_str(), dir.file("link").c_str()), 0);
  }
  EXPECT_FALSE(exists(path)) << path << " was left behind";
  EXPECT_TRUE(exists(outside.file("keep.txt")));
}

// A killed run's directory (its process gone) is removed at the next start; a running one's is kept.
TEST(TemporaryDirectory, StaleDirectoriesOfEndedProcessesAreRemoved) {
  TemporaryDirectory tmp("parbench-core-test-tmp");
  const char* previous = std::getenv("TMPDIR");
  const std::string saved = previous != nullptr ? previous : "";
  setenv("TMPDIR", tmp.path().c_str(), 1);
  const auto stale = tmp.file("parbench-ranks-" + std::to_string(ended_process()) + "-abc123");
  const auto live = tmp.file("parbench-ranks-" + std::to_string(getpid()) + "-def456");
  const auto other = tmp.file("parbench-ranks-notapid");
  for (const auto& dir : {stale, live, other}) ASSERT_EQ(mkdir(dir.c_str(), 0755), 0);
  ASSERT_EQ(mkdir((stale + "/sub").c_str(), 0755), 0);
  std::ofstream(stale + "/sub/result.json.partial") << "{";
  EXPECT_EQ(remove_stale_temporary_directories("parbench-ranks"), 1);
  if (previous != nullptr) {
    setenv("TMPDIR", saved.c_str(), 1);
  } else {
    unsetenv("TMPDIR");
  }
  EXPECT_FALSE(exists(stale));
  EXPECT_TRUE(exists(live));
  EXPECT_TRUE(exists(other));
}

}  // namespace
}  // namespace parbench
