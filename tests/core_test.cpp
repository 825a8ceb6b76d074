// The helpers below strategies/: text joining and per-dtype flattening; temporary directories.
#include "benchmarks/launch/temporary_directory.h"
#include "core/text.h"
#include "core/flat_tensors.h"
#include "tests/parbench_process.h"

#include <gtest/gtest.h>

#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
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

// Another process that holds the ownership lock on directories, as a live run holds its own
// (TemporaryDirectory): a forked child that opens and flocks each, then waits to be killed.
class LockHolder {
 public:
  explicit LockHolder(const std::vector<std::string>& directories) {
    int ready[2];
    if (pipe(ready) != 0) return;
    pid_ = fork();
    if (pid_ == 0) {  // async-signal-safe calls only
      for (const auto& directory : directories) {
        const int fd = open(directory.c_str(), O_RDONLY | O_DIRECTORY);
        if (fd < 0 || flock(fd, LOCK_EX | LOCK_NB) != 0) _exit(1);
      }
      const char byte = 1;
      [[maybe_unused]] const auto written = write(ready[1], &byte, 1);
      while (true) pause();
    }
    close(ready[1]);
    char byte = 0;
    holds_ = read(ready[0], &byte, 1) == 1;
    close(ready[0]);
  }
  ~LockHolder() {
    if (pid_ <= 0) return;
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
  }
  bool holds() const { return holds_; }

 private:
  pid_t pid_ = -1;
  bool holds_ = false;
};

// A killed run's directory (no process holds its lock) is removed at the next start; one a live
// run holds is kept, whatever pid its name gives: a run in another PID namespace (a container
// sharing /tmp) has a pid that here may be no process's, or another process's.
TEST(TemporaryDirectory, DirectoriesNoProcessHoldsAreRemovedTheOthersKept) {
  TemporaryDirectory tmp("parbench-core-test-tmp");
  const TmpdirFor scoped(tmp);
  const auto dead_pid = std::to_string(ended_process());
  const auto stale = tmp.file("parbench-ranks-" + dead_pid + "-abc123");
  const auto stale_of_a_live_pid = tmp.file("parbench-ranks-" + std::to_string(getpid()) + "-ghi789");
  const auto held = tmp.file("parbench-ranks-" + dead_pid + "-def456");  // another namespace's run, alive
  const auto held_fit = tmp.file("parbench-fit-" + dead_pid + "-jkl012");
  const auto other = tmp.file("parbench-ranks-notapid");
  for (const auto& dir : {stale, stale_of_a_live_pid, held, held_fit, other}) ASSERT_EQ(mkdir(dir.c_str(), 0755), 0);
  ASSERT_EQ(mkdir((stale + "/sub").c_str(), 0755), 0);
  std::ofstream(stale + "/sub/result.json.partial") << "{";
  std::ofstream(held + "/result.json.partial") << "{";
  int removed = 0, removed_fit = 0;
  bool own_kept = false;
  {
    TemporaryDirectory own("parbench-ranks");  // this process's, in use
    LockHolder holder({held, held_fit});
    ASSERT_TRUE(holder.holds());
    removed = remove_stale_temporary_directories("parbench-ranks");
    removed_fit = remove_stale_temporary_directories("parbench-fit");
    own_kept = exists(own.path());
  }
  EXPECT_EQ(removed, 2);
  EXPECT_EQ(removed_fit, 0);
  EXPECT_FALSE(exists(stale));
  EXPECT_FALSE(exists(stale_of_a_live_pid)) << "its name's pid is alive, but no process holds it";
  EXPECT_TRUE(exists(held + "/result.json.partial")) << "a live run's directory was removed";
  EXPECT_TRUE(exists(held_fit));
  EXPECT_TRUE(own_kept);
  EXPECT_TRUE(exists(other));
}

// Once its holder has ended, the same directory goes.
TEST(TemporaryDirectory, ADirectoryGoesOnceItsHolderHasEnded) {
  TemporaryDirectory tmp("parbench-core-test-tmp");
  const TmpdirFor scoped(tmp);
  const auto dir = tmp.file("parbench-fit-123-abc123");
  ASSERT_EQ(mkdir(dir.c_str(), 0755), 0);
  int while_held = -1;
  {
    LockHolder holder({dir});
    ASSERT_TRUE(holder.holds());
    while_held = remove_stale_temporary_directories("parbench-fit");
  }
  const int after = remove_stale_temporary_directories("parbench-fit");
  EXPECT_EQ(while_held, 0);
  EXPECT_EQ(after, 1);
  EXPECT_FALSE(exists(dir));
}

}  // namespace
}  // namespace parbench
