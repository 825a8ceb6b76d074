#include "benchmarks/rank_results.h"

#include "benchmarks/rank_protocol.h"
#include "core/device_timer.h"

#include <nlohmann/json.hpp>

#include <algorithm>

namespace parbench {
namespace {

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const size_t middle = values.size() / 2;
  return values.size() % 2 == 1 ? values[middle] : (values[middle - 1] + values[middle]) / 2;
}

}  // namespace

nlohmann::json to_json_value(const RankedRun& run) {
  auto repetitions = nlohmann::json::array();
  for (const auto& repetition : run.repetitions) {
    repetitions.push_back({{"seconds", repetition.seconds}, {"rank_spread", repetition.rank_spread}});
  }
  return {{"world_size", run.world_size},
          {"facts", run.facts},
          {"params", run.params},
          {"forward_flops_per_sample", run.forward_flops_per_sample},
          {"peak_math", run.peak_math},
          {"gpu_name", run.gpu_name},
          {"gemm_flops", run.gemm_flops},
          {"repetitions", repetitions},
          {"peak_bytes", run.peak_bytes},
          {"busy_seconds", run.busy_seconds},
          {"hosts", run.hosts}};
}

RankedRun ranked_run_from(const nlohmann::json& json) {
  RankedRun run;
  run.world_size = json.at("world_size").get<int>();
  run.facts = json.at("facts").get<std::map<std::string, std::string>>();
  run.params = json.at("params").get<double>();
  run.forward_flops_per_sample = json.at("forward_flops_per_sample").get<double>();
  run.peak_math = json.at("peak_math").get<std::string>();
  run.gpu_name = json.at("gpu_name").get<std::string>();
  run.gemm_flops = json.at("gemm_flops").get<double>();
  for (const auto& repetition : json.at("repetitions")) {
    run.repetitions.push_back(
        {repetition.at("seconds").get<std::vector<double>>(), repetition.at("rank_spread").get<double>()});
  }
  run.peak_bytes = json.at("peak_bytes").get<std::vector<double>>();
  run.busy_seconds = json.at("busy_seconds").get<std::vector<double>>();
  run.hosts = json.at("hosts").get<std::vector<std::string>>();
  return run;
}

RankedRun gather_run(World& world, const RankMeasurements& mine, RankedRun run) {
  const nlohmann::json json = {
      {"seconds", mine.seconds},
      {"peak_bytes", mine.peak_bytes ? nlohmann::json(*mine.peak_bytes) : nlohmann::json()},
      {"busy_seconds", mine.busy_seconds ? nlohmann::json(*mine.busy_seconds) : nlohmann::json()}};
  std::vector<RankMeasurements> ranks;
  if (world.rank() == 0) {
    for (const auto& text : world.gather_to_rank0(json.dump(), "its measurements")) {
      const auto theirs = nlohmann::json::parse(text);
      RankMeasurements measurements;
      measurements.seconds = theirs.at("seconds").get<std::vector<std::vector<double>>>();
      if (!theirs.at("peak_bytes").is_null()) measurements.peak_bytes = theirs.at("peak_bytes").get<double>();
      if (!theirs.at("busy_seconds").is_null()) measurements.busy_seconds = theirs.at("busy_seconds").get<double>();
      ranks.push_back(std::move(measurements));
    }
  } else {
    world.gather_to_rank0(json.dump(), "its measurements");
    ranks.push_back(mine);
  }

  run.world_size = world.size();
  run.hosts = world.hosts();
  return combine_ranks(ranks, std::move(run));
}

RankedRun combine_ranks(const std::vector<RankMeasurements>& ranks, RankedRun run) {
  if (ranks.empty()) return run;
  const auto& first = ranks.front();
  for (size_t rank = 0; rank < ranks.size(); ++rank) {
    if (ranks[rank].seconds.size() != first.seconds.size()) {
      throw std::runtime_error("rank " + std::to_string(rank) + " ran " + std::to_string(ranks[rank].seconds.size()) +
                               " repetitions, rank 0 " + std::to_string(first.seconds.size()));
    }
  }
  for (size_t repetition = 0; repetition < first.seconds.size(); ++repetition) {
    RankedRun::Repetition combined;
    combined.seconds.assign(first.seconds[repetition].size(), 0.0);
    std::vector<double> medians;
    for (size_t rank = 0; rank < ranks.size(); ++rank) {
      const auto& theirs = ranks[rank].seconds[repetition];
      if (theirs.size() != combined.seconds.size()) {
        throw std::runtime_error("rank " + std::to_string(rank) + " ran " + std::to_string(theirs.size()) +
                                 " iterations in repetition " + std::to_string(repetition + 1) + ", rank 0 " +
                                 std::to_string(combined.seconds.size()));
      }
      for (size_t i = 0; i < theirs.size(); ++i) combined.seconds[i] = std::max(combined.seconds[i], theirs[i]);
      medians.push_back(median(theirs));
    }
    const double middle = median(medians);
    const auto [lowest, highest] = std::minmax_element(medians.begin(), medians.end());
    combined.rank_spread = middle > 0 ? (*highest - *lowest) / middle : 0.0;
    run.repetitions.push_back(std::move(combined));
  }
  const bool all_peaks =
      std::all_of(ranks.begin(), ranks.end(), [](const auto& r) { return r.peak_bytes.has_value(); });
  const bool all_busy =
      std::all_of(ranks.begin(), ranks.end(), [](const auto& r) { return r.busy_seconds.has_value(); });
  for (const auto& rank : ranks) {
    if (all_peaks) run.peak_bytes.push_back(*rank.peak_bytes);
    if (all_busy) run.busy_seconds.push_back(*rank.busy_seconds);
  }
  return run;
}

int distributed_repetitions(const Options& options) {
  // main hands Google Benchmark's flags to it alone; Options keeps the command line.
  const std::string flag = "--benchmark_repetitions=";
  int repetitions = options.repetitions;
  std::istringstream words(options.argv);
  std::string word;
  while (words >> word) {
    if (!starts_with(word, flag)) continue;
    try {
      repetitions = std::stoi(word.substr(flag.size()));
    } catch (const std::exception&) {
      // Google Benchmark rejects the flag before any case runs.
    }
  }
  return std::max(1, repetitions);
}

int64_t distributed_iterations(const Options& options) {
  return options.iterations > 0 ? options.iterations : kDefaultDistributedIterations;
}

std::vector<std::vector<double>> time_iterations_together(World& world, const Options& options,
                                                          const std::vector<torch::Device>& devices,
                                                          const std::function<void()>& work,
                                                          double work_per_iteration) {
  DeviceTimer timer(devices, options.timer);
  std::vector<std::vector<double>> seconds(distributed_repetitions(options));
  const int64_t iterations = distributed_iterations(options);
  for (size_t repetition = 0; repetition < seconds.size(); ++repetition) {
    for (int64_t iteration = 0; iteration < iterations; ++iteration) {
      const auto where =
          "iteration " + std::to_string(iteration + 1) + " of repetition " + std::to_string(repetition + 1);
      world.report_progress(where);
      world.barrier(where);
      // Ranks leave a store barrier up to a round trip apart, and the first would time its
      // wait for the last at the first all-reduce: the clocks start behind an all-reduce instead.
      timer.start([&world] { world.line_up_streams(); });
      work();
      seconds[repetition].push_back(timer.stop() / work_per_iteration);
    }
  }
  synchronize_devices(devices);
  return seconds;
}

}  // namespace parbench
