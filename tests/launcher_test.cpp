// Starting ranks on the CPU, through parbench's launcher and as an external launcher would:
// a rank that dies, hangs or never joins ends the run within the timeout with one line naming
// it, no process is left behind, and bad launcher variables get clear errors.
#include "benchmarks/launch/launcher.h"
#include "benchmarks/launch/rank_failure.h"
#include "benchmarks/launch/rank_processes.h"
#include "benchmarks/run/allreduce.h"
#include "benchmarks/run/rank_worker.h"

#include "benchmarks/launch/temporary_directory.h"
#include "tests/launched_case.h"
#include "tests/parbench_process.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <sys/wait.h>

#include <chrono>
#include <cstdlib>

namespace parbench {
namespace {

using Clock = std::chrono::steady_clock;

constexpr double kShortTimeout = 3;  // seconds: how long ranks wait for each other in failure tests
constexpr double kSlack = 10;        // seconds on top of it: process start-up on a loaded 2-core machine
const std::vector<std::string> kSmallDdp = {"--strategies=ddp", "--models=tinycnn", "--batch=2",
                                            "--image=16",       "--warmup=1",       "--repetitions=2",
                                            "--iterations=2",   "--allreduce=off"};
LaunchedCase small_ddp_case(int ranks) { return only_train_case(kSmallDdp, ranks); }
LaunchedCase launched(const AllreduceCase& allreduce) { return {allreduce.name, allreduce_fields(allreduce).dump()}; }

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

void expect_no_child_processes() {
  errno = 0;
  EXPECT_EQ(waitpid(-1, nullptr, WNOHANG), -1);
  EXPECT_EQ(errno, ECHILD);
}

std::vector<std::string> with(std::vector<std::string> arguments, const std::vector<std::string>& more) {
  arguments.insert(arguments.end(), more.begin(), more.end());
  return arguments;
}

// ---- parbench's launcher ---------------------------------------------------------------------

// The one-line failure of the small ddp case with a test hook set, and how long it took.
std::pair<std::string, double> small_case_failure(const std::map<std::string, std::string>& hooks, int ranks = 2,
                                                  double timeout_s = kShortTimeout) {
  const auto start = Clock::now();
  try {
    launch_case(PARBENCH_BINARY, kSmallDdp, small_ddp_case(ranks), ranks, timeout_s, hooks);
  } catch (const std::runtime_error& error) {
    return {error.what(), seconds_since(start)};
  }
  return {"", seconds_since(start)};
}

// ---- Which rank's failure is the cause --------------------------------------------------------

// The launching process's holding per GPU travels to the ranks as "0:63.50,1:0.00".
TEST(RankFailure, TheLaunchersHoldingGoesToTheRanksAsText) {
  const std::map<int, double> holding = {{0, 63.5}, {1, 0.0}, {3, 0.126}};
  EXPECT_EQ(launcher_gpu_text(holding), "0:63.50,1:0.00,3:0.13");
  EXPECT_EQ(launcher_gpu_from_text("0:63.50,1:0.00,3:0.13"), (std::map<int, double>{{0, 63.5}, {1, 0.0}, {3, 0.13}}));
  EXPECT_EQ(launcher_gpu_from_text("0:1.5,x:2,2:,3:abc,-1:2,4:-1,5"), (std::map<int, double>{{0, 1.5}}));
  EXPECT_TRUE(launcher_gpu_from_text("").empty());
}

// A rank out of memory says so, on which GPU, with what the launching process holds there.
TEST(RankFailure, ARankOutOfMemorySaysSoWithTheLaunchersHolding) {
  const std::string cuda = "CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 139.81 GiB";
  EXPECT_TRUE(is_out_of_memory(cuda));
  EXPECT_TRUE(is_out_of_memory("NCCL error: unhandled cuda error, Cuda failure 'out of memory'"));
  EXPECT_FALSE(is_out_of_memory("no progress for 65 s at warm-up step 1"));
  const auto reason = out_of_memory_reason(0, 63.5, cuda);
  EXPECT_EQ(reason, "on GPU 0: out of memory, the launching process holds 63.50 GiB there (" + cuda + ")");
  EXPECT_EQ(describe_rank_failure({0, reason}),
            "rank 0 on GPU 0: out of memory, the launching process holds 63.50 GiB there (" + cuda + ")");
  EXPECT_EQ(out_of_memory_reason(2, std::nullopt, "x out of memory"), "on GPU 2: out of memory (x out of memory)");
  EXPECT_EQ(describe_rank_failure({1, "no progress for 65 s at warm-up step 1"}),
            "rank 1: no progress for 65 s at warm-up step 1");
  EXPECT_EQ(describe_rank_failure({1, "was killed by signal 9 (Killed) (rank 0 at set-up)", true}),
            "rank 1 was killed by signal 9 (Killed) (rank 0 at set-up)");
}

// The rank that ran out of memory is reported before the ones that then stalled waiting for it or
// lost their connection to it, whichever failed first; a rank's own failure before those.
TEST(RankFailure, TheCauseIsReportedBeforeTheRanksThatWaitedForIt) {
  const RankFailure stalled{1, "no progress for 65 s at warm-up step 1"};
  const RankFailure lost{2, "Connection reset by peer"};
  const RankFailure out_of_memory{0, out_of_memory_reason(0, 63.5, "CUDA out of memory. Tried to allocate 2.00 GiB")};
  const RankFailure own{3, "failing on purpose (PARBENCH_TEST_FAIL_CASE)"};
  const RankFailure killed{3, "was killed by signal 9 (Killed) (rank 0 at set-up)", true};
  EXPECT_EQ(root_cause({stalled, lost, out_of_memory}).rank, 0);
  EXPECT_EQ(root_cause({stalled, own, out_of_memory}).rank, 0);
  EXPECT_EQ(root_cause({stalled, lost, own}).rank, 3);
  EXPECT_EQ(root_cause({lost, killed}).rank, 3);
  EXPECT_EQ(root_cause({stalled, lost}).rank, 1);  // none is a cause: the first
  EXPECT_FALSE(is_root_cause(stalled));
  EXPECT_FALSE(is_root_cause(lost));
  EXPECT_TRUE(is_root_cause(out_of_memory));
  EXPECT_TRUE(is_root_cause(killed));
}

// Where the ranks only stalled, a launching process holding 1 GiB or more on a GPU is named.
TEST(RankFailure, AStallNamesWhatTheLaunchingProcessHolds) {
  EXPECT_EQ(launcher_holding_note({{0, 63.5}, {1, 0.4}, {2, 1.0}}),
            "; the launching process holds 63.50 GiB on GPU 0, 1.00 GiB on GPU 2");
  EXPECT_EQ(launcher_holding_note({{0, 0.99}}), "");
  EXPECT_EQ(launcher_holding_note({}), "");
}

TEST(Launcher, RunsACaseAndReturnsRankZerosCombinedTimes) {
  const GpusHiddenFromRanks gpus_hidden;
  const auto run = launch_case(PARBENCH_BINARY, kSmallDdp, small_ddp_case(2), 2, /*timeout_s=*/30);
  EXPECT_EQ(run.world_size, 2);
  EXPECT_EQ(run.facts.at("backend"), "store");
  EXPECT_EQ(run.facts.at("scaling"), "weak");
  EXPECT_GT(run.params, 0);
  ASSERT_EQ(run.repetitions.size(), 2u);
  for (const auto& repetition : run.repetitions) {
    ASSERT_EQ(repetition.seconds.size(), 2u);
    for (double seconds : repetition.seconds) EXPECT_GT(seconds, 0);
    EXPECT_GE(repetition.rank_spread, 0);
  }
  EXPECT_TRUE(run.peak_bytes.empty());  // CUDA only
  expect_no_child_processes();
}

TEST(Launcher, ARankThatDiesEndsTheRunAndIsNamed) {
  const GpusHiddenFromRanks gpus_hidden;
  const auto [failure, seconds] = small_case_failure({{"PARBENCH_TEST_FAIL_RANK", "1"}});
  EXPECT_NE(failure.find("rank 1 exited with code 3"), std::string::npos) << failure;
  EXPECT_EQ(failure.find('\n'), std::string::npos) << failure;
  EXPECT_LT(seconds, kShortTimeout + kSlack);
  expect_no_child_processes();
}

// A rank that exits 0 before its case leaves the others waiting for it: the case fails at once,
// naming it, instead of waiting out --dist-timeout and calling it a hang.
TEST(Launcher, ARankThatExitsCleanlyBeforeHandingInItsResultsIsNamedAtOnce) {
  const GpusHiddenFromRanks gpus_hidden;
  constexpr double kLongTimeout = 60;
  const auto [failure, seconds] = small_case_failure({{"PARBENCH_TEST_QUIT_RANK", "1"}}, 2, kLongTimeout);
  EXPECT_NE(failure.find("rank 1 exited with code 0 before handing in its results"), std::string::npos) << failure;
  EXPECT_EQ(failure.find("did not reach"), std::string::npos) << failure;
  EXPECT_EQ(failure.find('\n'), std::string::npos) << failure;
  EXPECT_LT(seconds, kLongTimeout / 2);  // not the timeout
  expect_no_child_processes();
}

TEST(Launcher, ARankThatHangsIsNamedWithinTheTimeout) {
  const GpusHiddenFromRanks gpus_hidden;
  const auto [failure, seconds] = small_case_failure({{"PARBENCH_TEST_HANG_RANK", "1"}});
  EXPECT_NE(failure.find("rank 0: rank 1 did not reach"), std::string::npos) << failure;
  EXPECT_NE(failure.find("within 3 s"), std::string::npos) << failure;
  EXPECT_LT(seconds, kShortTimeout + kSlack);
  expect_no_child_processes();
}

TEST(Launcher, ARankStuckWhereNoWaitTimesOutIsEndedByItsWatchdog) {
  const GpusHiddenFromRanks gpus_hidden;
  // One rank, so that no other rank's wait times out first, and no rank to wait for in 1 s.
  const auto [failure, seconds] = small_case_failure({{"PARBENCH_TEST_HANG_RANK", "0"}}, /*ranks=*/1, /*timeout_s=*/1);
  EXPECT_NE(failure.find("rank 0: no progress for"), std::string::npos) << failure;
  EXPECT_NE(failure.find("(rank 0 at a hang on purpose"), std::string::npos) << failure;
  EXPECT_LT(seconds, 1 + 5 + kSlack);  // the watchdog's grace is 5 s
  expect_no_child_processes();
}

TEST(Launcher, ARankThatNeverJoinsIsNamedWithinTheTimeout) {
  const GpusHiddenFromRanks gpus_hidden;
  const auto [failure, seconds] = small_case_failure({{"PARBENCH_TEST_ABSENT_RANK", "1"}});
  EXPECT_NE(failure.find("rank 0: rank 1 did not join the rendezvous at 127.0.0.1:"), std::string::npos) << failure;
  EXPECT_LT(seconds, kShortTimeout + kSlack);
  expect_no_child_processes();
}

TEST(Launcher, AllreduceCaseRunsOnTheStoreBackend) {
  const GpusHiddenFromRanks gpus_hidden;
  const auto run = launch_case(PARBENCH_BINARY, {"--strategies=ddp", "--warmup=1", "--repetitions=1", "--iterations=2"},
                               launched(allreduce_case(1024, 2)), 2, /*timeout_s=*/30);
  EXPECT_EQ(run.facts.at("backend"), "store");
  EXPECT_EQ(run.facts.at("all_reduces_per_iteration"), "100");
  ASSERT_EQ(run.repetitions.size(), 1u);
  EXPECT_EQ(run.repetitions[0].seconds.size(), 2u);
}

// TCPStore's server refuses values over 8 MiB; the store backend sends larger tensors in
// chunks. The all-reduce case checks its sum before timing; ResNet-18's first broadcast is 47 MB.
TEST(Launcher, TensorsLargerThanTheStoresValueLimitGoThroughTheStoreBackend) {
  const GpusHiddenFromRanks gpus_hidden;
  const auto allreduce = launch_case(PARBENCH_BINARY, {"--strategies=ddp", "--warmup=0", "--repetitions=1", "--iterations=1"},
                                     launched(allreduce_case(16777216, 2)), 2, /*timeout_s=*/60);
  EXPECT_EQ(allreduce.repetitions.size(), 1u);
  const std::vector<std::string> resnet18 = {"--strategies=ddp", "--models=resnet18", "--batch=2", "--image=32",
                                             "--warmup=0", "--repetitions=1", "--iterations=1", "--allreduce=off"};
  const auto ddp = launch_case(PARBENCH_BINARY, resnet18, only_train_case(resnet18, 2), 2, /*timeout_s=*/60);
  EXPECT_EQ(ddp.facts.at("buckets"), "2");
  EXPECT_EQ(ddp.repetitions.size(), 1u);
  expect_no_child_processes();
}

TEST(Allreduce, IterationsRunEnoughAllReducesToTimeAndToSpreadRankSkew) {
  EXPECT_EQ(all_reduces_per_iteration(1024), 100);
  EXPECT_EQ(all_reduces_per_iteration(1024 * 1024), 64);
  EXPECT_EQ(all_reduces_per_iteration(4 * 1024 * 1024), 20);
  EXPECT_EQ(all_reduces_per_iteration(kResNet50GradientBytes), 20);
  EXPECT_EQ(all_reduces_per_iteration(256LL * 1024 * 1024), 20);
}

// ---- An external launcher's ranks --------------------------------------------------------------

TEST(ExternalLauncher, EveryRankRunsTheDistributedCasesAndRankZeroReports) {
  const GpusHiddenFromRanks gpus_hidden;
  TemporaryDirectory dir("parbench-launcher-test");
  const int port = free_port();
  const auto runs =
      run_ranks({torchrun_environment(0, 2, port), torchrun_environment(1, 2, port)},
                with(kSmallDdp, {"--strategies=single,ddp", "--dist-timeout=30",
                                 "--benchmark_out=" + dir.file("run.json"), "--benchmark_out_format=json"}));
  ASSERT_EQ(runs[0].exit_code, 0) << runs[0].err;
  ASSERT_EQ(runs[1].exit_code, 0) << runs[1].err;
  EXPECT_NE(runs[0].err.find("running the distributed cases only"), std::string::npos) << runs[0].err;
  EXPECT_TRUE(runs[1].out.empty()) << runs[1].out;

  const auto json = read_json(dir.file("run.json"));
  int repetitions = 0;
  for (const auto& benchmark : json["benchmarks"]) {
    ASSERT_EQ(benchmark["run_name"].get<std::string>().rfind("train/ddp/", 0), 0u) << benchmark["run_name"];
    ASSERT_FALSE(benchmark.value("error_occurred", false)) << benchmark.dump();
    if (benchmark["run_type"] != "iteration") continue;
    ++repetitions;
    EXPECT_EQ(benchmark["iterations"], 2);
    EXPECT_EQ(benchmark["world_size"], 2);
    EXPECT_EQ(benchmark["batch"], 4);  // weak scaling: 2 images on each of 2 ranks
    EXPECT_TRUE(benchmark.contains("step_ms_rank_spread"));
    EXPECT_NE(benchmark["label"].get<std::string>().find("backend=store"), std::string::npos);
  }
  EXPECT_EQ(repetitions, 2);
}

TEST(ExternalLauncher, RanksStartedWithDifferentWorldSizesAreTold) {
  const GpusHiddenFromRanks gpus_hidden;
  const int port = free_port();
  const auto runs =
      run_ranks({torchrun_environment(0, 2, port), torchrun_environment(1, 3, port)}, with(kSmallDdp, {"--dist-timeout=10"}));
  EXPECT_EQ(runs[0].exit_code, 1) << runs[0].err;
  EXPECT_NE(runs[0].err.find("rank 1 was started with a world size of 3, rank 0 with 2"), std::string::npos)
      << runs[0].err;
  // Rank 0 hosts the store and may be gone before rank 1 reads its world size.
  EXPECT_EQ(runs[1].exit_code, 1) << runs[1].err;
  EXPECT_TRUE(runs[1].err.find("every rank needs the same WORLD_SIZE") != std::string::npos ||
              runs[1].err.find("lost the rendezvous store") != std::string::npos)
      << runs[1].err;
}

TEST(ExternalLauncher, AnUnreachableRendezvousIsNamedWithinTheTimeout) {
  const GpusHiddenFromRanks gpus_hidden;
  const int port = free_port();  // nobody listens there
  const auto runs = run_ranks({torchrun_environment(1, 2, port)}, with(kSmallDdp, {"--dist-timeout=3"}));
  EXPECT_EQ(runs[0].exit_code, 1) << runs[0].err;
  EXPECT_NE(runs[0].err.find("rank 1 could not reach the rendezvous store at 127.0.0.1:" + std::to_string(port)),
            std::string::npos)
      << runs[0].err;
  EXPECT_LT(runs[0].seconds, kShortTimeout + kSlack);
}

struct BadLaunch {
  std::map<std::string, std::string> environment;
  std::string argument;
  std::string expected;  // a phrase the one-line error must contain
};

void PrintTo(const BadLaunch& launch, std::ostream* os) { *os << launch.expected; }

class ExternalLauncherBadInput : public ::testing::TestWithParam<BadLaunch> {};

TEST_P(ExternalLauncherBadInput, OneLineUsageError) {
  const GpusHiddenFromRanks gpus_hidden;
  const auto runs = run_ranks({GetParam().environment}, with(kSmallDdp, {GetParam().argument}));
  EXPECT_EQ(runs[0].exit_code, 2) << runs[0].err;
  EXPECT_EQ(std::count(runs[0].err.begin(), runs[0].err.end(), '\n'), 1) << runs[0].err;
  EXPECT_NE(runs[0].err.find(GetParam().expected), std::string::npos) << runs[0].err;
}

INSTANTIATE_TEST_SUITE_P(
    Cases, ExternalLauncherBadInput,
    ::testing::Values(
        BadLaunch{{{"RANK", "5"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "127.0.0.1"}},
                  "--dist-timeout=3",
                  "RANK=5 is outside 0..1"},
        BadLaunch{{{"RANK", "0"}}, "--dist-timeout=3", "RANK is set but WORLD_SIZE is not"},
        BadLaunch{{{"RANK", "0"}, {"WORLD_SIZE", "two"}}, "--dist-timeout=3", "WORLD_SIZE=two is not a whole number"},
        BadLaunch{{{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "127.0.0.1"}},
                  "--gpus=3",
                  "--gpus=3 does not match the world size of 2"},
        BadLaunch{{{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "127.0.0.1"}},
                  "--gpus=1,2",
                  "--gpus with several counts does not apply under a launcher"},
        BadLaunch{{{"RANK", "0"}, {"WORLD_SIZE", "2"}}, "--dist-timeout=3", "MASTER_ADDR is not set"}),
    [](const auto& info) { return "case" + std::to_string(info.index); });

// ---- Reading the launchers' variables -------------------------------------------------------------

// Sets variables for one test and restores the environment afterwards.
class ScopedEnvironment {
 public:
  ScopedEnvironment(std::initializer_list<std::pair<const std::string, std::string>> variables) {
    for (const char* name : kLauncherVariables) save(name);
    for (const auto& [name, value] : variables) {
      save(name);
      setenv(name.c_str(), value.c_str(), 1);
    }
  }
  ~ScopedEnvironment() {
    for (const auto& [name, value] : saved_) {
      if (value) {
        setenv(name.c_str(), value->c_str(), 1);
      } else {
        unsetenv(name.c_str());
      }
    }
  }

 private:
  static constexpr const char* kLauncherVariables[] = {"RANK",
                                                       "WORLD_SIZE",
                                                       "LOCAL_RANK",
                                                       "LOCAL_WORLD_SIZE",
                                                       "OMPI_COMM_WORLD_RANK",
                                                       "OMPI_COMM_WORLD_SIZE",
                                                       "OMPI_COMM_WORLD_LOCAL_RANK",
                                                       "OMPI_COMM_WORLD_LOCAL_SIZE",
                                                       "SLURM_PROCID",
                                                       "SLURM_STEP_NUM_TASKS",
                                                       "SLURM_LOCALID",
                                                       "SLURM_STEP_NUM_NODES",
                                                       "MASTER_ADDR",
                                                       "MASTER_PORT",
                                                       "TORCHELASTIC_USE_AGENT_STORE"};

  void save(const std::string& name) {
    if (saved_.count(name)) return;
    const char* value = std::getenv(name.c_str());
    saved_[name] = value ? std::optional<std::string>(value) : std::nullopt;
    unsetenv(name.c_str());
  }
  std::map<std::string, std::optional<std::string>> saved_;
};

TEST(RankInfo, TorchrunVariables) {
  const GpusHiddenFromRanks gpus_hidden;
  ScopedEnvironment environment{{"RANK", "3"},
                                {"WORLD_SIZE", "4"},
                                {"LOCAL_RANK", "1"},
                                {"LOCAL_WORLD_SIZE", "2"},
                                {"MASTER_ADDR", "node0"},
                                {"MASTER_PORT", "29400"},
                                {"TORCHELASTIC_USE_AGENT_STORE", "True"}};
  const auto info = rank_info_from_environment();
  ASSERT_TRUE(info);
  EXPECT_EQ(info->rank, 3);
  EXPECT_EQ(info->world_size, 4);
  EXPECT_EQ(info->local_rank, 1);
  EXPECT_EQ(info->master_addr, "node0");
  EXPECT_EQ(info->master_port, 29400);
  EXPECT_TRUE(info->launcher_hosts_store);
}

TEST(RankInfo, OpenMpiOnOneNodeNeedsNoMasterAddr) {
  const GpusHiddenFromRanks gpus_hidden;
  ScopedEnvironment environment{{"OMPI_COMM_WORLD_RANK", "1"},
                                {"OMPI_COMM_WORLD_SIZE", "2"},
                                {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
                                {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"}};
  const auto info = rank_info_from_environment();
  ASSERT_TRUE(info);
  EXPECT_EQ(info->rank, 1);
  EXPECT_EQ(info->local_rank, 1);
  EXPECT_EQ(info->master_addr, "127.0.0.1");
  EXPECT_EQ(info->master_port, 29500);
  EXPECT_FALSE(info->launcher_hosts_store);
}

TEST(RankInfo, SlurmStepOfSeveralTasksIsALaunchButABatchScriptIsNot) {
  const GpusHiddenFromRanks gpus_hidden;
  {
    ScopedEnvironment environment{{"SLURM_PROCID", "5"},
                                  {"SLURM_STEP_NUM_TASKS", "8"},
                                  {"SLURM_LOCALID", "1"},
                                  {"SLURM_STEP_NUM_NODES", "2"},
                                  {"MASTER_ADDR", "10.0.0.1"}};
    const auto info = rank_info_from_environment();
    ASSERT_TRUE(info);
    EXPECT_EQ(info->rank, 5);
    EXPECT_EQ(info->world_size, 8);
    EXPECT_EQ(info->local_rank, 1);
  }
  {
    ScopedEnvironment environment{{"SLURM_PROCID", "0"}};  // sbatch's script itself
    EXPECT_FALSE(rank_info_from_environment());
  }
  {
    ScopedEnvironment environment{{"SLURM_PROCID", "0"}, {"SLURM_STEP_NUM_TASKS", "1"}};
    EXPECT_FALSE(rank_info_from_environment());
  }
  {
    ScopedEnvironment environment{{"SLURM_PROCID", "0"}, {"SLURM_STEP_NUM_TASKS", "8"}, {"SLURM_STEP_NUM_NODES", "2"}};
    EXPECT_THROW(rank_info_from_environment(), std::invalid_argument);  // several nodes, no MASTER_ADDR
  }
}

}  // namespace
}  // namespace parbench
