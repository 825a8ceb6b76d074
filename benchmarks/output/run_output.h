// The run's --benchmark_out file, written whole or not at all (docs/JSON.md), and what an
// interrupt does (docs/RUNNING.md, "Interrupts").
//
// parbench's file reporter keeps the file's text in memory (Google Benchmark's own file is
// /dev/null) and writes it at the end: at FILE.partial.<pid>, flushed to the disk and checked,
// then renamed over FILE, so that a full disk fails the run and leaves an earlier FILE as it was.
// For JSON the text is completed at the end with the context known only then
// (late_run_context), so that on SIGINT, SIGTERM or SIGHUP the cases completed so far can still
// be written as a whole JSON file, its context marked `interrupted`. A run holds a lock on
// FILE.lock for its life: a second run given the same FILE is refused.
#pragma once

#include <benchmark/benchmark.h>

#include <map>
#include <memory>
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

  // The whole document, once Finalize has run ("" before).
  std::string text();

  // Each entry of a case named here (its benchmark name) gets a "fields" object after its
  // "run_name" (docs/JSON.md).
  void set_case_fields(std::map<std::string, std::string> fields_by_benchmark_name);

  // The cases reported so far as a whole JSON document, with late_run_context() and `more`
  // added to its context, and how many cases it holds; nullopt before the context is reported.
  std::optional<std::pair<std::string, size_t>> snapshot(const std::vector<std::pair<std::string, std::string>>& more);

 private:
  std::mutex mutex_;  // the main thread reports, an interrupt's thread takes a snapshot
  std::ostringstream memory_;
  std::string finalized_;
  benchmark::JSONReporter json_;
  bool context_reported_ = false;
  // The cases reported, by run name, each once: Google Benchmark reports a case's repetitions
  // and aggregates apart, under one run name.
  std::set<std::string> cases_;
  std::map<std::string, std::string> fields_;  // by benchmark name: the fields object as JSON text
};

// Writes `text` to `path` whole: at `partial`, flushed to the disk (fsync) and closed, each step
// checked, then renamed over `path`. "" when done; otherwise why not (strerror's text), `partial`
// removed and `path` left as it was.
std::string write_whole_file(const std::string& path, const std::string& partial, const std::string& text);

// FILE.partial.<this process's id>: where write_whole_file writes FILE.
std::string partial_path_of(const std::string& path);

class RunOutput {
 public:
  // `output`: --benchmark_out ("" when none). `format`: --benchmark_out_format (json, console or
  // csv; only JSON is written on an interrupt); `tabular`: --benchmark_counters_tabular.
  RunOutput(std::string output, const std::string& format, bool tabular);
  ~RunOutput();

  // Takes FILE.lock (beside FILE, held until the file is written) and removes the partial files
  // of killed runs. "" when taken (or where the file system has no locks, after a warning);
  // otherwise why the run cannot write FILE: another live run holds the lock.
  std::string claim();

  // Google Benchmark's --benchmark_out: it opens the file, parbench's file reporter writes it.
  static constexpr const char* kGoogleBenchmarkOut = "/dev/null";
  const std::string& partial_path() const { return partial_; }
  benchmark::BenchmarkReporter* file_reporter();
  JsonFileReporter* json_reporter() { return json_ && !output_.empty() ? &reporter_ : nullptr; }

  // At the end of the run: writes the file (write_whole_file). false (after a message naming
  // the file and the cause) when it could not.
  bool finish();

  // From the interrupt's thread: unless finish() has begun, writes the interrupted JSON and says
  // so on stderr.
  void interrupt(const std::string& signal_name);

 private:
  void release();  // FILE.lock removed and unlocked

  std::string output_, partial_, lock_path_;
  bool json_;
  JsonFileReporter reporter_;
  std::ostringstream text_;  // a console or CSV file's text
  std::unique_ptr<benchmark::BenchmarkReporter> text_reporter_;
  int lock_ = -1;
  std::mutex mutex_;
  bool finished_ = false;
};

// Handles SIGINT, SIGTERM and SIGHUP (a closed terminal) from now on: the first stops the run
// within seconds (no new ranks start, those running are killed and reaped, `output`'s
// interrupt() runs, if given) and exits 128 + the signal (130, 143, 129); a second one during
// that exits at once, removing the partial file. `output` may be set later with set_interrupted_output.
void stop_on_interrupts();
void set_interrupted_output(RunOutput* output);

}  // namespace parbench
