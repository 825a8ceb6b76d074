#include "benchmarks/output/run_output.h"

#include "benchmarks/launch/rank_processes.h"
#include "benchmarks/launch/temporary_directory.h"
#include "benchmarks/measure/noise_rule.h"
#include "benchmarks/output/context.h"

#include <nlohmann/json.hpp>

#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
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

// A console or CSV --benchmark_out: Google Benchmark's reporter of that format, writing into
// memory. Google Benchmark points this reporter's own streams at its file (/dev/null).
class TextFileReporter : public benchmark::BenchmarkReporter {
 public:
  TextFileReporter(std::unique_ptr<benchmark::BenchmarkReporter> inner, std::ostream* memory) : inner_(std::move(inner)) {
    inner_->SetOutputStream(memory);
    inner_->SetErrorStream(memory);
  }
  bool ReportContext(const Context& context) override { return inner_->ReportContext(context); }
  void ReportRuns(const std::vector<Run>& runs) override { inner_->ReportRuns(runs); }
  void Finalize() override { inner_->Finalize(); }

 private:
  std::unique_ptr<benchmark::BenchmarkReporter> inner_;
};

std::unique_ptr<benchmark::BenchmarkReporter> reporter_for(const std::string& format, bool tabular) {
  if (format == "console") {
    return std::make_unique<benchmark::ConsoleReporter>(tabular ? benchmark::ConsoleReporter::OO_Tabular
                                                                : benchmark::ConsoleReporter::OO_None);
  }
  BENCHMARK_DISABLE_DEPRECATED_WARNING  // Google Benchmark's own --benchmark_out_format=csv
  return std::make_unique<benchmark::CSVReporter>();
  BENCHMARK_RESTORE_DEPRECATED_WARNING
}

// write(2) until all of `text` is written; false with errno set when it cannot.
bool write_all(int fd, const std::string& text) {
  for (size_t done = 0; done < text.size();) {
    const auto written = write(fd, text.data() + done, text.size() - done);
    if (written < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    done += static_cast<size_t>(written);
  }
  return true;
}

std::atomic<RunOutput*> interrupted_output{nullptr};
volatile sig_atomic_t received_signal = 0;
int wake_pipe[2] = {-1, -1};
// For a second signal; set before the run starts, read only after. The lock file only while this
// run holds it: once released, that path may be another run's.
std::string partial_to_remove, lock_to_remove;
volatile sig_atomic_t lock_held = 0;

const char* signal_name(int signal_number) {
  return signal_number == SIGINT ? "SIGINT" : signal_number == SIGHUP ? "SIGHUP" : "SIGTERM";
}

void on_signal(int signal_number) {
  if (received_signal != 0) {  // a second signal: the first one's clean-up is taking too long
    if (!partial_to_remove.empty()) unlink(partial_to_remove.c_str());
    if (lock_held != 0) unlink(lock_to_remove.c_str());
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
  if (auto* output = interrupted_output.load()) output->interrupt(signal_name(signal_number));
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
  finalized_ = with_context(memory_.str(), late_run_context());
}

std::string JsonFileReporter::text() {
  std::lock_guard<std::mutex> lock(mutex_);
  return finalized_;
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

std::string partial_path_of(const std::string& path) { return path + ".partial." + std::to_string(getpid()); }

std::string write_whole_file(const std::string& path, const std::string& partial, const std::string& text) {
  const int fd = open(partial.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
  if (fd < 0) return std::strerror(errno);
  // fsync: a file system that takes the bytes now and finds no room for them later says so here.
  bool written = write_all(fd, text) && fsync(fd) == 0;
  int error = errno;
  if (close(fd) != 0 && written) {
    written = false;
    error = errno;
  }
  if (written && std::rename(partial.c_str(), path.c_str()) == 0) return "";
  if (written) error = errno;
  unlink(partial.c_str());
  return std::strerror(error);
}

RunOutput::RunOutput(std::string output, const std::string& format, bool tabular)
    : output_(std::move(output)),
      partial_(output_.empty() ? "" : partial_path_of(output_)),
      lock_path_(output_.empty() ? "" : output_ + ".lock"),
      json_(format == "json") {
  if (!json_ && !output_.empty()) text_reporter_ = std::make_unique<TextFileReporter>(reporter_for(format, tabular), &text_);
}

RunOutput::~RunOutput() { release(); }

benchmark::BenchmarkReporter* RunOutput::file_reporter() {
  if (output_.empty()) return nullptr;
  return json_ ? static_cast<benchmark::BenchmarkReporter*>(&reporter_) : text_reporter_.get();
}

std::string RunOutput::claim() {
  if (output_.empty()) return "";
  // The run that held it may remove it as this one opens it: the lock taken must be on the file
  // still at that path.
  for (int attempt = 0; attempt < 8; ++attempt) {
    const int fd = open(lock_path_.c_str(), O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0666);
    if (fd < 0) return "cannot create its lock file '" + lock_path_ + "': " + std::strerror(errno);
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
      const int error = errno;
      close(fd);
      if (error == EWOULDBLOCK) {
        return "another parbench run is writing it (it holds '" + lock_path_ + "'): give each run its own file";
      }
      std::fprintf(stderr, "parbench: cannot lock %s (%s): a second run writing %s at the same time would go unnoticed\n",
                   lock_path_.c_str(), std::strerror(error), output_.c_str());
      return "";
    }
    struct stat held {}, now {};
    if (fstat(fd, &held) == 0 && stat(lock_path_.c_str(), &now) == 0 && held.st_dev == now.st_dev &&
        held.st_ino == now.st_ino) {
      lock_ = fd;
      lock_to_remove = lock_path_;
      lock_held = 1;
      break;
    }
    close(fd);
  }
  if (lock_ < 0) return "cannot lock '" + lock_path_ + "': it was replaced each time it was opened";
  // No other run writes FILE now: the partial files beside it are killed runs' (FILE.partial.<pid>,
  // and FILE.partial as earlier versions named it).
  const auto slash = output_.rfind('/');
  const auto directory = slash == std::string::npos ? std::string(".") : output_.substr(0, slash + 1);
  const auto partial = (slash == std::string::npos ? output_ : output_.substr(slash + 1)) + ".partial";
  for (const auto& name : directory_entries(directory)) {
    if (name.rfind(partial, 0) != 0) continue;
    const auto rest = name.substr(partial.size());
    if (rest.empty() || (rest.size() > 1 && rest[0] == '.' && rest.find_first_not_of("0123456789", 1) == std::string::npos)) {
      unlink((slash == std::string::npos ? name : directory + name).c_str());
    }
  }
  return "";
}

void RunOutput::release() {
  if (lock_ < 0) return;
  lock_held = 0;
  unlink(lock_path_.c_str());  // while it is held: a run that opened it before finds it replaced
  close(lock_);
  lock_ = -1;
}

bool RunOutput::finish() {
  std::lock_guard<std::mutex> lock(mutex_);
  finished_ = true;
  if (output_.empty()) return true;
  const auto problem = write_whole_file(output_, partial_, json_ ? reporter_.text() : text_.str());
  release();
  if (problem.empty()) return true;
  std::fprintf(stderr, "parbench: could not write %s: %s\n", output_.c_str(), problem.c_str());
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
    const auto problem = write_whole_file(output_, partial_, snapshot->first);
    if (problem.empty()) {
      std::fprintf(stderr, "parbench: interrupted by %s: wrote the %zu cases completed to %s (context.interrupted)\n",
                   signal_name.c_str(), snapshot->second, output_.c_str());
    } else {
      std::fprintf(stderr, "parbench: interrupted by %s: could not write %s: %s\n", signal_name.c_str(),
                   output_.c_str(), problem.c_str());
    }
  } else {
    std::fprintf(stderr, "parbench: interrupted by %s: no output written%s\n", signal_name.c_str(),
                 json_ ? " (the run had not started)" : " (only JSON output is written on an interrupt)");
  }
  release();
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
  sigaction(SIGHUP, &action, nullptr);  // a closed terminal: the completed cases are kept as on SIGTERM
}

void set_interrupted_output(RunOutput* output) {
  if (output != nullptr) partial_to_remove = output->partial_path();
  interrupted_output = output;
}

}  // namespace parbench
