// A stopping rule by noise (--max-noise, as nvbench's `stdrel` criterion): a case's repetitions
// go on until the relative spread of their times is at most a bound, between a minimum and a
// maximum count (docs/METRICS.md, "Stopping by noise").
//
// Google Benchmark runs a fixed number of repetitions per case, so parbench registers
// --max-repetitions and, once the rule has stopped a case, answers Google Benchmark's later calls
// of it without running anything (an error of kNoiseStopMessage, over zero iterations). Every
// reporter drops those repetitions (without_unrun_repetitions): the JSON, the console and the exit
// status see only the repetitions that ran, and Google Benchmark's aggregates, which leave errored
// repetitions out, are over them alone.
#pragma once

#include <benchmark/benchmark.h>
#include <nlohmann/json.hpp>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace parbench {

struct Options;

struct NoiseRule {
  double max_noise = 0;  // a fraction: 0.005 for --max-noise=0.5%
  int min_repetitions = 5;
  int max_repetitions = 20;
};

// --max-noise's rule, or nullopt where it was not given.
std::optional<NoiseRule> noise_rule(const Options& options);

// The relative spread of repetition times: their sample standard deviation (n - 1) over their
// mean; 0 for fewer than two.
double relative_spread(const std::vector<double>& times);

// Whether a case whose repetitions took `times` (one per repetition, in order) stops: at least
// min_repetitions ran and their relative spread is at most max_noise, or max_repetitions ran.
bool noise_rule_stops(const std::vector<double>& times, const NoiseRule& rule);

// What the rule reached for a case: the JSON's "noise" object (docs/JSON.md).
struct NoiseOutcome {
  double relative_spread = 0;
  bool reached = false;  // the spread came within the bound (else the maximum stopped it)
  int repetitions = 0;
  NoiseRule rule;
  nlohmann::ordered_json to_json() const;
};

// One case's repetitions under the rule, as Google Benchmark calls it.
class NoiseTracker {
 public:
  explicit NoiseTracker(NoiseRule rule) : rule_(rule) {}
  // A call of the case that ran `iterations` iterations taking `seconds_per_iteration` on
  // average. Under Google Benchmark's min-time rule the first repetition takes several calls of
  // growing iteration counts, each replacing the one before; every later repetition runs the
  // first one's count.
  void add(int64_t iterations, double seconds_per_iteration);
  bool stopped() const { return stopped_; }
  NoiseOutcome outcome() const;

 private:
  NoiseRule rule_;
  std::vector<double> times_;
  int64_t last_iterations_ = -1;
  bool stopped_ = false;
};

// The message of a repetition the rule left out; reporters drop such repetitions.
inline constexpr const char* kNoiseStopMessage = "parbench: not run, the noise rule had stopped the case";

// Every case's outcome so far, by benchmark name (benchmark_name in benchmarks/cases/cases.h).
std::map<std::string, NoiseOutcome>& noise_outcomes();

// Answers a call of a case the rule has stopped: an error of kNoiseStopMessage over zero
// iterations (run through the state's loop, so its iteration count is the other repetitions').
void skip_stopped_repetition(benchmark::State& state);

// `runs` without the repetitions the rule left out; the others' `repetitions` set to how many ran.
std::vector<benchmark::BenchmarkReporter::Run> without_unrun_repetitions(
    const std::vector<benchmark::BenchmarkReporter::Run>& runs);

}  // namespace parbench
