// What became of each case of a run, taken from the runs Google Benchmark reports, so that it
// says what the JSON says. A case ran; or it was skipped (its error message is "skipped:
// <reason>": decided before it started, e.g. too few GPUs); or it failed (any other error: an
// exception, OOM, a rank that died or hung, a timeout). parbench's exit status and its closing
// lines on stderr come from here (docs/RUNNING.md, "Exit status").
#pragma once

#include <benchmark/benchmark.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

namespace parbench {

// The error message that marks a case as skipped, not failed (docs/JSON.md).
std::string skipped_message(const std::string& reason);

class CaseOutcomes {
 public:
  // Takes one reported run. A case fails if any repetition failed, and is skipped if every
  // repetition was.
  void record(const benchmark::BenchmarkReporter::Run& run);

  bool empty() const { return cases_.empty(); }
  bool any_failed() const;
  // Whether cases were reported and every one was skipped: none ran, none failed.
  bool all_skipped() const;

  // One line per skip reason, naming the kinds of case it hit, then the closing line, e.g.
  // "parbench: 41 ran, 29 skipped (needs 2 GPUs, 0 visible), 1 failed: train/ddp/...: rank 1 ...".
  std::vector<std::string> summary() const;

 private:
  struct Outcome {
    std::string skip_reason;  // set when every repetition so far was skipped
    std::string failure;      // the first failure's message
  };
  std::vector<std::string> order_;  // case names, as first reported
  std::map<std::string, Outcome> cases_;
};

class RunSummary;

// A display reporter that records every run in `outcomes` and hands `display` the runs of the
// cases that were not skipped: skipped cases appear once, in the summary, not as an error per
// repetition. With `display` null it prints nothing (ranks other than 0 of an external launch).
// `summary`, if given, takes the same runs before `display` does (benchmarks/output/verdict.h).
std::unique_ptr<benchmark::BenchmarkReporter> make_outcome_reporter(benchmark::BenchmarkReporter* display,
                                                                    CaseOutcomes& outcomes,
                                                                    RunSummary* summary = nullptr);

}  // namespace parbench
