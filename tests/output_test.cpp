// The --benchmark_out file is written whole or not at all (README.md, "Output files"): on a full
// disk the run fails and an earlier file stays; a second run given the same path while the first
// runs is refused; a closed stdout or stderr (`| head -1`) loses nothing. What a killed run
// leaves (its lock file, a partial file, --fit=batch's probe directory) goes at the next start.
#include "benchmarks/launch/temporary_directory.h"
#include "tests/parbench_process.h"

#include <gtest/gtest.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <optional>
#include <thread>

namespace parbench {
namespace {

constexpr double kDeadline = 300;  // the test kills parbench after this: a hang fails, it does not block CI
// At 30 repetitions kSmallRun's JSON is about 56 KiB, its stderr (Google Benchmark's context
// included) about 12 KiB: a file size limit between them.
constexpr rlim_t kFileSizeLimit = 32 * 1024;

const std::vector<std::string> kSmallRun = {"--preset=cpu", "--models=tinycnn", "--batch=4", "--image=16",
                                            "--warmup=1",   "--repetitions=3",  "--iterations=2"};

std::map<std::string, std::string> cpu_environment(std::map<std::string, std::string> more = {}) {
  more.emplace("CUDA_VISIBLE_DEVICES", "");
  more.emplace("OMP_NUM_THREADS", "1");
  return more;
}

std::vector<std::string> small_run(const std::vector<std::string>& more) {
  auto arguments = kSmallRun;
  arguments.insert(arguments.end(), more.begin(), more.end());
  return arguments;
}

std::string read_text(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(file), {}};
}

// The repetitions in a run's JSON, by case.
std::map<std::string, int> repetitions(const nlohmann::json& json) {
  std::map<std::string, int> found;
  for (const auto& entry : json.at("benchmarks")) {
    EXPECT_FALSE(entry.value("error_occurred", false)) << entry.dump();
    if (entry.at("run_type") == "iteration") ++found[entry.at("run_name").get<std::string>()];
  }
  return found;
}

// Waits until `directory` holds an entry whose name starts with `prefix`; its name, or nullopt.
std::optional<std::string> wait_for_entry(const std::string& directory, const std::string& prefix, double timeout_s) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  do {
    for (const auto& name : directory_entries(directory)) {
      if (name.rfind(prefix, 0) == 0) return name;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  } while (std::chrono::steady_clock::now() < deadline);
  return std::nullopt;
}

// A write past RLIMIT_FSIZE fails as one on a full disk does: the run exits 1 naming the file and
// the cause, and the file an earlier run wrote is left as it was, with no partial file beside it.
TEST(Output, AFullDiskFailsTheRunNamingTheCauseAndKeepsTheEarlierFile) {
  TemporaryDirectory dir("parbench-output-test");
  const auto out = dir.file("run.json");
  std::ofstream(out) << "an earlier run's file";
  ProcessSetup setup;
  setup.file_size_limit = kFileSizeLimit;
  ParbenchProcess parbench(small_run({"--strategies=single", "--repetitions=30", "--benchmark_out=" + out,
                                      "--benchmark_out_format=json"}),
                           cpu_environment(), setup);
  const auto run = parbench.wait(kDeadline);
  EXPECT_EQ(run.exit_code, 1) << run.err;
  EXPECT_NE(run.err.find("parbench: could not write " + out + ": File too large\n"), std::string::npos) << run.err;
  EXPECT_EQ(read_text(out), "an earlier run's file");
  EXPECT_EQ(directory_entries(dir.path()), std::vector<std::string>{"run.json"}) << "a partial or lock file was left";
}

// The same run without the limit writes the file: the failure above is the limit's.
TEST(Output, TheSameRunWithRoomWritesTheFile) {
  TemporaryDirectory dir("parbench-output-test");
  const auto out = dir.file("run.json");
  std::ofstream(out) << "an earlier run's file";
  ParbenchProcess parbench(small_run({"--strategies=single", "--repetitions=30", "--benchmark_out=" + out,
                                      "--benchmark_out_format=json"}),
                           cpu_environment());
  const auto run = parbench.wait(kDeadline);
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_GT(read_text(out).size(), kFileSizeLimit);
  EXPECT_LT(run.err.size(), kFileSizeLimit);
  EXPECT_EQ(repetitions(read_json(out)).size(), 1u);
}

// Two runs given one --benchmark_out: the second, started while the first runs, is refused before
// it runs anything (one line, exit 2), and the first writes its own results there.
TEST(Output, ASecondRunGivenTheSameFileIsRefusedAndTheFirstKeepsItsResults) {
  TemporaryDirectory dir("parbench-output-test");
  const auto out = dir.file("run.json");
  const auto arguments = small_run({"--strategies=single", "--benchmark_out=" + out, "--benchmark_out_format=json"});
  // Each of the first run's repetitions stalls 2 s: it is still running when the second ends.
  ParbenchProcess first(arguments, cpu_environment({{"PARBENCH_TEST_STALL_MS", "2000"}}));
  ASSERT_TRUE(first.wait_for_err("[1/1 ", kDeadline)) << first.err();
  ParbenchProcess second(arguments, cpu_environment());
  const auto refused = second.wait(kDeadline);
  const auto ran = first.wait(kDeadline);

  EXPECT_EQ(refused.exit_code, 2) << refused.err;
  EXPECT_EQ(refused.err, "parbench: cannot write --benchmark_out=" + out +
                             ": another parbench run is writing it (it holds '" + out +
                             ".lock'): give each run its own file\n");
  EXPECT_TRUE(refused.out.empty()) << refused.out;
  EXPECT_LT(refused.seconds, ran.seconds);
  ASSERT_EQ(ran.exit_code, 0) << ran.err;
  const auto json = read_json(out);
  EXPECT_FALSE(json.at("context").contains("interrupted"));
  const auto found = repetitions(json);
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found.begin()->second, 3);
  EXPECT_EQ(directory_entries(dir.path()), std::vector<std::string>{"run.json"}) << "a partial or lock file was left";
}

// A run killed outright (SIGKILL) mid --fit=batch leaves its lock file and its probe's directory;
// the next run with the same $TMPDIR and --benchmark_out removes them, and a killed run's partial
// file, at its start.
TEST(Output, WhatAKilledRunLeftIsRemovedByTheNext) {
  TemporaryDirectory dir("parbench-output-test");
  TemporaryDirectory tmp("parbench-output-tmp");
  const auto out = dir.file("run.json");
  {
    ParbenchProcess killed(small_run({"--strategies=single", "--fit=batch", "--benchmark_out=" + out,
                                      "--benchmark_out_format=json"}),
                           cpu_environment({{"TMPDIR", tmp.path()}, {"PARBENCH_TEST_OOM_ABOVE_BATCH", "37"}}));
    ASSERT_TRUE(wait_for_entry(tmp.path(), std::string(kFitDirectoryPrefix) + "-", kDeadline)) << killed.err();
    ASSERT_EQ(kill(-killed.pid(), SIGKILL), 0);
    killed.wait(kDeadline);
  }
  ASSERT_TRUE(wait_for_entry(tmp.path(), std::string(kFitDirectoryPrefix) + "-", 0)) << "nothing left to remove";
  ASSERT_TRUE(wait_for_entry(dir.path(), "run.json.lock", 0));
  std::ofstream(out + ".partial.999999") << "{\"context\": {";  // killed as it wrote the file
  std::ofstream(out + ".partial") << "{\"context\": {";         // as earlier versions named it
  std::ofstream(out + ".partial.notes") << "not parbench's";

  // A live run's probe directory is kept: this test holds one.
  std::optional<TemporaryDirectory> live;
  {
    const TmpdirFor scoped(tmp);
    live.emplace(kFitDirectoryPrefix);
  }
  ParbenchProcess next(small_run({"--strategies=single", "--benchmark_out=" + out, "--benchmark_out_format=json"}),
                       cpu_environment({{"TMPDIR", tmp.path()}}));
  const auto run = next.wait(kDeadline);
  ASSERT_EQ(run.exit_code, 0) << run.err;
  const auto left = directory_entries(tmp.path());
  EXPECT_EQ(left, std::vector<std::string>{live->path().substr(tmp.path().size() + 1)}) << "a killed run's directory is left";
  auto files = directory_entries(dir.path());
  std::sort(files.begin(), files.end());
  EXPECT_EQ(files, (std::vector<std::string>{"run.json", "run.json.partial.notes"}));
  EXPECT_EQ(repetitions(read_json(out)).size(), 1u);
}

// stdout or stderr a pipe nobody reads (`parbench ... | head -1` once head has ended): the run
// goes on, its ranks' too, and writes its whole file; the exit status is the run's.
class ClosedOutput : public testing::TestWithParam<int> {};

TEST_P(ClosedOutput, TheRunGoesOnAndWritesItsWholeFile) {
  TemporaryDirectory dir("parbench-output-test");
  const auto out = dir.file("run.json");
  ProcessSetup setup;
  setup.closed_pipe = GetParam();
  ParbenchProcess parbench(small_run({"--strategies=single,ddp", "--allreduce=off", "--dist-timeout=30",
                                      "--benchmark_out=" + out, "--benchmark_out_format=json"}),
                           cpu_environment(), setup);
  const auto run = parbench.wait(kDeadline);
  EXPECT_EQ(run.exit_code, 0) << run.err;
  const auto json = read_json(out);
  EXPECT_FALSE(json.at("context").contains("interrupted"));
  const auto found = repetitions(json);
  EXPECT_EQ(found.size(), 2u) << json.dump();
  for (const auto& [name, count] : found) EXPECT_EQ(count, 3) << name;
  EXPECT_EQ(directory_entries(dir.path()), std::vector<std::string>{"run.json"}) << "a partial or lock file was left";
}

INSTANTIATE_TEST_SUITE_P(Streams, ClosedOutput, testing::Values(STDOUT_FILENO, STDERR_FILENO),
                         [](const testing::TestParamInfo<int>& info) {
                           return std::string(info.param == STDOUT_FILENO ? "stdout" : "stderr");
                         });

}  // namespace
}  // namespace parbench
