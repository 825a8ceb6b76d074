// What a run's cases came to, in the report's words (docs/METRICS.md, "The verdict"): one line
// per case on the console as it completes, and at the end, per set-up, each strategy's best case
// with its step time, throughput, speedup and scaling efficiency against single and peak memory;
// the winner and whether its lead is within the noise; the best split per pipeline schedule.
// The numbers follow reports/make_report.py's definitions (plots/parbench_results/cases.py):
// tests/verdict_test.cpp checks them from fixed inputs, tests/python/test_verdict.py against the
// report's code on a run's JSON.
#pragma once

#include "benchmarks/cases/cases.h"

#include <benchmark/benchmark.h>

#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace parbench {

// A counter over a case's repetitions, as the report computes it (Stats in cases.py): the median
// (the mean of the middle two for an even count), the sample standard deviation (n - 1; none with
// one repetition) and the highest.
struct Spread {
  size_t count = 0;
  double median = 0;
  double mean = 0;
  std::optional<double> stddev;
  double maximum = 0;
  static Spread of(std::vector<double> values);
};

// One case's results: its fields (train cases) and its counters over the repetitions that ran.
struct CaseResult {
  std::string name;               // Google Benchmark's run name
  std::vector<CaseField> fields;  // empty for comm cases
  size_t repetitions = 0;         // that ran
  // Every counter of the repetitions, and "time_ms": the time per iteration in milliseconds.
  std::map<std::string, Spread> counters;
  std::string failure;  // the first failed repetition's message

  bool train() const { return !fields.empty(); }
  std::string field(const std::string& key) const;  // "" where the case has none
  const Spread* counter(const std::string& name) const;
};

// "resnet50, batch 120, image 128×128, fp32, data on device" (", CUDA graph" with one), as the
// report's Setup.describe: what must match for two cases to be compared.
std::string setup_of(const CaseResult& result);
// "tokens/s" for a language model (a case with a seq), else "images/s".
std::string throughput_unit(const CaseResult& result);
// The throughput in that unit: tokens_per_second, else items_per_second.
Spread throughput(const CaseResult& result);
// The named fields beyond the strategy, the model and the set-up, as the name writes them:
// "gpus:2/split:20/schedule:gpipe"; "" for single.
std::string case_config(const CaseResult& result);
// single's median step time / the case's (the report's speedup).
double speedup(const CaseResult& result, const CaseResult& single);
// Median items_per_second / (gpus x single's): the report's scaling efficiency.
double scaling_efficiency(const CaseResult& result, const CaseResult& single);
// The highest peak_mem_gib_dev<i> over devices and repetitions; none where not measured (CPU).
std::optional<double> peak_memory_gib(const CaseResult& result);

// The noise allowed a scaling efficiency above 100% (docs/METRICS.md, "The console and the
// verdict"): the sum of the two throughputs' relative spreads (sample standard deviation over
// median), a first-order bound on the spread of their ratio; 0 for a side with one repetition.
double efficiency_allowance(const CaseResult& result, const CaseResult& single);
// Scaling efficiency above 1 + efficiency_allowance: more than the case's devices can give over
// single's, which says single was slowed or the cores were not shared on equal terms.
bool above_ideal(const CaseResult& result, const CaseResult& single);
// The repetitions flagged `stalled` (an iteration at least kStallRatio times its repetition's
// median, benchmarks/output/counters.h); 0 where none was.
size_t stalled_repetitions(const CaseResult& result);
// "efficiency 3,667% above 100% beyond the noise (allowed A%)", "2 of 5 repetitions stalled",
// both joined by "; ", or "": what flags a case on the console and in the verdict.
std::string case_flags(const CaseResult& result, const CaseResult* single);

// One set-up's verdict.
struct SplitBest {
  std::string series;  // the schedule, and the series' other fields: "interleaved-1f1b chunks:2"
  const CaseResult* best = nullptr;  // the lowest median step time
  size_t splits = 0;                 // split sizes tried
};
struct SetupVerdict {
  std::string setup, unit;
  const CaseResult* single = nullptr;   // none: no speedup reference
  std::vector<const CaseResult*> best;  // each strategy's highest median throughput, in run order
  const CaseResult* winner = nullptr;   // the highest median throughput of all
  const CaseResult* runner_up = nullptr;  // the best of the other strategies
  double lead = 0;   // winner's median throughput - runner-up's
  double noise = 0;  // the larger of the two throughputs' standard deviations
  // lead < noise: the order is not settled. None where a spread is unknown (one repetition).
  std::optional<bool> within_noise;
  std::vector<SplitBest> best_splits;
  size_t fewest_repetitions = 0, most_repetitions = 0;
  // Every case of the set-up that case_flags flags, in run order, with its flags.
  std::vector<std::pair<const CaseResult*, std::string>> flagged;
};

// Every set-up's verdict from the train cases that ran, set-ups in the order first seen.
std::vector<SetupVerdict> verdicts(const std::vector<const CaseResult*>& results);

// The verdict as console lines (each at most kConsoleWidth characters) and as Markdown.
inline constexpr size_t kConsoleWidth = 120;
std::vector<std::string> verdict_lines(const std::vector<SetupVerdict>& verdicts);
std::string verdict_markdown(const std::vector<SetupVerdict>& verdicts, const std::string& run_description);

// The compact console's lines for one case: a header where its set-up (or family) differs from
// the previous case's, then its own line (two where its config is too long for the column), then
// its flags where case_flags gives any, on lines of their own starting "    ^ ".
std::vector<std::string> case_lines(const CaseResult& result, const CaseResult* previous, const CaseResult* single);

// The results of a run's cases, from the runs Google Benchmark reports.
class RunSummary {
 public:
  // Each train case's fields, by benchmark name (as Google Benchmark reports it).
  void set_case_fields(std::map<std::string, std::vector<CaseField>> fields_by_benchmark_name);
  // One ReportRuns call: a case's repetitions, or its aggregates (used only where no repetition
  // was reported: --benchmark_display_aggregates_only). Skipped cases are not given.
  void add(const std::vector<benchmark::BenchmarkReporter::Run>& runs);
  const CaseResult* find(const std::string& name) const;
  // The single case of `result`'s set-up, if it ran.
  const CaseResult* single_for(const CaseResult& result) const;
  std::vector<const CaseResult*> results() const;

 private:
  std::map<std::string, std::vector<CaseField>> fields_;
  std::deque<CaseResult> results_;  // in the order reported
  std::map<std::string, size_t> index_;
  std::map<std::string, bool> from_repetitions_;
};

// parbench's console: one line per case (case_lines), context to stderr as Google Benchmark's.
// Reads the case from `summary`, which must have taken the runs first.
std::unique_ptr<benchmark::BenchmarkReporter> make_compact_console(const RunSummary& summary);

}  // namespace parbench
