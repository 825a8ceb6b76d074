#include "benchmarks/measure/noise_rule.h"

#include "benchmarks/config/options.h"
#include "core/statistics.h"

#include <cmath>
#include <numeric>

namespace parbench {

std::optional<NoiseRule> noise_rule(const Options& options) {
  if (!(options.max_noise > 0)) return std::nullopt;
  return NoiseRule{options.max_noise, options.min_repetitions, options.max_repetitions};
}

double relative_spread(const std::vector<double>& times) {
  if (times.size() < 2) return 0;
  const double average = mean(times);
  return average > 0 ? sample_stddev(times, average) / average : 0;
}

bool noise_rule_stops(const std::vector<double>& times, const NoiseRule& rule) {
  const auto count = static_cast<int>(times.size());
  if (count >= rule.max_repetitions) return true;
  return count >= rule.min_repetitions && relative_spread(times) <= rule.max_noise;
}

nlohmann::ordered_json NoiseOutcome::to_json() const {
  return {{"relative_spread", relative_spread},
          {"max_noise", rule.max_noise},
          {"reached", reached},
          {"repetitions", repetitions},
          {"min_repetitions", rule.min_repetitions},
          {"max_repetitions", rule.max_repetitions}};
}

void NoiseTracker::add(int64_t iterations, double seconds_per_iteration) {
  if (stopped_) return;
  // A first repetition's probe of more iterations replaces the probe before it.
  if (times_.size() == 1 && iterations != last_iterations_) {
    times_.back() = seconds_per_iteration;
  } else {
    times_.push_back(seconds_per_iteration);
  }
  last_iterations_ = iterations;
  stopped_ = noise_rule_stops(times_, rule_);
}

NoiseOutcome NoiseTracker::outcome() const {
  NoiseOutcome outcome;
  outcome.rule = rule_;
  outcome.repetitions = static_cast<int>(times_.size());
  outcome.relative_spread = relative_spread(times_);
  outcome.reached = outcome.repetitions >= rule_.min_repetitions && outcome.relative_spread <= rule_.max_noise;
  return outcome;
}

std::map<std::string, NoiseOutcome>& noise_outcomes() {
  static std::map<std::string, NoiseOutcome> outcomes;
  return outcomes;
}

void skip_stopped_repetition(benchmark::State& state) {
  state.SkipWithError(kNoiseStopMessage);
  for (auto _ : state) {
  }
}

std::vector<benchmark::BenchmarkReporter::Run> without_unrun_repetitions(
    const std::vector<benchmark::BenchmarkReporter::Run>& runs) {
  using Run = benchmark::BenchmarkReporter::Run;
  // By run name, for the cases the rule stopped: the repetitions that ran. Google Benchmark
  // reports a case's repetitions and then, in a call of their own, its aggregates.
  static std::map<std::string, int64_t> ran_of_stopped;
  std::vector<Run> kept;
  std::map<std::string, int64_t> ran;
  bool dropped = false;
  for (const auto& run : runs) {
    if (run.error_occurred && run.error_message == kNoiseStopMessage) {
      dropped = true;
      continue;
    }
    if (run.run_type == Run::RT_Iteration) ++ran[run.run_name.str()];
    kept.push_back(run);
  }
  if (dropped) {
    for (const auto& [name, count] : ran) ran_of_stopped[name] = count;
  }
  for (auto& run : kept) {
    const auto count = ran_of_stopped.find(run.run_name.str());
    if (count == ran_of_stopped.end()) continue;
    run.repetitions = count->second;
    // An aggregate's iterations are the repetitions it was computed over.
    if (run.run_type == Run::RT_Aggregate) run.iterations = count->second;
  }
  return kept;
}

}  // namespace parbench
