#include "benchmarks/output/run_output.h"

#include "benchmarks/launch/rank_processes.h"
#include "benchmarks/measure/noise_rule.h"
#include "benchmarks/output/context.h"

#include <nlohmann/json.hpp>

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <thread>

namespace parbench {
namespace {

// Google Benchmark's JSON opens with `{`, then `  "context": {`: more keys go first in it.
std::string with_context(std::string text, const std::vector<std::pair<std::string, std::string>>& keys) {
  const std::string opening = "\"context\": {\n";
  const auto at = text.find(opening);
  if (at == std::string::npos) return text;
  std::string lines;
  for (const auto& [key, value] : keys) {
    lines += "    " + nlohmann::json(key).dump() + ": " + nlohmann::json(value).dump() + ",\n";
  }
  return text.insert(at + opening.size(), lines);
}

// Google Benchmark writes `      "run_name": "NAME",` in each entry: a case's fields go on the
// next line, then, for a case the noise rule ran, its "noise" object (benchmarks/measure/noise_rule.h).
std::string with_fields(std::string entries, const std::map<std::string, std::string>& fields) {
  const auto& noise = noise_outcomes();
  const std::string key = "\"run_name\": \"";
  for (size_t at = entries.find(key); at != std::string::npos; at = entries.find(key, at + 1)) {
    const auto name_start = at + key.size();
    const auto name_end = entries.find('"', name_start);
    const auto line_end = entries.find('\n', name_end);
    if (name_end == std::string::npos || line_end == std::string::npos) break;
    const auto name = entries.substr(name_start, name_end - name_start);
    const auto line_start = entries.rfind('\n', at) + 1;
    const auto indent = entries.substr(line_start, at - line_start);
    std::string lines;
    if (const auto case_fields = fields.find(name); case_fields != fields.end()) {
      lines += indent + "\"fields\": " + case_fields->second + ",\n";
    }
    if (const auto outcome = noise.find(name); outcome != noise.end()) {
      lines += indent + "\"noise\": " + outcome->second.to_json().dump() + ",\n";
    }
    entries.insert(line_end + 1, lines);
  }
  return entries;
}

// Google Benchmark's cv of a counter that is 0 in every repetition (`throttled` on a cool GPU) is
// 0 / 0, which its JSON writes as NaN, not JSON: such a cv is written as 0, no variation.
std::vector<benchmark::BenchmarkReporter::Run> with_json_numbers(std::vector<benchmark::BenchmarkReporter::Run> runs) {
  for (auto& run : runs) {
    if (run.run_type != benchmark::BenchmarkReporter::Run::RT_Aggregate || run.aggregate_name != "cv") continue;
    for (auto& [name, counter] : run.counters) {
      if (std::isnan(counter.value)) counter.value = 0;
    }
  }
  return runs;
}

std::atomic<RunOutput*> interrupted_output{nullptr};
volatile sig_atomic_t received_signal = 0;
int wake_pipe[2] = {-1, -1};
std::string partial_to_remove;  // for a second signal; set before the run starts, read only after

void on_signal(int signal_number) {
  if (received_signal != 0) {  // a second signal: the first one's clean-up is taking too long
    if (!partial_to_remove.empty()) unlink(partial_to_remove.c_str());
    _exit(128 + signal_number);
  }
  received_signal = signal_number;
  const char byte = 1;
  [[maybe_unused]] const auto written = write(wake_pipe[1], &byte, 1);
}

[[noreturn]] void stop_run() {
  char byte = 0;
  while (read(wake_pipe[0], &byte, 1) < 0 && errno == EINTR) {
  }
  const int signal_number = received_signal;
  abandon_launches();
  if (auto* output = interrupted_output.load()) output->interrupt(signal_number == SIGINT ? "SIGINT" : "SIGTERM");
  std::fflush(nullptr);
  _exit(128 + signal_number);
}

}  // namespace

JsonFileReporter::JsonFileReporter() {
  json_.SetOutputStream(&memory_);
  json_.SetErrorStream(&memory_);
}

bool JsonFileReporter::ReportContext(const Context& context) {
  std::lock_guard<std::mutex> lock(mutex_);
  context_reported_ = json_.ReportContext(context);
  return context_reported_;
}

void JsonFileReporter::set_case_fields(std::map<std::string, std::string> fields_by_benchmark_name) {
  std::lock_guard<std::mutex> lock(mutex_);
  fields_ = std::move(fields_by_benchmark_name);
}

void JsonFileReporter::ReportRuns(const std::vector<Run>& runs) {
  std::lock_guard<std::mutex> lock(mutex_);
  std::ostringstream entries;
  json_.SetOutputStream(&entries);
  json_.ReportRuns(with_json_numbers(without_unrun_repetitions(runs)));
  json_.SetOutputStream(&memory_);
  memory_ << with_fields(entries.str(), fields_);
  for (const auto& run : runs) cases_.insert(run.run_name.str());
}

void JsonFileReporter::Finalize() {
  std::lock_guard<std::mutex> lock(mutex_);
  json_.Finalize();
  GetOutputStream() << with_context(memory_.str(), late_run_context());
}

std::optional<std::pair<std::string, size_t>> JsonFileReporter::snapshot(
    const std::vector<std::pair<std::string, std::string>>& more) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!context_reported_) return std::nullopt;
  auto keys = late_run_context();
  keys.insert(keys.end(), more.begin(), more.end());
  // Closed as JSONReporter::Finalize closes it.
  return std::make_pair(with_context(memory_.str() + "\n  ]\n}\n", keys), cases_.size());
}

RunOutput::RunOutput(std::string output, bool json)
    : output_(std::move(output)), partial_(output_.empty() ? "" : output_ + ".partial"), json_(json) {
  // A killed run's partial file: this run writes its own.
  if (!partial_.empty()) unlink(partial_.c_str());
}

bool RunOutput::finish() {
  std::lock_guard<std::mutex> lock(mutex_);
  finished_ = true;
  if (output_.empty() || std::rename(partial_.c_str(), output_.c_str()) == 0) return true;
  std::fprintf(stderr, "parbench: could not move %s to %s: %s\n", partial_.c_str(), output_.c_str(),
               std::strerror(errno));
  unlink(partial_.c_str());
  return false;
}

void RunOutput::interrupt(const std::string& signal_name) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (finished_ || output_.empty()) {
    std::fprintf(stderr, "parbench: interrupted by %s\n", signal_name.c_str());
    return;
  }
  const auto snapshot = json_ ? reporter_.snapshot({{"interrupted", signal_name}}) : std::nullopt;
  if (snapshot) {
    std::ofstream file(partial_, std::ios::trunc);
    file << snapshot->first;
    file.close();
    if (file && std::rename(partial_.c_str(), output_.c_str()) == 0) {
      std::fprintf(stderr, "parbench: interrupted by %s: wrote the %zu cases completed to %s (context.interrupted)\n",
                   signal_name.c_str(), snapshot->second, output_.c_str());
      return;
    }
    std::fprintf(stderr, "parbench: interrupted by %s: could not write %s: %s\n", signal_name.c_str(),
                 output_.c_str(), std::strerror(errno));
  } else {
    std::fprintf(stderr, "parbench: interrupted by %s: no output written%s\n", signal_name.c_str(),
                 json_ ? " (the run had not started)" : " (only JSON output is written on an interrupt)");
  }
  unlink(partial_.c_str());
}

void stop_on_interrupts() {
  if (pipe2(wake_pipe, O_CLOEXEC) != 0) {
    std::fprintf(stderr, "parbench: cannot handle interrupts: %s\n", std::strerror(errno));
    return;
  }
  std::thread(stop_run).detach();
  struct sigaction action {};
  action.sa_handler = on_signal;
  action.sa_flags = SA_RESTART;  // the run's own system calls go on until the process ends
  sigemptyset(&action.sa_mask);
  // Installed over an inherited SIG_IGN too: a shell starts background jobs ignoring SIGINT.
  sigaction(SIGINT, &action, nullptr);
  sigaction(SIGTERM, &action, nullptr);
}

void set_interrupted_output(RunOutput* output) {
  if (output != nullptr) partial_to_remove = output->partial_path();
  interrupted_output = output;
}

}  // namespace parbench
