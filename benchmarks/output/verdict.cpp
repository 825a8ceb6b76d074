#include "benchmarks/output/verdict.h"

#include "benchmarks/output/counters.h"

#include "core/statistics.h"
#include "core/text.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <ostream>
#include <set>

namespace parbench {
namespace {

// The fields that make a set-up (the report's Setup), beside the strategy and the model.
const std::set<std::string> kSetupKeys = {"batch", "image", "seq", "precision", "data", "optimizer", "checkpoint", "graph"};

// Google Benchmark's suffixes of a run name (docs/JSON.md).
std::string without_suffixes(const std::string& name) {
  size_t cut = name.size();
  for (const char* suffix : {"/iterations:", "/repeats:", "/threads:", "/real_time", "/manual_time", "/min_time:"}) {
    cut = std::min(cut, name.find(suffix));
  }
  return name.substr(0, cut);
}

// Columns on a terminal: UTF-8 continuation bytes take none ("×" is two bytes, one column).
size_t columns(const std::string& text) {
  return static_cast<size_t>(
      std::count_if(text.begin(), text.end(), [](char c) { return (static_cast<unsigned char>(c) & 0xC0) != 0x80; }));
}

std::string padded(const std::string& text, size_t width) {
  const auto used = columns(text);
  return used >= width ? text : text + std::string(width - used, ' ');
}

std::string right(const std::string& text, size_t width) {
  const auto used = columns(text);
  return used >= width ? text : std::string(width - used, ' ') + text;
}

std::string printed(const char* format, double value) {
  char text[64];
  std::snprintf(text, sizeof text, format, value);
  return text;
}

// 2,661 from 1000 up, 35.2 below: the report's thousands separators.
std::string amount(double value) {
  if (std::fabs(value) < 1000) return printed("%.1f", value);
  std::string digits = printed("%.0f", std::fabs(value));
  for (int at = static_cast<int>(digits.size()) - 3; at > 0; at -= 3) digits.insert(static_cast<size_t>(at), ",");
  return (value < 0 ? "-" : "") + digits;
}

std::string percent(double fraction) { return printed("%.1f%%", 100 * fraction); }
std::string times(double ratio) { return printed("%.2fx", ratio); }
std::string milliseconds(double ms) { return printed("%.2f", ms); }

// Words wrapped at kConsoleWidth: the first line indented by `first`, later ones by `rest` spaces.
std::vector<std::string> wrapped(const std::string& text, size_t first, size_t rest) {
  std::vector<std::string> lines;
  std::string line(first, ' ');
  bool empty = true;
  size_t start = 0;
  while (start < text.size()) {
    auto end = text.find(' ', start);
    if (end == std::string::npos) end = text.size();
    const auto word = text.substr(start, end - start);
    if (!empty && columns(line) + 1 + columns(word) > kConsoleWidth) {
      lines.push_back(line);
      line = std::string(rest, ' ') + word;
    } else {
      line += (empty ? "" : " ") + word;
    }
    empty = false;
    start = end + 1;
  }
  if (!empty) lines.push_back(line);
  return lines;
}

std::string cut_to_width(const std::string& text) {
  if (columns(text) <= kConsoleWidth) return text;
  std::string kept;
  for (char c : text) {
    if (columns(kept + c) > kConsoleWidth - 3) break;
    kept += c;
  }
  return kept + "...";
}

bool weak_scaling(const CaseResult& result) { return result.field("scaling") == "weak"; }

std::string label_of(const CaseResult& result) {
  const auto config = case_config(result);
  return result.field("strategy") + (config.empty() ? "" : " " + config);
}

std::string repetitions_text(const SetupVerdict& verdict) {
  if (verdict.fewest_repetitions == verdict.most_repetitions) {
    return std::to_string(verdict.most_repetitions) + (verdict.most_repetitions == 1 ? " repetition" : " repetitions");
  }
  return std::to_string(verdict.fewest_repetitions) + " to " + std::to_string(verdict.most_repetitions) + " repetitions";
}

// The winner's sentence, the report's findings in short.
std::string winner_sentence(const SetupVerdict& verdict) {
  const auto& unit = verdict.unit;
  const auto& winner = *verdict.winner;
  const auto winner_throughput = throughput(winner).median;
  if (verdict.best.size() == 1) {
    return "Only " + winner.field("strategy") + " ran: " + amount(winner_throughput) + " " + unit +
           ", nothing to compare it with.";
  }
  std::string text = "Winner: " + winner.field("strategy") + ", " + amount(winner_throughput) + " " + unit;
  if (verdict.single != nullptr && &winner != verdict.single) {
    text += " (" + times(winner_throughput / throughput(*verdict.single).median) + " single's)";
  }
  text += "; its lead over " + verdict.runner_up->field("strategy") + " (" +
          amount(throughput(*verdict.runner_up).median) + ") is " + amount(verdict.lead) + " " + unit + ", ";
  if (!verdict.within_noise) return text + "not judged against the noise: one repetition has no spread.";
  text += (*verdict.within_noise ? "within" : "beyond") + std::string(" the noise (the larger standard deviation is ") +
          amount(verdict.noise) + ")";
  return text + (*verdict.within_noise ? ": their order is not settled." : ".");
}

// "Flagged: ddp (efficiency 3,667% above ...); pipeline gpus:2/split:1 (1 of 3 repetitions stalled). ..."
// with what the flags mean; "" where no case is flagged.
std::string flags_sentence(const SetupVerdict& verdict) {
  if (verdict.flagged.empty()) return "";
  std::string text = "Flagged:";
  bool above = false, stalled = false;
  for (size_t i = 0; i < verdict.flagged.size(); ++i) {
    const auto& [result, flags] = verdict.flagged[i];
    text += (i ? "; " : " ") + label_of(*result) + " (" + flags + ")";
    above = above || flags.find("above 100%") != std::string::npos;
    stalled = stalled || flags.find("stalled") != std::string::npos;
  }
  text += ".";
  if (above) {
    text += " Above 100% efficiency, single was slowed or the cores were not shared on equal terms: the speedups "
            "are not to be trusted.";
  }
  if (stalled) {
    text += " A stalled repetition had an iteration at least " + printed("%g", kStallRatio) +
            "x its median: its times are not the case's steady pace.";
  }
  return text;
}

// "gpipe 20 (48.20 ms), 1f1b 20 (47.90 ms); 10 splits each", or each with its count where they differ.
std::string splits_sentence(const std::vector<SplitBest>& splits) {
  const bool same_count = std::all_of(splits.begin(), splits.end(),
                                      [&](const SplitBest& split) { return split.splits == splits.front().splits; });
  std::string text;
  for (const auto& split : splits) {
    text += (text.empty() ? "" : ", ") + split.series + " " + split.best->field("split") + " (" +
            milliseconds(split.best->counter("step_ms")->median) + " ms" +
            (same_count ? "" : ", of " + std::to_string(split.splits)) + ")";
  }
  const auto count = splits.front().splits;
  if (same_count) text += "; " + std::to_string(count) + (count == 1 ? " split" : " splits") + " each";
  return text;
}

// The verdict table's columns: strategy, best case, step ms, throughput, speedup, efficiency, peak GiB.
constexpr size_t kStrategyWidth = 15, kConfigWidth = 44;
std::string verdict_numbers(const std::vector<std::string>& cells) {
  const size_t widths[] = {9, 13, 8, 11, 9};
  std::string text;
  for (size_t i = 0; i < cells.size(); ++i) text += " " + right(cells[i], widths[i]);
  return text;
}

std::vector<std::string> verdict_row_cells(const CaseResult& result, const SetupVerdict& verdict) {
  const auto* single = verdict.single;
  const auto peak = peak_memory_gib(result);
  return {milliseconds(result.counter("step_ms")->median), amount(throughput(result).median),
          single ? times(speedup(result, *single)) + (weak_scaling(result) ? "*" : "") : "-",
          single ? percent(scaling_efficiency(result, *single)) + (above_ideal(result, *single) ? "!" : "") : "-",
          peak ? printed("%.2f", *peak) : "-"};
}

// The compact console's columns for a train case.
constexpr size_t kLabelWidth = 56;
std::string train_numbers(const std::vector<std::string>& cells) {
  const size_t widths[] = {4, 9, 7, 12, 8, 6, 8};
  std::string text;
  for (size_t i = 0; i < cells.size(); ++i) text += " " + right(cells[i], widths[i]);
  return text;
}

std::string comm_numbers(const std::vector<std::string>& cells) {
  const size_t widths[] = {4, 10, 11, 11};
  std::string text;
  for (size_t i = 0; i < cells.size(); ++i) text += " " + right(cells[i], widths[i]);
  return text;
}

std::string family_of(const CaseResult& result) {
  const auto first = result.name.find('/');
  const auto second = first == std::string::npos ? first : result.name.find('/', first + 1);
  return result.name.substr(0, second);
}

// A header line: the set-up or family, then the columns' names; two lines where it is too long.
std::vector<std::string> header_lines(const std::string& title, const std::string& names) {
  if (columns(title) <= kLabelWidth) return {padded(title, kLabelWidth) + names};  // names start with a space
  return {title, std::string(kLabelWidth, ' ') + names};
}

// A case's label and numbers; two lines where the label is too long for its column.
std::vector<std::string> labelled_lines(const std::string& label, const std::string& numbers) {
  const auto text = "  " + label;
  if (columns(text) <= kLabelWidth) return {padded(text, kLabelWidth) + numbers};  // numbers start with a space
  return {cut_to_width(text), std::string(kLabelWidth, ' ') + numbers};
}

}  // namespace

Spread Spread::of(std::vector<double> values) {
  Spread spread;
  spread.count = values.size();
  if (values.empty()) return spread;
  spread.median = parbench::median(values);
  spread.mean = parbench::mean(values);
  if (values.size() > 1) spread.stddev = sample_stddev(values, spread.mean);
  spread.maximum = *std::max_element(values.begin(), values.end());
  return spread;
}

std::string CaseResult::field(const std::string& key) const {
  for (const auto& field : fields) {
    if (field.key == key) return field.text;
  }
  return "";
}

const Spread* CaseResult::counter(const std::string& name) const {
  const auto found = counters.find(name);
  return found == counters.end() ? nullptr : &found->second;
}

std::string setup_of(const CaseResult& result) {
  const auto seq = result.field("seq");
  const auto image = result.field("image");
  std::string text = result.field("model") + ", batch " + result.field("batch") + ", " +
                     (seq.empty() ? "image " + image + "×" + image : "seq " + seq) + ", " + result.field("precision") +
                     ", data on " + result.field("data");
  // AdamW and checkpointing change a step's work: their cases compare with single's that do the same.
  if (!result.field("optimizer").empty()) text += ", " + result.field("optimizer");
  if (!result.field("checkpoint").empty()) text += ", " + result.field("checkpoint") + " checkpointed";
  return result.field("graph") == "on" ? text + ", CUDA graph" : text;
}

std::string throughput_unit(const CaseResult& result) { return result.field("seq").empty() ? "images/s" : "tokens/s"; }

Spread throughput(const CaseResult& result) {
  const auto* tokens = result.field("seq").empty() ? nullptr : result.counter("tokens_per_second");
  const auto* spread = tokens != nullptr ? tokens : result.counter("items_per_second");
  return spread != nullptr ? *spread : Spread{};
}

std::string case_config(const CaseResult& result) {
  std::string text;
  for (const auto& field : result.fields) {
    if (!field.named || field.key == "strategy" || field.key == "model" || kSetupKeys.count(field.key)) continue;
    text += (text.empty() ? "" : "/") + field.key + ":" + field.text;
  }
  return text;
}

double speedup(const CaseResult& result, const CaseResult& single) {
  return single.counter("step_ms")->median / result.counter("step_ms")->median;
}

double scaling_efficiency(const CaseResult& result, const CaseResult& single) {
  const auto gpus = result.field("gpus").empty() ? 1.0 : std::stod(result.field("gpus"));
  return result.counter("items_per_second")->median / (gpus * single.counter("items_per_second")->median);
}

std::optional<double> peak_memory_gib(const CaseResult& result) {
  std::optional<double> peak;
  for (const auto& [name, spread] : result.counters) {
    if (name.rfind("peak_mem_gib_dev", 0) == 0) peak = std::max(peak.value_or(spread.maximum), spread.maximum);
  }
  return peak;
}

double efficiency_allowance(const CaseResult& result, const CaseResult& single) {
  const auto relative = [](const Spread& spread) {
    return spread.stddev && spread.median > 0 ? *spread.stddev / spread.median : 0.0;
  };
  return relative(*result.counter("items_per_second")) + relative(*single.counter("items_per_second"));
}

bool above_ideal(const CaseResult& result, const CaseResult& single) {
  if (&result == &single || result.counter("items_per_second") == nullptr ||
      single.counter("items_per_second") == nullptr) {
    return false;
  }
  return scaling_efficiency(result, single) > 1.0 + efficiency_allowance(result, single);
}

size_t stalled_repetitions(const CaseResult& result) {
  const auto* stalled = result.counter("stalled");
  return stalled != nullptr && stalled->maximum > 0 ? stalled->count : 0;
}

std::string case_flags(const CaseResult& result, const CaseResult* single) {
  std::string text;
  if (single != nullptr && above_ideal(result, *single)) {
    text = "efficiency " + amount(100 * scaling_efficiency(result, *single)) + "% above 100% beyond the noise (allowed " +
           percent(efficiency_allowance(result, *single)) + ")";
  }
  if (const auto stalled = stalled_repetitions(result); stalled > 0) {
    text += (text.empty() ? "" : "; ") + std::to_string(stalled) + " of " + std::to_string(result.repetitions) +
            (result.repetitions == 1 ? " repetition" : " repetitions") + " stalled";
  }
  return text;
}

std::vector<SetupVerdict> verdicts(const std::vector<const CaseResult*>& results) {
  std::vector<std::string> order;
  std::map<std::string, std::vector<const CaseResult*>> by_setup;
  for (const auto* result : results) {
    if (!result->train() || result->repetitions == 0 || result->counter("step_ms") == nullptr ||
        result->counter("items_per_second") == nullptr) {
      continue;
    }
    auto& cases = by_setup[setup_of(*result)];
    if (cases.empty()) order.push_back(setup_of(*result));
    cases.push_back(result);
  }
  std::vector<SetupVerdict> all;
  for (const auto& setup : order) {
    const auto& cases = by_setup[setup];
    SetupVerdict verdict;
    verdict.setup = setup;
    verdict.unit = throughput_unit(*cases.front());
    verdict.fewest_repetitions = cases.front()->repetitions;
    std::map<std::string, size_t> best_of;  // strategy: its index in verdict.best
    for (const auto* result : cases) {
      verdict.fewest_repetitions = std::min(verdict.fewest_repetitions, result->repetitions);
      verdict.most_repetitions = std::max(verdict.most_repetitions, result->repetitions);
      const auto strategy = result->field("strategy");
      if (strategy == "single" && verdict.single == nullptr) verdict.single = result;
      const auto [entry, first] = best_of.try_emplace(strategy, verdict.best.size());
      if (first) {
        verdict.best.push_back(result);
      } else if (throughput(*result).median > throughput(*verdict.best[entry->second]).median) {
        verdict.best[entry->second] = result;
      }
    }
    auto ranked = verdict.best;
    std::stable_sort(ranked.begin(), ranked.end(), [](const CaseResult* a, const CaseResult* b) {
      return throughput(*a).median > throughput(*b).median;
    });
    verdict.winner = ranked.front();
    if (ranked.size() > 1) {
      verdict.runner_up = ranked[1];
      const auto top = throughput(*verdict.winner), second = throughput(*verdict.runner_up);
      verdict.lead = top.median - second.median;
      if (top.stddev && second.stddev) {
        verdict.noise = std::max(*top.stddev, *second.stddev);
        verdict.within_noise = verdict.lead < verdict.noise;
      }
    }
    // Pipeline's series: its cases that differ only in split_size; the best is the lowest median step.
    std::vector<std::string> series_order;
    std::map<std::string, SplitBest> splits;
    std::set<std::string> gpu_counts;
    for (const auto* result : cases) {
      if (result->field("split").empty()) continue;
      gpu_counts.insert(result->field("gpus"));
    }
    for (const auto* result : cases) {
      if (result->field("split").empty()) continue;
      std::string series = result->field("schedule");
      for (const auto& field : result->fields) {
        if (!field.named || field.key == "strategy" || field.key == "model" || field.key == "split" ||
            field.key == "schedule" || kSetupKeys.count(field.key) || (field.key == "gpus" && gpu_counts.size() == 1)) {
          continue;
        }
        series += " " + field.key + ":" + field.text;
      }
      auto [entry, first] = splits.try_emplace(series, SplitBest{series, result, 0});
      if (first) series_order.push_back(series);
      auto& best = entry->second;
      ++best.splits;
      if (result->counter("step_ms")->median < best.best->counter("step_ms")->median) best.best = result;
    }
    for (const auto& series : series_order) verdict.best_splits.push_back(splits.at(series));
    for (const auto* result : cases) {
      if (auto flags = case_flags(*result, verdict.single); !flags.empty()) verdict.flagged.emplace_back(result, std::move(flags));
    }
    all.push_back(std::move(verdict));
  }
  return all;
}

std::vector<std::string> verdict_lines(const std::vector<SetupVerdict>& verdicts) {
  std::vector<std::string> lines;
  if (verdicts.empty()) return {"Verdict: no training case ran."};
  for (const auto& verdict : verdicts) {
    for (auto& line : wrapped("Verdict for " + verdict.setup + " (medians over " + repetitions_text(verdict) + "):", 0, 4)) {
      lines.push_back(std::move(line));
    }
    lines.push_back("  " + padded("strategy", kStrategyWidth) + " " + padded("best case", kConfigWidth) +
                    verdict_numbers({"step ms", verdict.unit, "speedup", "efficiency", "peak GiB"}));
    bool weak = false;
    for (const auto* best : verdict.best) {
      weak = weak || (verdict.single != nullptr && weak_scaling(*best));
      const auto config = case_config(*best);
      const auto numbers = verdict_numbers(verdict_row_cells(*best, verdict));
      const auto start = "  " + padded(best->field("strategy"), kStrategyWidth) + " ";
      if (columns(config) <= kConfigWidth) {
        lines.push_back(start + padded(config, kConfigWidth) + numbers);
      } else {
        lines.push_back(cut_to_width(start + config));
        lines.push_back(std::string(columns(start) + kConfigWidth, ' ') + numbers);
      }
    }
    for (auto& line : wrapped(winner_sentence(verdict), 2, 4)) lines.push_back(std::move(line));
    for (auto& line : wrapped(flags_sentence(verdict), 2, 4)) lines.push_back(std::move(line));
    if (verdict.single == nullptr) lines.push_back("  No single case ran: no speedup or scaling efficiency.");
    if (!verdict.best_splits.empty()) {
      const auto text = "Best pipeline split per schedule: " + splits_sentence(verdict.best_splits) + ".";
      for (auto& line : wrapped(text, 2, 4)) lines.push_back(std::move(line));
    }
    if (weak) {
      lines.push_back("  * weak scaling: each rank trains single's batch, so compare " + verdict.unit +
                      " and efficiency, not the step-time speedup.");
    }
  }
  return lines;
}

std::string verdict_markdown(const std::vector<SetupVerdict>& verdicts, const std::string& run_description) {
  std::string text = "# parbench summary\n\n" + run_description + "\n\n" +
                     "Each strategy at its best case (highest median throughput); step times and throughputs are "
                     "medians over the repetitions; speedup = single's median step time / the case's; scaling "
                     "efficiency = throughput / (devices x single's throughput); the winner's lead is within the "
                     "noise when it is smaller than the larger of the two throughputs' sample standard deviations "
                     "(docs/METRICS.md, \"The console and the verdict\").\n";
  if (verdicts.empty()) return text + "\nNo training case ran.\n";
  for (const auto& verdict : verdicts) {
    text += "\n## " + verdict.setup + "\n\n";
    text += "| strategy | best case | repetitions | step time (ms) | " + verdict.unit +
            " | speedup vs single | scaling efficiency | peak memory (GiB) |\n";
    text += "| --- | --- | --- | --- | --- | --- | --- | --- |\n";
    bool weak = false;
    for (const auto* best : verdict.best) {
      weak = weak || (verdict.single != nullptr && weak_scaling(*best));
      const auto cells = verdict_row_cells(*best, verdict);
      const auto config = case_config(*best);
      text += "| " + best->field("strategy") + " | " + (config.empty() ? "" : "`" + config + "`") + " | " +
              std::to_string(best->repetitions) + " | " + cells[0] + " | " + cells[1] + " | " + cells[2] + " | " +
              cells[3] + " | " + cells[4] + " |\n";
    }
    text += "\n**" + winner_sentence(verdict) + "**\n";
    if (!verdict.flagged.empty()) text += "\n" + flags_sentence(verdict) + "\n";
    if (verdict.single == nullptr) text += "\nNo single case ran: no speedup or scaling efficiency.\n";
    if (weak) {
      text += "\n\\* weak scaling: each rank trains single's batch, so compare " + verdict.unit +
              " and efficiency, not the step-time speedup.\n";
    }
    if (!verdict.best_splits.empty()) {
      text += "\n| pipeline schedule | best split_size | step time (ms) | splits tried |\n| --- | --- | --- | --- |\n";
      for (const auto& split : verdict.best_splits) {
        text += "| " + split.series + " | " + split.best->field("split") + " | " +
                milliseconds(split.best->counter("step_ms")->median) + " | " + std::to_string(split.splits) + " |\n";
      }
    }
  }
  return text;
}

std::vector<std::string> case_lines(const CaseResult& result, const CaseResult* previous, const CaseResult* single) {
  std::vector<std::string> lines;
  const bool new_group = previous == nullptr || previous->train() != result.train() ||
                         (result.train() ? setup_of(*previous) != setup_of(result)
                                         : family_of(*previous) != family_of(result));
  if (result.train()) {
    if (new_group) {
      lines = header_lines(setup_of(result), train_numbers({"reps", "step ms", "spread", throughput_unit(result),
                                                            "speedup", "MFU", "peak GiB"}));
    }
    if (result.repetitions == 0 || result.counter("step_ms") == nullptr) {
      lines.push_back(cut_to_width(padded("  " + label_of(result), kLabelWidth) + " failed: " + result.failure));
      return lines;
    }
    const auto& step = *result.counter("step_ms");
    const auto* mfu = result.counter("mfu");
    const auto peak = peak_memory_gib(result);
    const bool compared = single != nullptr && result.counter("items_per_second") != nullptr;
    for (auto& line : labelled_lines(
             label_of(result),
             train_numbers({std::to_string(result.repetitions), milliseconds(step.median),
                            step.stddev && step.mean > 0 ? printed("%.1f%%", 100 * *step.stddev / step.mean) : "-",
                            amount(throughput(result).median), compared ? times(speedup(result, *single)) : "-",
                            mfu ? percent(mfu->median) : "-", peak ? printed("%.2f", *peak) : "-"}))) {
      lines.push_back(std::move(line));
    }
    if (const auto flags = case_flags(result, compared ? single : nullptr); !flags.empty()) {
      for (auto& line : wrapped("^ " + flags, 4, 6)) lines.push_back(std::move(line));
    }
    return lines;
  }
  const auto family = family_of(result);
  const bool allreduce = result.counter("algbw_gbps") != nullptr;
  if (new_group) {
    lines = header_lines(family, allreduce ? comm_numbers({"reps", "time ms", "algbw GB/s", "busbw GB/s"})
                                           : comm_numbers({"reps", "time ms"}));
  }
  const auto label = without_suffixes(result.name).substr(std::min(result.name.size(), family.size() + 1));
  if (result.repetitions == 0 || result.counter("time_ms") == nullptr) {
    lines.push_back(cut_to_width(padded("  " + label, kLabelWidth) + " failed: " + result.failure));
    return lines;
  }
  std::vector<std::string> cells = {std::to_string(result.repetitions), printed("%.4f", result.counter("time_ms")->median)};
  if (allreduce) {
    cells.push_back(printed("%.2f", result.counter("algbw_gbps")->median));
    cells.push_back(printed("%.2f", result.counter("busbw_gbps") ? result.counter("busbw_gbps")->median : 0.0));
  }
  for (auto& line : labelled_lines(label, comm_numbers(cells))) lines.push_back(std::move(line));
  return lines;
}

void RunSummary::set_case_fields(std::map<std::string, std::vector<CaseField>> fields_by_benchmark_name) {
  fields_ = std::move(fields_by_benchmark_name);
}

void RunSummary::add(const std::vector<benchmark::BenchmarkReporter::Run>& runs) {
  using Run = benchmark::BenchmarkReporter::Run;
  struct Collected {
    std::map<std::string, std::vector<double>> values;
    std::map<std::string, std::map<std::string, double>> aggregates;  // aggregate name: counter: value
    size_t repetitions = 0, aggregate_repetitions = 0;
    bool iterations = false;
    std::string failure;
  };
  std::vector<std::string> order;
  std::map<std::string, Collected> collected;
  for (const auto& run : runs) {
    const auto name = run.run_name.str();
    auto [entry, first] = collected.try_emplace(name);
    if (first) order.push_back(name);
    auto& into = entry->second;
    if (run.error_occurred) {
      if (into.failure.empty()) into.failure = run.error_message;
      into.iterations = into.iterations || run.run_type == Run::RT_Iteration;
      continue;
    }
    const double time_ms =
        run.iterations > 0 ? run.real_accumulated_time / static_cast<double>(run.iterations) * 1e3 : 0.0;
    if (run.run_type == Run::RT_Iteration) {
      into.iterations = true;
      ++into.repetitions;
      for (const auto& [counter, value] : run.counters) into.values[counter].push_back(value.value);
      into.values["time_ms"].push_back(time_ms);
    } else {
      into.aggregate_repetitions = static_cast<size_t>(run.repetitions);
      auto& aggregate = into.aggregates[run.aggregate_name];
      for (const auto& [counter, value] : run.counters) aggregate[counter] = value.value;
      // Aggregates of the time are in the run's time unit: the median's is taken per iteration.
      aggregate["time_ms"] = time_ms;
    }
  }
  for (const auto& name : order) {
    auto& into = collected.at(name);
    const auto known = index_.find(name);
    // A case's aggregates follow its repetitions: they are used only where none was reported.
    if (known != index_.end() && (from_repetitions_[name] || !into.iterations)) continue;
    CaseResult result;
    result.name = name;
    if (const auto fields = fields_.find(name); fields != fields_.end()) result.fields = fields->second;
    result.failure = into.failure;
    if (into.iterations) {
      result.repetitions = into.repetitions;
      for (const auto& [counter, values] : into.values) result.counters[counter] = Spread::of(values);
    } else if (into.aggregates.count("median")) {
      result.repetitions = into.aggregate_repetitions;
      for (const auto& [counter, median] : into.aggregates.at("median")) {
        Spread spread;
        spread.count = result.repetitions;
        spread.median = spread.maximum = median;  // the highest is not reported: the median stands in
        if (into.aggregates.count("mean") && into.aggregates.at("mean").count(counter)) {
          spread.mean = into.aggregates.at("mean").at(counter);
        }
        if (result.repetitions > 1 && into.aggregates.count("stddev") && into.aggregates.at("stddev").count(counter)) {
          spread.stddev = into.aggregates.at("stddev").at(counter);
        }
        result.counters[counter] = spread;
      }
    }
    from_repetitions_[name] = into.iterations;
    if (known != index_.end()) {
      results_[known->second] = std::move(result);
    } else {
      index_[name] = results_.size();
      results_.push_back(std::move(result));
    }
  }
}

const CaseResult* RunSummary::find(const std::string& name) const {
  const auto found = index_.find(name);
  return found == index_.end() ? nullptr : &results_[found->second];
}

const CaseResult* RunSummary::single_for(const CaseResult& result) const {
  if (!result.train()) return nullptr;
  const auto setup = setup_of(result);
  for (const auto& other : results_) {
    if (other.train() && other.repetitions > 0 && other.field("strategy") == "single" && setup_of(other) == setup &&
        other.counter("step_ms") != nullptr) {
      return &other;
    }
  }
  return nullptr;
}

std::vector<const CaseResult*> RunSummary::results() const {
  std::vector<const CaseResult*> all;
  for (const auto& result : results_) all.push_back(&result);
  return all;
}

namespace {

class CompactConsole final : public benchmark::ConsoleReporter {
 public:
  explicit CompactConsole(const RunSummary& summary) : ConsoleReporter(OO_None), summary_(summary) {}

  // Google Benchmark's context (the host, its caches, and every key of the JSON context: some
  // 13 KB on stderr) would bury the progress lines: the JSON keeps it, and --verbose prints it.
  bool ReportContext(const Context&) override { return true; }

  void ReportRuns(const std::vector<Run>& runs) override {
    for (const auto& run : runs) {
      const auto name = run.run_name.str();
      if (!printed_.insert(name).second) continue;  // its aggregates, after its repetitions
      const auto* result = summary_.find(name);
      if (result == nullptr) continue;
      for (const auto& line : case_lines(*result, previous_, summary_.single_for(*result))) {
        GetOutputStream() << line << "\n";
      }
      previous_ = result;
    }
    GetOutputStream() << std::flush;
  }

  void Finalize() override {}

 private:
  const RunSummary& summary_;
  std::set<std::string> printed_;
  const CaseResult* previous_ = nullptr;
};

}  // namespace

std::unique_ptr<benchmark::BenchmarkReporter> make_compact_console(const RunSummary& summary) {
  return std::make_unique<CompactConsole>(summary);
}

}  // namespace parbench
