// The console's lines and the verdict (benchmarks/output/verdict.h) from fixed inputs: the report's
// formulas (speedup, scaling efficiency, medians, the noise rule, the best split), the lines'
// width, and how many lines the default run on 2 GPUs prints.
#include "benchmarks/cases/cases.h"
#include "benchmarks/output/verdict.h"
#include "benchmarks/run/allreduce.h"
#include "benchmarks/run/case_runner.h"
#include "option_parsing.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace parbench {
namespace {

// Columns on a terminal, as the console counts them ("×" is one).
size_t columns(const std::string& text) {
  return static_cast<size_t>(
      std::count_if(text.begin(), text.end(), [](char c) { return (static_cast<unsigned char>(c) & 0xC0) != 0x80; }));
}

std::vector<CaseField> image_fields(const std::string& strategy, std::vector<CaseField> extra = {}) {
  std::vector<CaseField> fields = {{"strategy", strategy}, {"model", "resnet50"}, {"batch", "120", true},
                                   {"image", "128", true},  {"precision", "fp32"}, {"data", "device"}};
  fields.insert(fields.end(), extra.begin(), extra.end());
  fields.push_back({"graph", "off", false, false});
  return fields;
}

// A case at the batch of 120 whose repetitions took `step_ms` each; `extra`: its fields beyond the set-up.
CaseResult image_case(const std::string& strategy, std::vector<double> step_ms, std::vector<CaseField> extra = {}) {
  CaseResult result;
  result.fields = image_fields(strategy, std::move(extra));
  result.name = case_name(result.fields);
  result.repetitions = step_ms.size();
  std::vector<double> items;
  for (double ms : step_ms) items.push_back(120.0 / (ms / 1e3));
  result.counters["step_ms"] = Spread::of(step_ms);
  result.counters["items_per_second"] = Spread::of(items);
  result.counters["time_ms"] = Spread::of(step_ms);
  return result;
}

TEST(Verdict, SpreadIsTheReportsMedianAndSampleStandardDeviation) {
  const auto odd = Spread::of({3, 1, 2});
  EXPECT_DOUBLE_EQ(odd.median, 2);
  EXPECT_DOUBLE_EQ(odd.mean, 2);
  ASSERT_TRUE(odd.stddev);
  EXPECT_DOUBLE_EQ(*odd.stddev, 1);  // sqrt(((1-2)^2 + 0 + (3-2)^2) / (3 - 1))
  EXPECT_DOUBLE_EQ(odd.maximum, 3);
  const auto even = Spread::of({4, 1, 2, 10});
  EXPECT_DOUBLE_EQ(even.median, 3);  // the middle two's mean, as statistics.median
  EXPECT_FALSE(Spread::of({5}).stddev);  // one repetition: no spread
}

TEST(Verdict, SpeedupAndScalingEfficiencyAreTheReports) {
  const auto single = image_case("single", {40, 50, 60});                               // median 50 ms
  const auto ddp = image_case("ddp", {25, 20, 30}, {{"gpus", "2", true}});           // median 25 ms
  // speedup = single's median step / the case's; efficiency = median items/s / (gpus x single's).
  EXPECT_DOUBLE_EQ(speedup(ddp, single), 50.0 / 25.0);
  EXPECT_DOUBLE_EQ(scaling_efficiency(ddp, single), (120.0 / 0.025) / (2 * 120.0 / 0.05));
  EXPECT_EQ(setup_of(ddp), "resnet50, batch 120, image 128×128, fp32, data on device");
  EXPECT_EQ(case_config(ddp), "gpus:2");
  EXPECT_EQ(case_config(single), "");
  EXPECT_EQ(throughput_unit(ddp), "images/s");
  EXPECT_FALSE(peak_memory_gib(ddp));
  auto measured = ddp;
  measured.counters["peak_mem_gib_dev0"] = Spread::of({1.5, 2.0});
  measured.counters["peak_mem_gib_dev1"] = Spread::of({3.25, 1.0});
  EXPECT_DOUBLE_EQ(*peak_memory_gib(measured), 3.25);  // the highest over devices and repetitions
}

TEST(Verdict, ALanguageModelIsJudgedInTokensPerSecond) {
  CaseResult gpt;
  gpt.fields = {{"strategy", "single"}, {"model", "tinygpt"}, {"batch", "4", true}, {"seq", "64", true},
                {"precision", "fp32"},  {"data", "device"},   {"graph", "off", false, false}};
  gpt.repetitions = 1;
  gpt.counters["step_ms"] = Spread::of({10});
  gpt.counters["items_per_second"] = Spread::of({400});
  gpt.counters["tokens_per_second"] = Spread::of({25600});
  EXPECT_EQ(throughput_unit(gpt), "tokens/s");
  EXPECT_DOUBLE_EQ(throughput(gpt).median, 25600);
  EXPECT_EQ(setup_of(gpt), "tinygpt, batch 4, seq 64, fp32, data on device");
}

TEST(Verdict, TheWinnerHasTheHighestMedianThroughputAndItsLeadIsJudgedAgainstTheLargerSpread) {
  const auto single = image_case("single", {50, 50, 50});
  // data_parallel: 30 ms median, steady; ddp 29 ms median, noisy.
  const auto data_parallel = image_case("data_parallel", {30, 30, 30.1}, {{"gpus", "2", true}});
  const auto ddp = image_case("ddp", {29, 20, 40}, {{"gpus", "2", true}});
  auto verdict = verdicts({&single, &data_parallel, &ddp});
  ASSERT_EQ(verdict.size(), 1u);
  EXPECT_EQ(verdict[0].winner, &ddp);
  EXPECT_EQ(verdict[0].runner_up, &data_parallel);
  EXPECT_DOUBLE_EQ(verdict[0].lead, throughput(ddp).median - throughput(data_parallel).median);
  EXPECT_DOUBLE_EQ(verdict[0].noise, *throughput(ddp).stddev);
  ASSERT_TRUE(verdict[0].within_noise);
  EXPECT_TRUE(*verdict[0].within_noise);  // 4,138 - 4,000 images/s against ddp's spread of 1,500

  // A steady lead is beyond the noise.
  const auto steady = image_case("ddp", {20, 20, 20.1}, {{"gpus", "2", true}});
  verdict = verdicts({&single, &data_parallel, &steady});
  EXPECT_EQ(verdict[0].winner, &steady);
  EXPECT_FALSE(*verdict[0].within_noise);
  const auto lines = verdict_lines(verdict);
  const auto text = [&] {
    std::string all;
    for (const auto& line : lines) all += line + "\n";
    return all;
  }();
  EXPECT_NE(text.find("  Winner: ddp, 6,000 images/s (2.50x single's); its lead over data_parallel (4,000) is 2,000"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("beyond the noise"), std::string::npos) << text;
  EXPECT_NE(text.find("(the larger standard deviation is 17.2)."), std::string::npos) << text;
  EXPECT_NE(text.find("  ddp             gpus:2"), std::string::npos) << text;
  EXPECT_NE(text.find("2.50x"), std::string::npos) << text;     // speedup 50 / 20
  EXPECT_NE(text.find("125.0%"), std::string::npos) << text;    // efficiency 6,000 / (2 x 2,400)

  // One repetition has no spread: the lead is not judged.
  const auto once = image_case("ddp", {20}, {{"gpus", "2", true}});
  verdict = verdicts({&single, &data_parallel, &once});
  EXPECT_FALSE(verdict[0].within_noise);
}

TEST(Verdict, EachStrategyIsShownAtItsBestCaseAndEachScheduleAtItsBestSplit) {
  const auto single = image_case("single", {50});
  std::vector<CaseResult> pipeline;
  for (const auto& [schedule, split, ms] : std::vector<std::tuple<std::string, std::string, double>>{
           {"gpipe", "10", 40}, {"gpipe", "20", 35}, {"gpipe", "40", 45}, {"1f1b", "10", 38}, {"1f1b", "20", 39}}) {
    pipeline.push_back(image_case("pipeline", {ms},
                                  {{"gpus", "2", true}, {"split", split, true}, {"schedule", schedule}, {"lanes", "1", true, false}}));
  }
  std::vector<const CaseResult*> all = {&single};
  for (const auto& result : pipeline) all.push_back(&result);
  const auto verdict = verdicts(all);
  ASSERT_EQ(verdict[0].best.size(), 2u);
  EXPECT_EQ(verdict[0].best[1], &pipeline[1]);  // gpipe at split 20: 35 ms, the highest throughput
  ASSERT_EQ(verdict[0].best_splits.size(), 2u);
  EXPECT_EQ(verdict[0].best_splits[0].series, "gpipe");
  EXPECT_EQ(verdict[0].best_splits[0].best, &pipeline[1]);
  EXPECT_EQ(verdict[0].best_splits[0].splits, 3u);
  EXPECT_EQ(verdict[0].best_splits[1].series, "1f1b");
  EXPECT_EQ(verdict[0].best_splits[1].best, &pipeline[3]);
  const auto markdown = verdict_markdown(verdict, "a run");
  EXPECT_NE(markdown.find("| gpipe | 20 | 35.00 | 3 |"), std::string::npos) << markdown;
  EXPECT_NE(markdown.find("| pipeline | `gpus:2/split:20/schedule:gpipe` | 1 | 35.00 |"), std::string::npos) << markdown;
}

TEST(Verdict, ARunWithoutSingleOrWithOneStrategySaysSo) {
  const auto ddp = image_case("ddp", {20, 21}, {{"gpus", "2", true}});
  auto lines = verdict_lines(verdicts({&ddp}));
  std::string text;
  for (const auto& line : lines) text += line + "\n";
  EXPECT_NE(text.find("Only ddp ran"), std::string::npos) << text;
  EXPECT_NE(text.find("No single case ran"), std::string::npos) << text;
  EXPECT_EQ(verdict_lines({}), std::vector<std::string>{"Verdict: no training case ran."});
}

std::string joined_lines(const std::vector<std::string>& lines) {
  std::string text;
  for (const auto& line : lines) text += line + "\n";
  return text;
}

// Above 100% scaling efficiency beyond the noise, the case is flagged on its console line, in
// the verdict and in the summary: a CPU run's single on a shared host crawled at 500 ms a step
// while two ranks took 7 ms, which made ddp "73.35x single's".
TEST(Verdict, EfficiencyAboveOneHundredPercentBeyondTheNoiseIsFlagged) {
  const auto single = image_case("single", {490, 500, 510});
  const auto ddp = image_case("ddp", {7, 7.1, 6.9}, {{"gpus", "2", true}});
  ASSERT_GT(scaling_efficiency(ddp, single), 30);
  // The allowance: the two throughputs' relative spreads (sample standard deviation over median), summed.
  const auto relative = [](const CaseResult& result) {
    const auto& spread = *result.counter("items_per_second");
    return *spread.stddev / spread.median;
  };
  EXPECT_DOUBLE_EQ(efficiency_allowance(ddp, single), relative(ddp) + relative(single));
  EXPECT_TRUE(above_ideal(ddp, single));
  EXPECT_FALSE(above_ideal(single, single));
  const auto line = joined_lines(case_lines(ddp, &single, &single));
  EXPECT_NE(line.find("    ^ efficiency 3,"), std::string::npos) << line;
  EXPECT_NE(line.find("% above 100% beyond the noise (allowed "), std::string::npos) << line;
  EXPECT_EQ(joined_lines(case_lines(single, nullptr, &single)).find("^"), std::string::npos);
  const auto found = verdicts({&single, &ddp});
  const auto console = joined_lines(verdict_lines(found));
  EXPECT_NE(console.find("Flagged: ddp gpus:2 (efficiency 3,"), std::string::npos) << console;
  EXPECT_NE(console.find("%! "), std::string::npos) << console;  // the efficiency cell's mark
  EXPECT_NE(console.find("not to be trusted"), std::string::npos) << console;
  const auto markdown = verdict_markdown(found, "a run");
  EXPECT_NE(markdown.find("%! |"), std::string::npos) << markdown;
  EXPECT_NE(markdown.find("\nFlagged: ddp gpus:2 (efficiency 3,"), std::string::npos) << markdown;
  for (const auto& text : verdict_lines(found)) EXPECT_LE(columns(text), kConsoleWidth) << text;
}

// Within the noise it is not: 1% above ideal, with spreads of several percent.
TEST(Verdict, EfficiencyJustAboveOneHundredPercentWithinTheNoiseIsNotFlagged) {
  const auto single = image_case("single", {95, 100, 105});
  const auto ddp = image_case("ddp", {47.5, 49.5, 52}, {{"gpus", "2", true}});
  ASSERT_GT(scaling_efficiency(ddp, single), 1.0);
  ASSERT_LT(scaling_efficiency(ddp, single), 1.0 + efficiency_allowance(ddp, single));
  EXPECT_FALSE(above_ideal(ddp, single));
  EXPECT_EQ(case_flags(ddp, &single), "");
  const auto console = joined_lines(verdict_lines(verdicts({&single, &ddp})));
  EXPECT_EQ(console.find("Flagged"), std::string::npos) << console;
  // One repetition each: no spread, no allowance.
  const auto once = image_case("single", {100});
  const auto fast = image_case("ddp", {49.5}, {{"gpus", "2", true}});
  EXPECT_DOUBLE_EQ(efficiency_allowance(fast, once), 0.0);
  EXPECT_TRUE(above_ideal(fast, once));
}

// A repetition flagged `stalled` (benchmarks/output/counters.h) is flagged on the console line,
// in the verdict and in the summary.
TEST(Verdict, AStalledRepetitionIsFlagged) {
  const auto single = image_case("single", {50, 50, 50});
  auto ddp = image_case("ddp", {30, 31, 90}, {{"gpus", "2", true}});
  ddp.counters["stalled"] = Spread::of({1.0});  // one of the three repetitions had it
  EXPECT_EQ(stalled_repetitions(ddp), 1u);
  EXPECT_EQ(stalled_repetitions(single), 0u);
  EXPECT_EQ(case_flags(ddp, &single), "1 of 3 repetitions stalled");
  const auto line = joined_lines(case_lines(ddp, &single, &single));
  EXPECT_NE(line.find("\n    ^ 1 of 3 repetitions stalled\n"), std::string::npos) << line;
  const auto found = verdicts({&single, &ddp});
  const auto console = joined_lines(verdict_lines(found));
  EXPECT_NE(console.find("Flagged: ddp gpus:2 (1 of 3 repetitions stalled)."), std::string::npos) << console;
  EXPECT_NE(console.find("at least 3x its median"), std::string::npos) << console;
  EXPECT_NE(verdict_markdown(found, "a run").find("Flagged: ddp gpus:2 (1 of 3 repetitions stalled)."),
            std::string::npos);
}

// What the console prints for a run of `cases` and `allreduces`, every case having run
// `repetitions` times: its lines, as main prints them.
std::vector<std::string> console_of(const std::vector<CaseSpec>& cases, const std::vector<AllreduceCase>& allreduces,
                                    const Options& options) {
  std::deque<CaseResult> results;
  for (const auto& spec : cases) {
    if (!spec.skip_reason.empty()) continue;
    CaseResult result;
    result.name = benchmark_name(spec.name, fixed_iterations(spec, options));
    result.fields = spec.fields;
    result.repetitions = static_cast<size_t>(options.repetitions);
    const double ms = 40.0 / spec.gpus + 7.25;
    result.counters["step_ms"] = Spread::of({ms, ms * 1.01, ms * 0.99, ms * 1.02, ms * 0.98});
    result.counters["items_per_second"] = Spread::of({120e3 / ms, 120e3 / ms * 1.01, 120e3 / ms * 0.99});
    result.counters["mfu"] = Spread::of({0.4123});
    result.counters["peak_mem_gib_dev0"] = Spread::of({12.3456});
    results.push_back(result);
  }
  for (const auto& allreduce : allreduces) {
    CaseResult result;
    result.name = allreduce.name + "/iterations:10/manual_time";
    result.repetitions = static_cast<size_t>(options.repetitions);
    result.counters["time_ms"] = Spread::of({1.2345});
    result.counters["algbw_gbps"] = Spread::of({123.45});
    result.counters["busbw_gbps"] = Spread::of({123.45});
    results.push_back(result);
  }
  std::vector<std::string> lines;
  const CaseResult* previous = nullptr;
  std::vector<const CaseResult*> all;
  for (const auto& result : results) {
    const CaseResult* single = nullptr;
    for (const auto& other : results) {
      if (other.field("strategy") == "single" && other.train() && setup_of(other) == setup_of(result)) single = &other;
    }
    for (const auto& line : case_lines(result, previous, result.train() ? single : nullptr)) lines.push_back(line);
    previous = &result;
    all.push_back(&result);
  }
  lines.push_back("");
  for (const auto& line : verdict_lines(verdicts(all))) lines.push_back(line);
  return lines;
}

// The default run: parbench with no flags on 2 GPUs ran 45 cases (34 training cases, 30 of them
// pipeline's 10 splits x 3 schedules, and the 11 all-reduce sizes). Its stdout, one line per
// case and the verdict, fits in 60 lines of at most 120 columns. zero and tensor_parallel run where
// --strategies names them (StrategyInfo::opt_in), so the default run is as it was.
TEST(Verdict, TheDefaultRunOnTwoGpusPrintsAtMostSixtyLinesOfAtMost120Columns) {
  const auto options = parsed_options({}, /*has_gpu=*/true);
  const auto cases = build_cases(options, /*visible_gpus=*/2);
  const auto allreduces = build_allreduce_cases(options, 2);
  ASSERT_EQ(cases.size() + allreduces.size(), 45u);
  const auto lines = console_of(cases, allreduces, options);
  std::string text;
  for (const auto& line : lines) text += line + "\n";
  EXPECT_LE(lines.size(), 60u) << text;
  std::printf("the default run on 2 GPUs prints %zu lines\n", lines.size());
  for (const auto& line : lines) EXPECT_LE(columns(line), kConsoleWidth) << line;
  EXPECT_NE(text.find("Verdict for resnet50, batch 120, image 128×128, fp32, data on device"), std::string::npos) << text;
  EXPECT_NE(text.find("  Best pipeline split per schedule: tutorial 1 ("), std::string::npos) << text;
  // One line per case: every training case's strategy and config, once.
  EXPECT_NE(text.find("  pipeline gpus:2/split:20/schedule:1f1b "), std::string::npos) << text;
  EXPECT_NE(text.find("  bytes:1024/ranks:2 "), std::string::npos) << text;
}

// Long configs and set-ups still fit: the label goes on a line of its own.
TEST(Verdict, LongLabelsWrapInsteadOfWideningTheLines) {
  const auto options = parsed_options({"--models=gpt2-medium", "--batch=8,16", "--precision=bf16", "--cuda-graph=on",
                                       "--strategies=single,pipeline", "--schedules=interleaved-1f1b",
                                       "--split-sizes=1", "--stage-lanes=2", "--devices=0,0"},
                                      /*has_gpu=*/true);
  const auto lines = console_of(build_cases(options, 2), {}, options);
  for (const auto& line : lines) EXPECT_LE(columns(line), kConsoleWidth) << line;
}

}  // namespace
}  // namespace parbench
