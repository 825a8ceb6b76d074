// What a distributed case's ranks measure and hand back: each rank's iteration times, gathered
// onto rank 0 and combined into one RankedRun, which rank 0 writes for the launcher.
#pragma once

#include "benchmarks/config/options.h"
#include "benchmarks/measure/noise_rule.h"
#include "benchmarks/measure/nvml.h"
#include "strategies/distributed/world.h"

#include <nlohmann/json.hpp>

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace parbench {

struct RankedRun {
  struct Repetition {
    std::vector<double> seconds;  // per iteration: the slowest rank's
    double rank_spread = 0;       // (max - min) / median of the ranks' median iteration times
    // Per rank: its GPU's clocks around the repetition (benchmarks/measure/nvml.h); empty where none was sampled.
    std::vector<std::optional<RepetitionClocks>> clocks;
  };
  int world_size = 0;
  std::map<std::string, std::string> facts;  // the label
  double params = 0;
  double forward_flops_per_sample = 0;
  // Rank 0's GPU and its GEMM probe at the case's math (benchmarks/measure/mfu.h); empty math off CUDA.
  std::string peak_math, gpu_name;
  double gemm_flops = 0;
  std::vector<Repetition> repetitions;
  std::vector<double> peak_bytes;    // per rank; empty off CUDA
  std::vector<double> busy_seconds;  // per rank, for one step; empty where not measured
  std::vector<std::string> hosts;    // per rank: its host name
  std::vector<std::string> launches;  // per rank: its launch facts (launch_facts() in benchmarks/output/context.h)
  std::optional<NoiseOutcome> noise;  // --max-noise: what the rule reached
  // Every rank's own counters (the strategy's and the memory breakdown) as they reach the JSON:
  // under its own name where every rank reported the same value, else per rank as
  // rank_counter_name gives (a per-device counter always so).
  std::map<std::string, double> counters;
};

// The name a rank's counter carries in the case's JSON: a per-device counter of its one device
// ("..._dev0") becomes that of device `rank` ("param_mem_gib_dev1" from rank 1), as
// peak_mem_gib_dev<i> is rank i's; any other counter gets "_rank<r>" ("reduce_ms_rank1").
std::string rank_counter_name(const std::string& name, int rank);

// One rank's own measurements of a case.
struct RankMeasurements {
  std::vector<std::vector<double>> seconds;  // per repetition, per iteration
  std::optional<double> peak_bytes;
  std::optional<double> busy_seconds;
  std::vector<std::optional<RepetitionClocks>> clocks;  // per repetition: this rank's GPU
  std::map<std::string, double> counters;  // the strategy's and the memory breakdown's, as its one device's
};

// Hands every rank's measurements to rank 0, which combines them into `run` (its facts,
// params and FLOPs already set). Other ranks get `run` with their own measurements only.
RankedRun gather_run(World& world, const RankMeasurements& mine, RankedRun run);

// What gather_run does on rank 0 with every rank's measurements, by rank: each iteration's time
// is the slowest rank's, the spread (max - min) / median of the ranks' median times, peak memory
// and busy time per rank where every rank measured them, and the ranks' counters: one that every
// rank reported with the same value under its own name, any other (and every per-device one)
// under rank_counter_name. Throws std::runtime_error naming a rank
// that ran another number of repetitions or iterations than rank 0.
RankedRun combine_ranks(const std::vector<RankMeasurements>& ranks, RankedRun run);

// The repetitions and iterations of every distributed case, the same on every rank:
// --benchmark_repetitions if given, else --repetitions; --iterations, else
// kDefaultDistributedIterations.
// Every rank must run the same number of iterations, so distributed cases never use Google
// Benchmark's adaptive count.
inline constexpr int64_t kDefaultDistributedIterations = 10;

int distributed_repetitions(const Options& options);
int64_t distributed_iterations(const Options& options);

// Every rank times the same repetitions x iterations of `work`, each iteration started
// together: after a barrier, with the clocks behind an all-reduce that lines the ranks'
// streams up (World::line_up_streams), so the slowest rank's time is the iteration's. Each time is
// divided by `work_per_iteration`. Seconds per repetition, per iteration.
//
// `around`, where given, runs outside the timed iterations: `before` ahead of each repetition's
// first barrier, `after` once its last iteration's time is in (the devices synchronised).
// With --max-noise every rank hands in each repetition's times and all stop together, after the
// repetition whose slowest-rank times meet the rule (benchmarks/measure/noise_rule.h); `noise`, where
// given, receives what the rule reached.
// What the noise rule judges of a repetition: each iteration's time on the slowest rank, from every
// rank's times as gather_to_all hands them in (JSON arrays of seconds, one per rank).
std::vector<double> slowest_rank_times(const std::vector<std::string>& gathered);

struct RepetitionHooks {
  std::function<void(size_t repetition)> before;
  std::function<void(size_t repetition)> after;
};
std::vector<std::vector<double>> time_iterations_together(World& world, const Options& options,
                                                          const std::vector<torch::Device>& devices,
                                                          const std::function<void()>& work,
                                                          double work_per_iteration = 1.0,
                                                          const RepetitionHooks& around = {},
                                                          std::optional<NoiseOutcome>* noise = nullptr);

// A RankedRun as rank 0 writes it for the launcher (result.json), and back.
nlohmann::json to_json_value(const RankedRun& run);
RankedRun ranked_run_from(const nlohmann::json& json);

// Seeds every rank uses: the same model everywhere, a different batch per rank.
inline constexpr uint64_t kRankModelSeed = 20240;
inline constexpr uint64_t kRankDataSeed = 1000;  // plus the rank

}  // namespace parbench
