#include "benchmarks/launch/rank_results.h"

#include "benchmarks/launch/rank_protocol.h"
#include "core/device_timer.h"
#include "core/statistics.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <numeric>

namespace parbench {
namespace {

// Clocks per rank (or per repetition), null where none was sampled.
nlohmann::json clocks_json(const std::vector<std::optional<RepetitionClocks>>& clocks) {
  auto json = nlohmann::json::array();
  for (const auto& entry : clocks) json.push_back(entry ? entry->to_json() : nlohmann::json());
  return json;
}

std::vector<std::optional<RepetitionClocks>> clocks_from(const nlohmann::json& json) {
  std::vector<std::optional<RepetitionClocks>> clocks;
  for (const auto& entry : json) {
    clocks.push_back(entry.is_null() ? std::nullopt : std::optional<RepetitionClocks>(RepetitionClocks::from_json(entry)));
  }
  return clocks;
}

}  // namespace

nlohmann::json to_json_value(const RankedRun& run) {
  auto repetitions = nlohmann::json::array();
  for (const auto& repetition : run.repetitions) {
    repetitions.push_back(
        {{"seconds", repetition.seconds}, {"rank_spread", repetition.rank_spread}, {"clocks", clocks_json(repetition.clocks)}});
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
          {"hosts", run.hosts},
          {"launches", run.launches},
          {"noise", run.noise ? nlohmann::json(run.noise->to_json()) : nlohmann::json()},
          {"counters", run.counters}};
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
    run.repetitions.push_back({repetition.at("seconds").get<std::vector<double>>(),
                               repetition.at("rank_spread").get<double>(), clocks_from(repetition.at("clocks"))});
  }
  if (const auto& noise = json.at("noise"); !noise.is_null()) {
    NoiseOutcome outcome;
    outcome.relative_spread = noise.at("relative_spread").get<double>();
    outcome.reached = noise.at("reached").get<bool>();
    outcome.repetitions = noise.at("repetitions").get<int>();
    outcome.rule = {noise.at("max_noise").get<double>(), noise.at("min_repetitions").get<int>(),
                    noise.at("max_repetitions").get<int>()};
    run.noise = outcome;
  }
  run.peak_bytes = json.at("peak_bytes").get<std::vector<double>>();
  run.busy_seconds = json.at("busy_seconds").get<std::vector<double>>();
  run.hosts = json.at("hosts").get<std::vector<std::string>>();
  run.counters = json.at("counters").get<std::map<std::string, double>>();
  run.launches = json.at("launches").get<std::vector<std::string>>();
  return run;
}

RankedRun gather_run(World& world, const RankMeasurements& mine, RankedRun run) {
  const nlohmann::json json = {
      {"seconds", mine.seconds},
      {"peak_bytes", mine.peak_bytes ? nlohmann::json(*mine.peak_bytes) : nlohmann::json()},
      {"busy_seconds", mine.busy_seconds ? nlohmann::json(*mine.busy_seconds) : nlohmann::json()},
      {"clocks", clocks_json(mine.clocks)},
      {"counters", mine.counters}};
  std::vector<RankMeasurements> ranks;
  if (world.rank() == 0) {
    for (const auto& text : world.gather_to_rank0(json.dump(), "its measurements")) {
      const auto theirs = nlohmann::json::parse(text);
      RankMeasurements measurements;
      measurements.seconds = theirs.at("seconds").get<std::vector<std::vector<double>>>();
      if (!theirs.at("peak_bytes").is_null()) measurements.peak_bytes = theirs.at("peak_bytes").get<double>();
      if (!theirs.at("busy_seconds").is_null()) measurements.busy_seconds = theirs.at("busy_seconds").get<double>();
      measurements.clocks = clocks_from(theirs.at("clocks"));
      measurements.counters = theirs.at("counters").get<std::map<std::string, double>>();
      ranks.push_back(std::move(measurements));
    }
  } else {
    world.gather_to_rank0(json.dump(), "its measurements");
    ranks.push_back(mine);
  }

  run.world_size = world.size();
  run.hosts = world.hosts();
  run.launches = world.launches();
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
    // Each rank's own GPU, by rank; none at all where no rank sampled one.
    const bool any_clocks = std::any_of(ranks.begin(), ranks.end(), [repetition](const RankMeasurements& rank) {
      return repetition < rank.clocks.size() && rank.clocks[repetition].has_value();
    });
    if (any_clocks) {
      for (const auto& rank : ranks) {
        combined.clocks.push_back(repetition < rank.clocks.size() ? rank.clocks[repetition] : std::nullopt);
      }
    }
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
  // A counter every rank reported alike is the case's, under its own name, as a local case's
  // counter is; one that differs between ranks (or that some rank lacks) is each rank's. A
  // per-device counter is always each rank's device's.
  std::map<std::string, std::vector<double>> by_name;
  for (const auto& rank : ranks) {
    for (const auto& [name, value] : rank.counters) by_name[name].push_back(value);
  }
  for (size_t rank = 0; rank < ranks.size(); ++rank) {
    for (const auto& [name, value] : ranks[rank].counters) {
      const auto& values = by_name.at(name);
      const bool alike = values.size() == ranks.size() &&
                         std::all_of(values.begin(), values.end(), [&](double other) { return other == values.front(); });
      const bool per_device = rank_counter_name(name, 0) == name;
      run.counters[alike && !per_device ? name : rank_counter_name(name, static_cast<int>(rank))] = value;
    }
  }
  return run;
}

std::string rank_counter_name(const std::string& name, int rank) {
  const std::string device_suffix = "_dev0";
  if (name.size() > device_suffix.size() &&
      name.compare(name.size() - device_suffix.size(), device_suffix.size(), device_suffix) == 0) {
    return name.substr(0, name.size() - device_suffix.size()) + "_dev" + std::to_string(rank);
  }
  return name + "_rank" + std::to_string(rank);
}

int distributed_repetitions(const Options& options) {
  // main hands Google Benchmark's flags to it alone; Options keeps the command line.
  const std::string flag = "--benchmark_repetitions=";
  if (options.max_noise > 0) return options.max_repetitions;  // the noise rule may stop sooner
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

std::vector<double> slowest_rank_times(const std::vector<std::string>& gathered) {
  std::vector<double> slowest;
  for (const auto& text : gathered) {
    const auto theirs = nlohmann::json::parse(text).get<std::vector<double>>();
    if (slowest.empty()) slowest.assign(theirs.size(), 0.0);
    for (size_t i = 0; i < slowest.size() && i < theirs.size(); ++i) slowest[i] = std::max(slowest[i], theirs[i]);
  }
  return slowest;
}

std::vector<std::vector<double>> time_iterations_together(World& world, const Options& options,
                                                          const std::vector<torch::Device>& devices,
                                                          const std::function<void()>& work,
                                                          double work_per_iteration, const RepetitionHooks& around,
                                                          std::optional<NoiseOutcome>* noise) {
  DeviceTimer timer(devices, options.timer);
  std::vector<std::vector<double>> seconds(distributed_repetitions(options));
  const int64_t iterations = distributed_iterations(options);
  const auto rule = noise_rule(options);
  std::optional<NoiseTracker> tracker;
  if (rule) tracker.emplace(*rule);
  for (size_t repetition = 0; repetition < seconds.size(); ++repetition) {
    if (around.before) around.before(repetition);
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
    if (around.after) around.after(repetition);
    if (tracker) {
      // Every rank judges the same times, the slowest rank's per iteration, so all stop together.
      world.report_progress("the noise rule after repetition " + std::to_string(repetition + 1));
      auto slowest = slowest_rank_times(world.gather_to_all(nlohmann::json(seconds[repetition]).dump(), "repetition times"));
      slowest.resize(seconds[repetition].size(), 0.0);
      tracker->add(iterations, std::accumulate(slowest.begin(), slowest.end(), 0.0) / static_cast<double>(iterations));
      if (tracker->stopped()) {
        seconds.resize(repetition + 1);
        break;
      }
    }
  }
  synchronize_devices(devices);
  if (tracker && noise != nullptr) *noise = tracker->outcome();
  return seconds;
}

}  // namespace parbench
