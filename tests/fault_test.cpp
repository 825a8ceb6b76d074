// A failed case fails the run (docs/RUNNING.md, "Exit status"), on the CPU with the store backend:
// a rank killed or stopped under parbench's launcher, a rank that never joins or dies under an
// external launcher's variables, a case that throws, an unwritable --benchmark_out. Each test
// checks the exit status, the time to exit, a JSON that parses and records the failure, the
// closing summary line, and that no rank process outlives the run. The times measured are
// printed ("fault: ...") for docs/DISTRIBUTED.md.
#include "benchmarks/launch/temporary_directory.h"
#include "strategies/distributed/world.h"
#include "tests/parbench_process.h"

#include <gtest/gtest.h>

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>

namespace parbench {
namespace {

constexpr double kTimeout = 3;  // --dist-timeout: how long ranks wait for each other
constexpr double kSlack = 15;   // process start-up and the case's own work on a loaded 2-core machine
constexpr double kDeadline = 120;  // the test kills parbench after this: a hang fails, it does not block CI

const std::string kDdpCase = "train/ddp/tinycnn/batch:2/image:16/precision:fp32/data:device/gpus:2/bucket_mib:25";

// A ddp run on 2 CPU ranks whose timed loop is long enough to be interrupted: 2 x 1000 iterations
// of store barriers and all-reduces (about 15 s on an idle 2-core machine, which ran 2 x 200 in
// under the 2 s a test waits before it interrupts), after start-up and set-up.
std::vector<std::string> ddp_arguments(const std::string& out, const std::string& overlaps) {
  return {"--strategies=ddp", "--models=tinycnn", "--batch=2", "--image=16", "--warmup=1", "--repetitions=2",
          "--iterations=1000", "--allreduce=off", "--overlap=" + overlaps, "--dist-timeout=3",
          "--benchmark_out=" + out, "--benchmark_out_format=json"};
}

// The variables every parbench process of a test gets: no GPU (the ranks take the CPU path
// with the store backend), one intra-op thread (tinycnn at batch 2 gains nothing from more,
// and on a 16-core machine running tests in parallel 16 spinning threads per rank slowed a
// case past the deadline), and a marker its ranks inherit, to find any that outlive the run.
std::map<std::string, std::string> test_environment(std::map<std::string, std::string> more = {}) {
  more["CUDA_VISIBLE_DEVICES"] = "";
  more["OMP_NUM_THREADS"] = "1";
  more["PARBENCH_FAULT_TEST"] = std::to_string(getpid());
  return more;
}

void expect_no_process_left() {
  EXPECT_TRUE(live_processes_with("PARBENCH_FAULT_TEST", std::to_string(getpid())).empty());
}

std::string last_line(const std::string& text) {
  const auto end = text.find_last_not_of('\n');
  if (end == std::string::npos) return "";
  const auto start = text.rfind('\n', end);
  return text.substr(start == std::string::npos ? 0 : start + 1, end - (start == std::string::npos ? 0 : start + 1) + 1);
}

// Each case of a parbench JSON: the error message of its repetitions ("" if it ran) and how
// many repetitions it reported.
std::map<std::string, std::pair<std::string, int>> case_outcomes(const nlohmann::json& json) {
  std::map<std::string, std::pair<std::string, int>> outcomes;
  for (const auto& benchmark : json.at("benchmarks")) {
    if (benchmark.at("run_type") != "iteration") continue;
    auto name = benchmark.at("run_name").get<std::string>();
    name = name.substr(0, name.find("/iterations:"));
    auto& outcome = outcomes[name];
    outcome.first = benchmark.value("error_message", "");
    ++outcome.second;
  }
  return outcomes;
}

void report(const char* fault, double seconds, const ProcessRun& run) {
  std::printf("fault: %s: exit status %d, %.1f s; %s\n", fault, run.exit_code, seconds, last_line(run.err).c_str());
}

// A run of two distributed cases whose rank 1 is killed (SIGKILL) two seconds into the first:
// checks that the run goes on to the second case soon after, and exits 1.
ProcessRun kill_rank_one_in_the_first_case(const std::vector<std::string>& arguments, const char* fault) {
  ParbenchProcess parbench(arguments, test_environment());
  const auto rank = parbench.wait_for_rank(1, kDeadline);
  if (!rank) {
    ADD_FAILURE() << "rank 1 never started: " << parbench.err();
    return parbench.wait(kDeadline);
  }
  // Into the case: past start-up, in set-up or the timed loop.
  std::this_thread::sleep_for(std::chrono::seconds(2));
  EXPECT_EQ(kill(*rank, SIGKILL), 0);
  const double killed_at = parbench.seconds();
  const auto next_case = parbench.wait_for_err("[2/2", kDeadline);
  auto run = parbench.wait(kDeadline);
  report(fault, next_case.value_or(run.seconds) - killed_at, run);
  EXPECT_EQ(run.exit_code, 1) << run.err;
  EXPECT_TRUE(next_case) << run.err;
  if (next_case) EXPECT_LT(*next_case - killed_at, kSlack) << "the launcher noticed the kill this late";
  return run;
}

// ---- parbench's own launcher ------------------------------------------------------------------

TEST(Fault, ARankKilledMidCaseFailsTheCaseTheNextRunsAndTheRunExits1) {
  TemporaryDirectory dir("parbench-fault-test");
  const auto out = dir.file("run.json");
  const auto run =
      kill_rank_one_in_the_first_case(ddp_arguments(out, "on,off"), "built-in launcher, rank 1 killed (SIGKILL)");
  const auto outcomes = case_outcomes(read_json(out));
  const auto killed = outcomes.at(kDdpCase + "/overlap:on/scaling:weak");
  EXPECT_NE(killed.first.find("rank 1 was killed by signal 9"), std::string::npos) << killed.first;
  EXPECT_EQ(killed.second, 2);
  EXPECT_EQ(outcomes.at(kDdpCase + "/overlap:off/scaling:weak"), std::make_pair(std::string(), 2)) << run.err;
  EXPECT_EQ(last_line(run.err).rfind("parbench: 1 ran, 0 skipped, 1 failed: " + kDdpCase +
                                         "/overlap:on/scaling:weak: rank 1 was killed by signal 9",
                                     0),
            0u)
      << run.err;
  EXPECT_FALSE(access((out + ".partial").c_str(), F_OK) == 0);
  expect_no_process_left();
}

// The same for zero (stage 3 first, then stage 2): its ranks fail and recover as ddp's do.
TEST(Fault, AZeroRankKilledMidCaseFailsTheCaseTheNextRunsAndTheRunExits1) {
  TemporaryDirectory dir("parbench-fault-test");
  const auto out = dir.file("run.json");
  const auto run = kill_rank_one_in_the_first_case(
      {"--strategies=zero", "--zero-stages=3,2", "--models=tinycnn", "--batch=2", "--image=16", "--warmup=1",
       "--repetitions=2", "--iterations=1000", "--allreduce=off", "--dist-timeout=3", "--benchmark_out=" + out,
       "--benchmark_out_format=json"},
      "built-in launcher, zero rank 1 killed (SIGKILL)");
  const std::string zero_case = "train/zero/tinycnn/batch:2/image:16/precision:fp32/data:device/gpus:2/stage:";
  const auto outcomes = case_outcomes(read_json(out));
  const auto killed = outcomes.at(zero_case + "3");
  EXPECT_NE(killed.first.find("rank 1 was killed by signal 9"), std::string::npos) << killed.first;
  EXPECT_EQ(outcomes.at(zero_case + "2"), std::make_pair(std::string(), 2)) << run.err;
  expect_no_process_left();
}

// On a mesh the failing rank is named with its coordinates, so that a user knows which tp group
// and which replica lost it.
TEST(Fault, AMeshRankKilledIsNamedWithItsCoordinates) {
  TemporaryDirectory dir("parbench-fault-test");
  const auto out = dir.file("run.json");
  ParbenchProcess parbench({"--strategies=zero", "--zero-stages=2", "--models=tinygpt", "--batch=2", "--seq=16",
                            "--mesh=dp2.tp2", "--gpus=4", "--warmup=1", "--repetitions=1", "--iterations=100000",
                            "--allreduce=off", "--dist-timeout=5", "--benchmark_out=" + out,
                            "--benchmark_out_format=json"},
                           test_environment());
  const auto rank = parbench.wait_for_rank(1, kDeadline);
  ASSERT_TRUE(rank) << parbench.err();
  std::this_thread::sleep_for(std::chrono::seconds(2));
  EXPECT_EQ(kill(*rank, SIGKILL), 0);
  const auto run = parbench.wait(kDeadline);
  EXPECT_EQ(run.exit_code, 1) << run.err;
  EXPECT_NE(last_line(run.err).find("rank 1 (dp=0,tp=1) was killed by signal 9"), std::string::npos) << run.err;
  expect_no_process_left();
}

TEST(Fault, ARankStoppedFailsTheCaseWithinTheTimeoutAndTheRunExits1) {
  TemporaryDirectory dir("parbench-fault-test");
  const auto out = dir.file("run.json");
  ParbenchProcess parbench(ddp_arguments(out, "on"), test_environment());
  const auto rank = parbench.wait_for_rank(1, kDeadline);
  ASSERT_TRUE(rank) << parbench.err();
  std::this_thread::sleep_for(std::chrono::seconds(2));
  ASSERT_EQ(kill(*rank, SIGSTOP), 0);
  const double stopped_at = parbench.seconds();
  const auto run = parbench.wait(kDeadline);
  report("built-in launcher, rank 1 stopped (SIGSTOP)", run.seconds - stopped_at, run);

  EXPECT_EQ(run.exit_code, 1) << run.err;
  // A wait for the stopped rank times out after kTimeout; the watchdog would end a rank stuck
  // where no wait times out after kTimeout + 5 s.
  EXPECT_LT(run.seconds - stopped_at, kTimeout + 5 + kSlack);
  const auto outcomes = case_outcomes(read_json(out));
  const auto stopped = outcomes.at(kDdpCase + "/overlap:on/scaling:weak").first;
  EXPECT_NE(stopped.find("rank 0: "), std::string::npos) << stopped;
  EXPECT_NE(stopped.find("rank 1"), std::string::npos) << stopped;
  EXPECT_NE(last_line(run.err).find("0 ran, 0 skipped, 1 failed: " + kDdpCase), std::string::npos) << run.err;
  expect_no_process_left();
}

// The launcher hosts the ranks' rendezvous store: stopped (Ctrl-Z stops it and not the ranks,
// which have a process group of their own) for longer than the ranks wait, it is named as the
// cause, not a rank that was waiting for it.
TEST(Fault, AStoppedStoreHostIsBlamedNotTheRanks) {
  TemporaryDirectory dir("parbench-fault-test");
  const auto out = dir.file("run.json");
  ParbenchProcess parbench(ddp_arguments(out, "on"), test_environment());
  ASSERT_TRUE(parbench.wait_for_rank(1, kDeadline)) << parbench.err();
  std::this_thread::sleep_for(std::chrono::seconds(2));
  ASSERT_EQ(kill(parbench.pid(), SIGSTOP), 0);
  // Past the ranks' timeout and their watchdog's grace (3 + 5 s), and on.
  std::this_thread::sleep_for(std::chrono::seconds(static_cast<int>(kTimeout) + 5 + 7));
  ASSERT_EQ(kill(parbench.pid(), SIGCONT), 0);
  const auto run = parbench.wait(kDeadline);
  report("built-in launcher, the launcher (the store's host) stopped (SIGSTOP)", run.seconds, run);

  EXPECT_EQ(run.exit_code, 1) << run.err;
  const auto message = case_outcomes(read_json(out)).at(kDdpCase + "/overlap:on/scaling:weak").first;
  EXPECT_NE(message.find("the rendezvous store at 127.0.0.1:"), std::string::npos) << message;
  EXPECT_NE(message.find("(hosted by the launcher)"), std::string::npos) << message;
  EXPECT_EQ(message.find("did not reach"), std::string::npos) << message;
  EXPECT_EQ(message.find("behind: rank"), std::string::npos) << message;
  expect_no_process_left();
}

// ---- An external launcher's ranks ----------------------------------------------------------------

struct LauncherVariables {
  std::string launcher;
  std::map<std::string, std::string> (*rank_zero)(int port);  // rank 0 of 2 on this node
};

void PrintTo(const LauncherVariables& variables, std::ostream* os) { *os << variables.launcher; }

class FaultUnderAnExternalLauncher : public ::testing::TestWithParam<LauncherVariables> {};

TEST_P(FaultUnderAnExternalLauncher, ARankThatNeverJoinsFailsTheCaseAndRankZeroExits1) {
  TemporaryDirectory dir("parbench-fault-test");
  const auto out = dir.file("run.json");
  auto arguments = ddp_arguments(out, "on");
  const auto runs = run_ranks({test_environment(GetParam().rank_zero(free_port()))}, arguments, kDeadline);
  const auto& run = runs.front();
  report(("external launcher (" + GetParam().launcher + " variables), rank 1 never joins").c_str(), run.seconds, run);

  EXPECT_EQ(run.exit_code, 1) << run.err;
  EXPECT_LT(run.seconds, kTimeout + kSlack);
  const auto outcomes = case_outcomes(read_json(out));
  const auto message = outcomes.at(kDdpCase + "/overlap:on/scaling:weak").first;
  EXPECT_NE(message.find("rank 0: rank 1 did not join the rendezvous"), std::string::npos) << message;
  EXPECT_NE(last_line(run.err).find("0 ran, 0 skipped, 1 failed: " + kDdpCase), std::string::npos) << run.err;
  expect_no_process_left();
}

INSTANTIATE_TEST_SUITE_P(
    Launchers, FaultUnderAnExternalLauncher,
    ::testing::Values(
        LauncherVariables{"torchrun", [](int port) { return torchrun_environment(0, 2, port); }},
        LauncherVariables{"mpirun",
                          [](int port) {
                            return std::map<std::string, std::string>{{"OMPI_COMM_WORLD_RANK", "0"},
                                                                      {"OMPI_COMM_WORLD_SIZE", "2"},
                                                                      {"OMPI_COMM_WORLD_LOCAL_RANK", "0"},
                                                                      {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"},
                                                                      {"MASTER_PORT", std::to_string(port)}};
                          }},
        LauncherVariables{"srun",
                          [](int port) {
                            return std::map<std::string, std::string>{{"SLURM_PROCID", "0"},
                                                                      {"SLURM_STEP_NUM_TASKS", "2"},
                                                                      {"SLURM_LOCALID", "0"},
                                                                      {"SLURM_STEP_NUM_NODES", "1"},
                                                                      {"MASTER_PORT", std::to_string(port)}};
                          }}),
    [](const auto& info) { return info.param.launcher; });

TEST(Fault, UnderAnExternalLauncherARankWhosePeerIsKilledExits1) {
  TemporaryDirectory dir("parbench-fault-test");
  const auto out = dir.file("run.json");
  const int port = free_port();
  ParbenchProcess rank0(ddp_arguments(out, "on"), test_environment(torchrun_environment(0, 2, port)));
  ParbenchProcess rank1(ddp_arguments(out, "on"), test_environment(torchrun_environment(1, 2, port)));
  // Into the case: rank 0 has started it.
  ASSERT_TRUE(rank0.wait_for_err("[1/1", kDeadline)) << rank0.err();
  std::this_thread::sleep_for(std::chrono::seconds(2));
  ASSERT_EQ(kill(rank1.pid(), SIGKILL), 0);
  const double killed_at = rank0.seconds();
  const auto run = rank0.wait(kDeadline);
  rank1.wait(kDeadline);
  report("external launcher (torchrun variables), rank 1 killed (SIGKILL)", run.seconds - killed_at, run);

  EXPECT_EQ(run.exit_code, 1) << run.err;
  EXPECT_LT(run.seconds - killed_at, kTimeout + 5 + kSlack);
  const auto message = case_outcomes(read_json(out)).at(kDdpCase + "/overlap:on/scaling:weak").first;
  EXPECT_NE(message.find("rank 0: "), std::string::npos) << message;
  EXPECT_NE(last_line(run.err).find("0 ran, 0 skipped, 1 failed: " + kDdpCase), std::string::npos) << run.err;
  expect_no_process_left();
}

// Ranks of an external launcher started with different command lines would run different cases
// into mismatched collectives: the case fails at the rendezvous, naming the difference.
TEST(Fault, UnderAnExternalLauncherRanksStartedWithDifferentArgumentsAreNamedAsTheCause) {
  TemporaryDirectory dir("parbench-fault-test");
  const auto out = dir.file("run.json");
  const int port = free_port();
  auto other = ddp_arguments(dir.file("rank1.json"), "on");
  std::replace(other.begin(), other.end(), std::string("--batch=2"), std::string("--batch=3"));
  ParbenchProcess rank0(ddp_arguments(out, "on"), test_environment(torchrun_environment(0, 2, port)));
  ParbenchProcess rank1(other, test_environment(torchrun_environment(1, 2, port)));
  const auto run = rank0.wait(kDeadline);
  const auto run1 = rank1.wait(kDeadline);
  report("external launcher (torchrun variables), rank 1 with --batch=3", run.seconds, run);

  EXPECT_EQ(run.exit_code, 1) << run.err;
  EXPECT_NE(run1.exit_code, 0) << run1.err;
  EXPECT_LT(run.seconds, kTimeout + kSlack) << "not a timeout";
  const auto message = case_outcomes(read_json(out)).at(kDdpCase + "/overlap:on/scaling:weak").first;
  EXPECT_NE(message.find("rank 1 was started with other arguments: --batch=3 where rank 0 has --batch=2 "
                         "(every rank needs the same command line)"),
            std::string::npos)
      << message;
  EXPECT_EQ(arguments_difference("--a=1 --benchmark_out=x.json", "--a=1 --benchmark_out=y.json", 0), "");
  EXPECT_EQ(arguments_difference("--a=1", "--a=1 --b=2", 0), "no argument where rank 0 has --b=2");
  expect_no_process_left();
}

// A rank of an external launcher that exits 0 mid-case (its exit handlers run, as on a return
// from main) leaves its peers waiting, and only the launcher sees its status: the rank records its
// departure in the store, and rank 0 names it within seconds, not after --dist-timeout as a hang.
TEST(Fault, UnderAnExternalLauncherARankThatExitsCleanlyMidCaseIsNamedAtOnce) {
  TemporaryDirectory dir("parbench-fault-test");
  const auto out = dir.file("run.json");
  const int port = free_port();
  constexpr double kLongTimeout = 60;
  auto arguments = ddp_arguments(out, "on");
  std::replace(arguments.begin(), arguments.end(), std::string("--dist-timeout=3"), std::string("--dist-timeout=60"));
  const auto rank_environment = [port](int rank) {
    auto environment = torchrun_environment(rank, 2, port);
    environment["PARBENCH_TEST_QUIT_RANK"] = "1";  // rank 1 exits 0 once it has joined, in the case
    return test_environment(environment);
  };
  ParbenchProcess rank0(arguments, rank_environment(0));
  ParbenchProcess rank1(arguments, rank_environment(1));
  const auto run = rank0.wait(kDeadline);
  const auto run1 = rank1.wait(kDeadline);
  report("external launcher (torchrun variables), rank 1 exits 0 in the case", run.seconds, run);

  EXPECT_EQ(run1.exit_code, 0) << run1.err;
  EXPECT_EQ(run.exit_code, 1) << run.err;
  EXPECT_LT(run.seconds, kLongTimeout / 2) << "not the timeout";
  const auto message = case_outcomes(read_json(out)).at(kDdpCase + "/overlap:on/scaling:weak").first;
  EXPECT_NE(message.find("rank 0: rank 1 exited early (status 0) before the case finished"), std::string::npos)
      << message;
  EXPECT_EQ(message.find("did not"), std::string::npos) << message;
  EXPECT_EQ(message.find("no progress"), std::string::npos) << message;
  EXPECT_NE(last_line(run.err).find("0 ran, 0 skipped, 1 failed: " + kDdpCase), std::string::npos) << run.err;
  expect_no_process_left();
}

// ---- Cases in parbench's own process ---------------------------------------------------------------

TEST(Fault, ACaseThatThrowsFailsWhileTheNextCaseRunsAndIsRecorded) {
  TemporaryDirectory dir("parbench-fault-test");
  const auto out = dir.file("run.json");
  const std::string single = "train/single/tinycnn/batch:4/image:16/precision:fp32/data:device";
  const std::string model_parallel = "train/model_parallel/tinycnn/batch:4/image:16/precision:fp32/data:device/gpus:2";
  ParbenchProcess parbench({"--strategies=single,model_parallel", "--models=tinycnn", "--batch=4", "--image=16",
                            "--warmup=1", "--repetitions=3", "--iterations=2", "--benchmark_out=" + out,
                            "--benchmark_out_format=json"},
                           test_environment({{"PARBENCH_TEST_FAIL_CASE", single}}));
  const auto run = parbench.wait(kDeadline);
  report("a case that throws (PARBENCH_TEST_FAIL_CASE)", run.seconds, run);

  EXPECT_EQ(run.exit_code, 1) << run.err;
  EXPECT_LT(run.seconds, kSlack);
  const auto json = read_json(out);
  const auto outcomes = case_outcomes(json);
  EXPECT_EQ(outcomes.at(single), std::make_pair(std::string("failing on purpose (PARBENCH_TEST_FAIL_CASE)"), 3));
  EXPECT_EQ(outcomes.at(model_parallel), std::make_pair(std::string(), 3)) << run.err;
  for (const auto& benchmark : json.at("benchmarks")) {
    if (benchmark.at("run_name").get<std::string>().rfind(model_parallel, 0) == 0) {
      EXPECT_NE(benchmark.at("label").get<std::string>().find("devices=cpu"), std::string::npos);
    }
  }
  EXPECT_EQ(last_line(run.err), "parbench: 1 ran, 0 skipped, 1 failed: " + single +
                                    ": failing on purpose (PARBENCH_TEST_FAIL_CASE)");
}

struct UnwritableOutput {
  std::string what;
  std::string (*make)(const TemporaryDirectory& dir);  // the --benchmark_out path, prepared
  std::string expected;                                // a phrase of the one-line error
  size_t entries_made = 0;                             // what `make` put in the test's directory
};

void PrintTo(const UnwritableOutput& output, std::ostream* os) { *os << output.what; }

class FaultWithAnUnwritableOutput : public ::testing::TestWithParam<UnwritableOutput> {};

TEST_P(FaultWithAnUnwritableOutput, IsRejectedUpFrontWithNoFileLeft) {
  TemporaryDirectory dir("parbench-fault-test");
  const auto out = GetParam().make(dir);
  ParbenchProcess parbench({"--strategies=single", "--models=tinycnn", "--batch=4", "--image=16",
                            "--benchmark_out=" + out, "--benchmark_out_format=json"},
                           test_environment());
  const auto run = parbench.wait(kDeadline);
  report(("unwritable --benchmark_out: " + GetParam().what).c_str(), run.seconds, run);

  EXPECT_EQ(run.exit_code, 2) << run.err;
  EXPECT_EQ(std::count(run.err.begin(), run.err.end(), '\n'), 1) << run.err;
  EXPECT_EQ(run.err.rfind("parbench: cannot write --benchmark_out=" + out + ": ", 0), 0u) << run.err;
  EXPECT_NE(run.err.find(GetParam().expected), std::string::npos) << run.err;
  EXPECT_TRUE(run.out.empty()) << run.out;
  // Nothing new in the directory: no output, no partial output.
  struct stat info {};
  EXPECT_FALSE(stat(out.c_str(), &info) == 0 && S_ISREG(info.st_mode));
  EXPECT_EQ(directory_entries(dir.path()).size(), GetParam().entries_made) << "a partial or lock file was left";
}

INSTANTIATE_TEST_SUITE_P(
    Outputs, FaultWithAnUnwritableOutput,
    ::testing::Values(
        UnwritableOutput{"a missing directory",
                         [](const TemporaryDirectory& dir) { return dir.file("missing/run.json"); },
                         "No such file or directory"},
        UnwritableOutput{"a directory",
                         [](const TemporaryDirectory& dir) {
                           mkdir(dir.file("run.json").c_str(), 0755);
                           return dir.file("run.json");
                         },
                         "is a directory", 1},
        UnwritableOutput{"a directory where the lock file goes",
                         [](const TemporaryDirectory& dir) {
                           mkdir(dir.file("run.json.lock").c_str(), 0755);
                           return dir.file("run.json");
                         },
                         "run.json.lock': Is a directory", 1}),
    [](const auto& info) { return "case" + std::to_string(info.index); });

}  // namespace
}  // namespace parbench
