#include "benchmarks/launch/launcher.h"

#include "benchmarks/cases/cases.h"
#include "benchmarks/output/context.h"
#include "benchmarks/measure/noise_rule.h"
#include "benchmarks/launch/rank_processes.h"
#include "benchmarks/launch/rank_protocol.h"
#include "benchmarks/run/rank_worker.h"
#include "benchmarks/launch/self_exec.h"
#include "benchmarks/launch/temporary_directory.h"
#include "strategies/distributed/store_sync.h"

#include <nlohmann/json.hpp>

#include <fstream>
#include <stdexcept>

namespace parbench {

std::optional<ReportedRepetition> report_next_repetition(benchmark::State& state, const LaunchedCase& launched,
                                                         int ranks, const Options& options,
                                                         const std::function<RankedRun(World&)>& run_rank) {
  struct Outcome {
    std::optional<RankedRun> run;
    std::string error;
    size_t reported = 0;
  };
  static std::map<std::string, Outcome> outcomes;  // by case: Google Benchmark may interleave repetitions
  auto [entry, first_call] = outcomes.try_emplace(launched.name);
  auto& outcome = entry->second;
  if (first_call) {
    try {
      outcome.run = launched_externally() ? run_as_external_rank(ranks, run_rank)
                             : launch_case(self_binary(), self_arguments(), launched, ranks, options.dist_timeout_s);
      note_rank_hosts(outcome.run->hosts, outcome.run->launches);
    } catch (const std::exception& error) {
      outcome.error = first_line(error);
    }
  }
  if (!outcome.error.empty()) {
    state.SkipWithError(outcome.error.c_str());
    return std::nullopt;
  }
  const size_t index = outcome.reported++;
  const auto& repetitions = outcome.run->repetitions;
  if (outcome.run->noise) {
    noise_outcomes()[benchmark_name(launched.name, distributed_iterations(options))] = *outcome.run->noise;
  }
  if (index >= repetitions.size() && options.max_noise > 0) {
    skip_stopped_repetition(state);  // the ranks' noise rule stopped the case
    return std::nullopt;
  }
  if (index >= repetitions.size()) {
    state.SkipWithError(
        ("the ranks ran " + std::to_string(repetitions.size()) + " repetitions and Google Benchmark asked for another")
            .c_str());
    return std::nullopt;
  }
  const auto& seconds = repetitions[index].seconds;
  if (state.max_iterations != static_cast<benchmark::IterationCount>(seconds.size())) {
    state.SkipWithError(("the ranks ran " + std::to_string(seconds.size()) +
                         " iterations, Google Benchmark asked for " + std::to_string(state.max_iterations))
                            .c_str());
    return std::nullopt;
  }
  size_t iteration = 0;
  for (auto _ : state) state.SetIterationTime(seconds[iteration++]);
  return ReportedRepetition{&*outcome.run, index};
}

RankedRun launch_case(const std::string& binary, const std::vector<std::string>& arguments,
                      const LaunchedCase& launched, int ranks, double timeout_s,
                      const std::map<std::string, std::string>& environment) {
  if (launched.fields.empty()) throw std::invalid_argument("case " + launched.name + " has no fields to launch it with");
  TemporaryDirectory results(kRanksDirectoryPrefix);
  {
    std::ofstream fields(results.path() + "/" + kCaseFile);
    fields << launched.fields;
    if (!fields) throw std::runtime_error("cannot write " + results.path() + "/" + kCaseFile);
  }
  LaunchRequest request;
  request.binary = binary;
  request.arguments = {kWorkerFlag + launched.name, kResultsFlag + results.path()};
  request.arguments.insert(request.arguments.end(), arguments.begin(), arguments.end());
  request.arguments.push_back("--dist-timeout=" + std::to_string(timeout_s));  // the last one given wins
  request.ranks = ranks;
  request.timeout = timeout_of(timeout_s);
  request.error_dir = results.path();
  request.environment = environment;
  const auto failure = launch_ranks(request);
  if (!failure.empty()) throw std::runtime_error(failure);
  std::ifstream file(results.path() + "/" + kResultFile);
  if (!file) throw std::runtime_error("rank 0 exited cleanly but wrote no result");
  return ranked_run_from(nlohmann::json::parse(file));
}

}  // namespace parbench
