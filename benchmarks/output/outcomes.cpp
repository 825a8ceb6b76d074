#include "benchmarks/output/outcomes.h"

#include "benchmarks/measure/noise_rule.h"
#include "benchmarks/output/verdict.h"

#include "core/text.h"

#include <algorithm>

namespace parbench {
namespace {

constexpr const char* kSkippedPrefix = "skipped: ";

bool is_skip(const benchmark::BenchmarkReporter::Run& run) {
  return run.error_occurred && run.error_message.rfind(kSkippedPrefix, 0) == 0;
}

// "train/ddp", "comm/allreduce": the first two parts of a case's name.
std::string case_kind(const std::string& name) {
  const auto first = name.find('/');
  return name.substr(0, first == std::string::npos ? first : name.find('/', first + 1));
}

std::string cases_text(size_t count) { return std::to_string(count) + (count == 1 ? " case" : " cases"); }

class OutcomeReporter final : public benchmark::BenchmarkReporter {
 public:
  OutcomeReporter(BenchmarkReporter* display, CaseOutcomes& outcomes, RunSummary* summary)
      : display_(display), outcomes_(outcomes), summary_(summary) {}

  bool ReportContext(const Context& context) override { return display_ == nullptr || display_->ReportContext(context); }

  void ReportRuns(const std::vector<Run>& runs) override {
    std::vector<Run> shown;
    // Repetitions the noise rule left out did not run: they are neither shown nor counted.
    for (const auto& run : without_unrun_repetitions(runs)) {
      outcomes_.record(run);
      if (!is_skip(run)) shown.push_back(run);
    }
    if (summary_ != nullptr && !shown.empty()) summary_->add(shown);
    if (display_ != nullptr && !shown.empty()) display_->ReportRuns(shown);
  }

  void Finalize() override {
    if (display_ != nullptr) display_->Finalize();
  }

 private:
  BenchmarkReporter* display_;
  CaseOutcomes& outcomes_;
  RunSummary* summary_;
};

}  // namespace

std::string skipped_message(const std::string& reason) { return kSkippedPrefix + reason; }

void CaseOutcomes::record(const benchmark::BenchmarkReporter::Run& run) {
  const auto& name = run.run_name.function_name;
  auto [entry, first] = cases_.try_emplace(name);
  auto& outcome = entry->second;
  if (first) order_.push_back(name);
  // Aggregates come from repetitions that ran: with --benchmark_report_aggregates_only they
  // are all that is reported of a case that ran.
  if (run.run_type == benchmark::BenchmarkReporter::Run::RT_Aggregate) {
    outcome.skip_reason.clear();
  } else if (is_skip(run)) {
    if (first) outcome.skip_reason = run.error_message.substr(std::char_traits<char>::length(kSkippedPrefix));
  } else {
    outcome.skip_reason.clear();
    if (run.error_occurred && outcome.failure.empty()) outcome.failure = run.error_message;
  }
}

bool CaseOutcomes::any_failed() const {
  return std::any_of(cases_.begin(), cases_.end(), [](const auto& entry) { return !entry.second.failure.empty(); });
}

bool CaseOutcomes::all_skipped() const {
  return !cases_.empty() && std::all_of(cases_.begin(), cases_.end(), [](const auto& entry) {
    return entry.second.failure.empty() && !entry.second.skip_reason.empty();
  });
}

std::vector<std::string> CaseOutcomes::summary() const {
  size_t ran = 0, skipped = 0;
  std::vector<std::string> reasons;                        // in order of first appearance
  std::map<std::string, std::vector<std::string>> kinds;   // reason: kinds of case, in order
  std::map<std::string, size_t> per_reason;
  std::string failures;
  size_t failed = 0;
  for (const auto& name : order_) {
    const auto& outcome = cases_.at(name);
    if (!outcome.failure.empty()) {
      ++failed;
      failures += (failures.empty() ? ": " : "; ") + name + ": " + outcome.failure;
    } else if (!outcome.skip_reason.empty()) {
      ++skipped;
      const auto& reason = outcome.skip_reason;
      if (per_reason[reason]++ == 0) reasons.push_back(reason);
      auto& hit = kinds[reason];
      if (std::find(hit.begin(), hit.end(), case_kind(name)) == hit.end()) hit.push_back(case_kind(name));
    } else {
      ++ran;
    }
  }

  std::vector<std::string> lines;
  std::string skip_counts;
  for (const auto& reason : reasons) {
    lines.push_back("parbench: skipped " + cases_text(per_reason[reason]) + " (" + joined(kinds[reason]) + "): " + reason);
    skip_counts += (skip_counts.empty() ? "" : "; ") + reason +
                   (reasons.size() > 1 ? ": " + std::to_string(per_reason[reason]) : "");
  }
  lines.push_back("parbench: " + std::to_string(ran) + " ran, " + std::to_string(skipped) + " skipped" +
                  (skip_counts.empty() ? "" : " (" + skip_counts + ")") + ", " + std::to_string(failed) + " failed" +
                  failures);
  return lines;
}

std::unique_ptr<benchmark::BenchmarkReporter> make_outcome_reporter(benchmark::BenchmarkReporter* display,
                                                                    CaseOutcomes& outcomes, RunSummary* summary) {
  return std::make_unique<OutcomeReporter>(display, outcomes, summary);
}

}  // namespace parbench
