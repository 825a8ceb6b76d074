// The run's --benchmark_out file, written whole or not at all (docs/JSON.md), and what an
// interrupt does (docs/RUNNING.md, "Interrupts").
//
// Google Benchmark writes its file as the run goes; parbench points it at FILE.partial and
// moves that into place at the end. For JSON, parbench's own file reporter keeps the text in
// memory and writes it at the end with the context known only then (late_run_context), so that
// on SIGINT or SIGTERM the cases completed so far can still be written as a whole JSON file,
// its context marked `interrupted`.
#pragma once

#include <benchmark/benchmark.h>

#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

namespace parbench {

// Google Benchmark's JSON, held in memory until Finalize.
class JsonFileReporter : public benchmark::BenchmarkReporter {
 public:
  JsonFileReporter();
  bool ReportContext(const Context& context) override;
  void ReportRuns(const std::vector<Run>& runs) override;
  void Finalize() override;

  // Each entry of a case named here (its benchmark name) gets a "fields" object after its
  // "run_name" (docs/JSON.md).
  void set_case_fields(std::map<std::string, std::string> fields_by_benchmark_name);

  // The cases reported so far as a whole JSON document, with late_run_context() and `more`
  // added to its context, and how many cases it holds; nullopt before the context is reported.
  std::optional<std::pair<std::string, size_t>> snapshot(const std::vector<std::pair<std::string, std::string>>& more);

 private:
  std::mutex mutex_;  // the main thread reports, an interrupt's thread takes a snapshot
  std::ostringstream memory_;
  benchmark::JSONReporter json_;
  bool context_reported_ = false;
  // The cases reported, by run name, each once: Google Benchmark reports a case's repetitions
  // and aggregates apart, under one run name.
  std::set<std::string> cases_;
  std::map<std::string, std::string> fields_;  // by benchmark name: the fields object as JSON text
};

class RunOutput {
 public:
  // `output`: --benchmark_out ("" when none); Google Benchmark is pointed at partial_path().
  // `json`: whether the format is JSON (only then is a file_reporter() given and an interrupted
  // run's file written).
  RunOutput(std::string output, bool json);

  const std::string& partial_path() const { return partial_; }
  JsonFileReporter* file_reporter() { return json_ && !output_.empty() ? &reporter_ : nullptr; }

  // At the end of the run: moves the partial file into place. false (after a message naming
  // the file, the partial one removed) when it could not.
  bool finish();

  // From the interrupt's thread: unless finish() has begun, writes the interrupted JSON (or
  // removes the partial file when there is nothing to write) and says so on stderr.
  void interrupt(const std::string& signal_name);

 private:
  std::string output_, partial_;
  bool json_;
  JsonFileReporter reporter_;
  std::mutex mutex_;
  bool finished_ = false;
};

// Handles SIGINT and SIGTERM from now on: the first stops the run within seconds (no new
// ranks start, those running are killed and reaped, `output`'s interrupt() runs, if given)
// and exits 128 + the signal (130, 143); a second one during that exits at once, removing the
// partial file. `output` may be set later with set_interrupted_output.
void stop_on_interrupts();
void set_interrupted_output(RunOutput* output);

}  // namespace parbench
