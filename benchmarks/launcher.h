// Distributed cases run on ranks, one process each. Two ways to get them (docs/DISTRIBUTED.md):
// - parbench's own launcher: the benchmark process starts fresh ranks of its own binary for
//   each case, with hidden flags, and reads rank 0's result;
// - an external launcher (torchrun, srun, mpirun) starts every rank; each runs Google
//   Benchmark over the distributed cases, and rank 0 writes the output.
// Either way every rank runs all repetitions of a case at once, on Google Benchmark's first
// call of it, and each call then reports one repetition.
#pragma once

#include "benchmarks/options.h"
#include "strategies/distributed/world.h"

#include <benchmark/benchmark.h>

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace parbench {

struct CaseSpec;

// ---- Starting ranks --------------------------------------------------------------------

struct LaunchRequest {
  std::string binary;                  // what every rank runs
  std::vector<std::string> arguments;  // after argv[0]
  int ranks = 1;
  std::chrono::milliseconds timeout{60000};  // --dist-timeout
  std::string error_dir;                     // a failing rank leaves its one-line reason in <error_dir>/error.<rank>
  std::map<std::string, std::string> environment;  // added to every rank's environment
};

// Hosts the rendezvous TCPStore on a free port of 127.0.0.1 (host_rendezvous_store: every rank
// is local) and starts request.ranks processes with RANK, LOCAL_RANK, WORLD_SIZE,
// LOCAL_WORLD_SIZE, MASTER_ADDR=127.0.0.1, MASTER_PORT and TORCHELASTIC_USE_AGENT_STORE=True,
// in this process's environment (set_parbench_environment's variables included). The ranks share a
// process group, die with this process (PR_SET_PDEATHSIG) and write their stdout to stderr.
// Returns "" once every rank has exited 0. As soon as one fails, or when no rank has reported
// progress for 2 x timeout + 30 s, kills the group, reaps every process and returns one line
// naming the rank.
std::string launch_ranks(const LaunchRequest& request);

// For an interrupt (benchmarks/run_output.h): from now on no launch starts ranks; the ranks of
// the launch in progress, if any, are killed and reaped and its error_dir removed. Safe from
// any thread; returns once done.
void abandon_launches();

// ---- What the ranks hand back -------------------------------------------------------------

struct RankedRun {
  struct Repetition {
    std::vector<double> seconds;  // per iteration: the slowest rank's
    double rank_spread = 0;       // (max - min) / median of the ranks' median iteration times
  };
  int world_size = 0;
  std::map<std::string, std::string> facts;  // the label
  double params = 0;
  double forward_flops_per_sample = 0;
  // Rank 0's GPU and its GEMM probe at the case's math (benchmarks/mfu.h); empty math off CUDA.
  std::string peak_math, gpu_name;
  double gemm_flops = 0;
  std::vector<Repetition> repetitions;
  std::vector<double> peak_bytes;    // per rank; empty off CUDA
  std::vector<double> busy_seconds;  // per rank, for one step; empty where not measured
  std::vector<std::string> hosts;    // per rank: its host name
};

// One rank's own measurements of a case.
struct RankMeasurements {
  std::vector<std::vector<double>> seconds;  // per repetition, per iteration
  std::optional<double> peak_bytes;
  std::optional<double> busy_seconds;
};

// Hands every rank's measurements to rank 0, which combines them into `run` (its facts,
// params and FLOPs already set). Other ranks get `run` with their own measurements only.
RankedRun gather_run(World& world, const RankMeasurements& mine, RankedRun run);

// The repetitions and iterations of every distributed case, the same on every rank:
// --benchmark_repetitions if given, else --repetitions; --iterations, else
// kDefaultDistributedIterations.
int distributed_repetitions(const Options& options);
int64_t distributed_iterations(const Options& options);

// Every rank times the same repetitions x iterations of `work`, each iteration started
// together: after a barrier, with the clocks behind an all-reduce that lines the ranks'
// streams up (World::line_up_streams), so the slowest rank's time is the iteration's. Each time is
// divided by `work_per_iteration`. Seconds per repetition, per iteration.
std::vector<std::vector<double>> time_iterations_together(World& world, const Options& options,
                                                          const std::vector<torch::Device>& devices,
                                                          const std::function<void()>& work,
                                                          double work_per_iteration = 1.0);

// A rank's part of a train/ddp case (benchmarks/distributed_runner.cpp). `ends_with_case`: profile
// one step after the timed ones, for a rank that ends with the case.
RankedRun run_training_rank(World& world, const CaseSpec& spec, const Options& options, bool ends_with_case);

// Seeds every rank uses: the same model everywhere, a different batch per rank.
inline constexpr uint64_t kRankModelSeed = 20240;
inline constexpr uint64_t kRankDataSeed = 1000;  // plus the rank

// ---- Reporting to Google Benchmark -----------------------------------------------------

// What a launch runs: a case's name and, for a train case, its fields (fields_json in
// benchmarks/cases.h, as JSON text), from which every rank builds it; comm cases, without
// fields, are found by name.
struct LaunchedCase {
  std::string name;
  std::string fields;
};

struct ReportedRepetition {
  const RankedRun* run;
  size_t index;
};

// For each of Google Benchmark's calls of a distributed case. The first call runs the case:
// in this process with `run_rank` when an external launcher started it, otherwise on `ranks`
// fresh processes of this binary. Every call reports the next repetition's iteration times
// with SetIterationTime. Returns that repetition, or nullopt after SkipWithError (one line
// naming the rank that failed).
std::optional<ReportedRepetition> report_next_repetition(benchmark::State& state, const LaunchedCase& launched,
                                                         int ranks, const Options& options,
                                                         const std::function<RankedRun(World&)>& run_rank);

// Runs `launched` on `ranks` fresh processes of `binary` given parbench options `arguments`
// (their --dist-timeout set to `timeout_s`), and returns rank 0's result; throws
// std::runtime_error naming the rank that failed.
RankedRun launch_case(const std::string& binary, const std::vector<std::string>& arguments,
                      const LaunchedCase& launched, int ranks, double timeout_s,
                      const std::map<std::string, std::string>& environment = {});

// ---- Being a rank of parbench's launcher ---------------------------------------------------

struct WorkerRequest {
  std::string case_name;   // --parbench-worker=CASE
  std::string result_dir;  // --parbench-results=DIR, holding case.json for a train case
};

// Takes the hidden flags parbench's launcher gives its ranks out of argv.
std::optional<WorkerRequest> take_worker_flags(int* argc, char** argv);

// Runs one case as one rank (its place from the environment the launcher set) and returns 0;
// rank 0 writes <result_dir>/result.json. A failing rank writes its reason to
// <result_dir>/error.<rank> and stderr and exits 1 at once: unwinding could hang in a stuck
// collective. Test hooks, each naming one rank: PARBENCH_TEST_ABSENT_RANK never joins,
// PARBENCH_TEST_FAIL_RANK exits with code 3 after joining, PARBENCH_TEST_HANG_RANK hangs after
// joining, busy (its watchdog runs); PARBENCH_TEST_SAVE_WEIGHTS=DIR saves each rank's weights
// and gradients after the run.
int run_worker(const WorkerRequest& request, Options options, int visible_gpus);

// ---- Being a rank of an external launcher ----------------------------------------------------

// This process's place when torchrun, srun or mpirun started it, with options.gpus set to the
// world size; nullopt otherwise. Throws UsageError for bad variables, a --gpus that is not the
// world size, or a LOCAL_RANK with no GPU of that number.
std::optional<RankInfo> external_launch(Options& options, int visible_gpus);

// At the end of an externally launched run: leaves the world with the other ranks. Returns
// the exit code: 1 if a distributed case failed on this rank (its process group is then not
// trusted, so the later ones were skipped), else 0.
int finish_external_launch();

}  // namespace parbench
