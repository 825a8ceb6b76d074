// SIGINT, SIGTERM and SIGHUP during a run (docs/RUNNING.md, "Interrupts"): sent to parbench, or to its
// process group as a terminal's Ctrl-C (SIGINT) or a closed terminal (SIGHUP) sends it, while a
// ddp case runs on ranks of parbench's own launcher (CPU, store backend). Every rank stops within
// seconds, parbench exits 128 + the signal, the JSON holds the cases completed before and says it
// was interrupted, and nothing is left behind: no .partial or lock file, no rank, no rank's
// results directory.
#include "benchmarks/launch/temporary_directory.h"
#include "tests/parbench_process.h"

#include <gtest/gtest.h>

#include <signal.h>
#include <unistd.h>

#include <sstream>
#include <thread>

namespace parbench {
namespace {

constexpr double kDeadline = 120;   // the test kills parbench after this: a hang fails, it does not block CI
constexpr double kStopWithin = 10;  // seconds from the signal to parbench's exit, on a loaded 2-core machine

struct Interrupt {
  const char* name;
  const char* signal_name;
  int signal_number;
  bool to_group;  // to parbench's process group, as a terminal sends Ctrl-C or its hang-up
  int exit_code;
};

void PrintTo(const Interrupt& interrupt, std::ostream* out) { *out << interrupt.name; }

// The lines parbench itself printed ("parbench: ..."), first: a long stderr is cut in CI logs.
std::string own_lines(const std::string& err) {
  std::string lines;
  std::istringstream stream(err);
  for (std::string line; std::getline(stream, line);) {
    if (line.rfind("parbench:", 0) == 0 || line.find("rank ") != std::string::npos) lines += "\n  " + line;
  }
  return lines;
}

class InterruptTest : public testing::TestWithParam<Interrupt> {};

TEST_P(InterruptTest, StopsEveryRankAndWritesTheCompletedCasesMarkedInterrupted) {
  const auto& interrupt = GetParam();
  TemporaryDirectory dir("parbench-interrupt-test");
  TemporaryDirectory tmp("parbench-interrupt-tmp");  // the ranks' results directories go here
  const auto out = dir.file("run.json");
  const auto marker = std::to_string(getpid()) + interrupt.name;
  // single (a few seconds) completes; ddp's 2 x 1000 iterations are still running when the signal comes.
  ParbenchProcess parbench({"--strategies=single,ddp", "--models=tinycnn", "--batch=2", "--image=16", "--warmup=1",
                            "--repetitions=2", "--iterations=1000", "--allreduce=off", "--dist-timeout=10",
                            "--benchmark_out=" + out, "--benchmark_out_format=json"},
                           {{"CUDA_VISIBLE_DEVICES", ""},
                            {"OMP_NUM_THREADS", "1"},
                            {"TMPDIR", tmp.path()},
                            {"PARBENCH_INTERRUPT_TEST", marker}});
  // The ddp case has started (its progress line comes once single's results are reported) and
  // its ranks are up.
  ASSERT_TRUE(parbench.wait_for_err("[2/2 ", kDeadline)) << parbench.err();
  const auto rank = parbench.wait_for_rank(1, kDeadline);
  ASSERT_TRUE(rank) << parbench.err();
  std::this_thread::sleep_for(std::chrono::seconds(2));  // into the case
  ASSERT_EQ(kill(interrupt.to_group ? -parbench.pid() : parbench.pid(), interrupt.signal_number), 0);
  const double sent_at = parbench.seconds();
  const auto run = parbench.wait(kDeadline);
  std::printf("fault: %s: exit status %d, %.1f s after the signal\n", interrupt.name, run.exit_code,
              run.seconds - sent_at);

  EXPECT_EQ(run.exit_code, interrupt.exit_code) << run.err;
  EXPECT_LT(run.seconds - sent_at, kStopWithin) << run.err;
  EXPECT_NE(run.err.find(std::string("parbench: interrupted by ") + interrupt.signal_name +
                         ": wrote the 1 cases completed to " + out),
            std::string::npos)
      << "parbench's own lines: " << own_lines(run.err) << "\nall of stderr:\n" << run.err;
  EXPECT_EQ(directory_entries(dir.path()), std::vector<std::string>{"run.json"}) << "a .partial or .lock file was left behind";
  EXPECT_TRUE(directory_entries(tmp.path()).empty()) << "a rank's results directory was left behind";
  EXPECT_TRUE(live_processes_with("PARBENCH_INTERRUPT_TEST", marker).empty()) << "a rank outlived the run";

  const auto json = read_json(out);
  EXPECT_EQ(json.at("context").at("interrupted"), interrupt.signal_name);
  int single = 0;
  for (const auto& benchmark : json.at("benchmarks")) {
    const auto name = benchmark.at("run_name").get<std::string>();
    EXPECT_EQ(name.rfind("train/single/", 0), 0u) << "a case that did not complete was written: " << name;
    EXPECT_FALSE(benchmark.value("error_occurred", false)) << name;
    if (benchmark.at("run_type") == "iteration") ++single;
  }
  EXPECT_EQ(single, 2) << "single's 2 repetitions";
}

INSTANTIATE_TEST_SUITE_P(Signals, InterruptTest,
                         testing::Values(Interrupt{"SIGINT", "SIGINT", SIGINT, false, 130},
                                         Interrupt{"SIGINT_to_the_group", "SIGINT", SIGINT, true, 130},
                                         Interrupt{"SIGTERM", "SIGTERM", SIGTERM, false, 143},
                                         Interrupt{"SIGHUP_to_the_group", "SIGHUP", SIGHUP, true, 129}),
                         [](const testing::TestParamInfo<Interrupt>& info) { return std::string(info.param.name); });

// Interrupted before any case has completed: still a whole JSON file, with no case in it.
TEST(Interrupt, BeforeAnyCaseCompletesTheFileHasNoCases) {
  TemporaryDirectory dir("parbench-interrupt-test");
  const auto out = dir.file("run.json");
  const auto marker = std::to_string(getpid()) + "early";
  ParbenchProcess parbench({"--strategies=ddp", "--models=tinycnn", "--batch=2", "--image=16", "--warmup=1",
                            "--repetitions=1", "--iterations=1000", "--allreduce=off", "--dist-timeout=10",
                            "--benchmark_out=" + out, "--benchmark_out_format=json"},
                           {{"CUDA_VISIBLE_DEVICES", ""}, {"OMP_NUM_THREADS", "1"}, {"PARBENCH_INTERRUPT_TEST", marker}});
  ASSERT_TRUE(parbench.wait_for_rank(0, kDeadline)) << parbench.err();
  ASSERT_EQ(kill(parbench.pid(), SIGTERM), 0);
  const auto run = parbench.wait(kDeadline);
  EXPECT_EQ(run.exit_code, 143) << run.err;
  const auto json = read_json(out);
  EXPECT_EQ(json.at("context").at("interrupted"), "SIGTERM");
  EXPECT_TRUE(json.at("benchmarks").empty());
  EXPECT_EQ(directory_entries(dir.path()), std::vector<std::string>{"run.json"});
  EXPECT_TRUE(live_processes_with("PARBENCH_INTERRUPT_TEST", marker).empty());
}

}  // namespace
}  // namespace parbench
