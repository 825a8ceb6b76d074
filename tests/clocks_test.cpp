// Clocks and throttling per repetition (docs/METRICS.md, "Clocks and throttling") and the
// stopping rule by noise (docs/METRICS.md, "Stopping by noise"): the rules as pure functions,
// then whole CPU runs with the fake libnvidia-ml.so.1 (tests/fake_nvml.cpp) standing in for a
// GPU through the test hook PARBENCH_TEST_NVML_DEVICE. Nothing here depends on how fast a run is.
#include "benchmarks/config/options.h"
#include "benchmarks/launch/temporary_directory.h"
#include "benchmarks/measure/noise_rule.h"
#include "benchmarks/measure/nvml.h"
#include "tests/parbench_process.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <iterator>

namespace parbench {
namespace {

constexpr double kDeadline = 300;

// --- the throttle rule -------------------------------------------------------------------------

RepetitionClocks clocks(double sm, double max, uint64_t reasons, bool idle_after = false) {
  RepetitionClocks result;
  result.sm_clock_mhz = sm;
  result.sm_clock_max_mhz = max;
  result.reasons = reasons;
  result.idle_after = idle_after;
  return result;
}

TEST(Throttle, AThrottlingReasonFlagsARepetition) {
  for (const uint64_t reason : {kClockEventSwPowerCap, kClockEventHwSlowdown, kClockEventSyncBoost,
                                kClockEventSwThermalSlowdown, kClockEventHwThermalSlowdown,
                                kClockEventHwPowerBrakeSlowdown, kClockEventDisplayClockSetting}) {
    EXPECT_TRUE(throttled(clocks(1980, 1980, reason), 0.9)) << clock_event_names(reason);
  }
}

TEST(Throttle, IdleAndApplicationsClocksAreNotThrottling) {
  EXPECT_FALSE(throttled(clocks(1980, 1980, 0), 0.9));
  EXPECT_FALSE(throttled(clocks(1980, 1980, kClockEventGpuIdle), 0.9));
  EXPECT_FALSE(throttled(clocks(1980, 1980, kClockEventApplicationsClocksSetting), 0.9));
  EXPECT_TRUE(throttled(clocks(1980, 1980, kClockEventGpuIdle | kClockEventSwPowerCap), 0.9));
}

TEST(Throttle, AClockBelowTheThresholdFlagsARepetitionUnlessTheGpuWasIdle) {
  EXPECT_FALSE(throttled(clocks(1782, 1980, 0), 0.9)) << "exactly 90%";
  EXPECT_TRUE(throttled(clocks(1781, 1980, 0), 0.9));
  EXPECT_FALSE(throttled(clocks(1000, 1980, 0), 0.5));
  EXPECT_TRUE(throttled(clocks(1979, 1980, 0), 1.0));
  EXPECT_FALSE(throttled(clocks(345, 1980, kClockEventGpuIdle, /*idle_after=*/true), 0.9))
      << "an idle GPU's low clock is not throttling";
  RepetitionClocks unknown;  // NVML answered nothing
  EXPECT_FALSE(throttled(unknown, 0.9));
}

TEST(Throttle, ARepetitionTakesTheClockAfterItAndTheReasonsOfBothSamples) {
  ClockSample before, after;
  before.sm_clock_mhz = 1100;
  before.sm_clock_max_mhz = 1980;
  before.reasons = kClockEventSwThermalSlowdown;
  after.sm_clock_mhz = 1950;
  after.power_w = 650.5;
  after.temperature_c = 71;
  after.reasons = kClockEventSwPowerCap;
  const auto repetition = RepetitionClocks::from(before, after);
  EXPECT_EQ(repetition.sm_clock_mhz, 1950);
  EXPECT_EQ(repetition.sm_clock_max_mhz, 1980) << "from the sample that has it";
  EXPECT_EQ(repetition.power_w, 650.5);
  EXPECT_EQ(repetition.temperature_c, 71);
  EXPECT_EQ(repetition.reasons, kClockEventSwThermalSlowdown | kClockEventSwPowerCap);
  EXPECT_FALSE(repetition.idle_after);
  const auto back = RepetitionClocks::from_json(repetition.to_json());
  EXPECT_EQ(back.to_json(), repetition.to_json());
  EXPECT_EQ(clock_event_names(repetition.reasons.value()), "sw_power_cap,sw_thermal_slowdown");
  EXPECT_EQ(clock_event_names(0), "none");
  EXPECT_EQ(clock_event_names(1ULL << 40), "other");
}

// --- the noise rule ----------------------------------------------------------------------------

TEST(NoiseRule, RelativeSpreadIsTheSampleStandardDeviationOverTheMean) {
  EXPECT_EQ(relative_spread({}), 0);
  EXPECT_EQ(relative_spread({5.0}), 0);
  EXPECT_DOUBLE_EQ(relative_spread({2.0, 4.0}), std::sqrt(2.0) / 3.0);
  EXPECT_DOUBLE_EQ(relative_spread({1.0, 1.0, 1.0}), 0.0);
}

TEST(NoiseRule, StopsWithinTheBoundAfterTheMinimumOrAtTheMaximum) {
  const NoiseRule rule{0.01, 3, 6};
  EXPECT_FALSE(noise_rule_stops({1.0, 1.0}, rule)) << "below the minimum";
  EXPECT_TRUE(noise_rule_stops({1.0, 1.0, 1.0}, rule));
  EXPECT_TRUE(noise_rule_stops({1.0, 1.001, 0.999}, rule));
  EXPECT_FALSE(noise_rule_stops({1.0, 1.5, 0.7}, rule));
  EXPECT_FALSE(noise_rule_stops({1.0, 1.5, 0.7, 1.0, 1.2}, rule));
  EXPECT_TRUE(noise_rule_stops({1.0, 1.5, 0.7, 1.0, 1.2, 0.9}, rule)) << "the maximum";
}

TEST(NoiseRule, AFirstRepetitionsProbesReplaceEachOther) {
  // Google Benchmark's min-time rule calls the first repetition with 1, 10, 100 iterations; the
  // last call is the repetition, and the later repetitions run 100 iterations too.
  NoiseTracker tracker({0.01, 3, 10});
  tracker.add(1, 9.0);
  tracker.add(10, 3.0);
  tracker.add(100, 1.0);
  EXPECT_EQ(tracker.outcome().repetitions, 1);
  tracker.add(100, 1.0);
  EXPECT_FALSE(tracker.stopped());
  tracker.add(100, 1.0);
  EXPECT_TRUE(tracker.stopped());
  const auto outcome = tracker.outcome();
  EXPECT_EQ(outcome.repetitions, 3);
  EXPECT_TRUE(outcome.reached);
  EXPECT_EQ(outcome.relative_spread, 0);
  tracker.add(100, 5.0);  // a call after the stop changes nothing
  EXPECT_EQ(tracker.outcome().repetitions, 3);
}

TEST(NoiseRule, AtTheMaximumTheBoundIsRecordedAsNotReached) {
  NoiseTracker tracker({0.001, 2, 3});
  for (const double time : {1.0, 2.0, 1.0}) tracker.add(5, time);
  ASSERT_TRUE(tracker.stopped());
  EXPECT_FALSE(tracker.outcome().reached);
  EXPECT_GT(tracker.outcome().relative_spread, 0.001);
  const auto json = tracker.outcome().to_json();
  EXPECT_EQ(json.at("repetitions"), 3);
  EXPECT_EQ(json.at("reached"), false);
}

TEST(NoiseRule, ReportsDropTheRepetitionsThatDidNotRun) {
  using Run = benchmark::BenchmarkReporter::Run;
  std::vector<Run> runs(4);
  for (size_t i = 0; i < runs.size(); ++i) {
    runs[i].run_name.function_name = "train/x";
    runs[i].repetitions = 3;
    runs[i].repetition_index = static_cast<int64_t>(i);
  }
  runs[2].error_occurred = true;
  runs[2].error_message = kNoiseStopMessage;
  runs[3].run_type = Run::RT_Aggregate;
  const auto kept = without_unrun_repetitions(runs);
  ASSERT_EQ(kept.size(), 3u);
  for (const auto& run : kept) EXPECT_EQ(run.repetitions, 2) << "the repetitions that ran";
  EXPECT_EQ(kept[2].run_type, Run::RT_Aggregate);
  // Google Benchmark reports the aggregates in a call of their own.
  Run aggregate = runs[3];
  aggregate.iterations = 3;
  const auto aggregates = without_unrun_repetitions({aggregate});
  ASSERT_EQ(aggregates.size(), 1u);
  EXPECT_EQ(aggregates[0].repetitions, 2);
  EXPECT_EQ(aggregates[0].iterations, 2) << "an aggregate is over the repetitions that ran";
}

// --- the flags ----------------------------------------------------------------------------------

// The one line parbench prints for `flags`, with its exit status 2; "" if it did not exit 2.
std::string usage_error(const std::vector<std::string>& flags) {
  auto arguments = flags;
  arguments.insert(arguments.begin(), {"--preset=cpu", "--models=tinycnn", "--strategies=single"});
  ParbenchProcess parbench(arguments, {{"CUDA_VISIBLE_DEVICES", ""}});
  const auto run = parbench.wait(kDeadline);
  if (run.exit_code != 2) return "";
  return run.err;
}

TEST(NoiseRule, BadFlagsAreOneLineUsageErrors) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--max-noise=-1"}, "--max-noise=-1 must be above 0%"},
      {{"--max-noise=abc"}, "--max-noise=abc is not a percentage"},
      {{"--max-noise=0%"}, "--max-noise=0% must be above 0%"},
      {{"--max-noise=inf"}, "--max-noise=inf is not a percentage"},
      {{"--max-noise=1%", "--min-repetitions=5", "--max-repetitions=3"}, "--min-repetitions=5 is more than --max-repetitions=3"},
      {{"--max-noise=1%", "--min-repetitions=1"}, "--min-repetitions=1 must be at least 2"},
      {{"--max-noise=1%", "--max-repetitions=1e30"}, "--max-repetitions=1e30 is not a whole number"},
      {{"--min-repetitions=3"}, "apply only with --max-noise"},
      {{"--max-noise=1%", "--benchmark_repetitions=3"}, "not --benchmark_repetitions"},
      {{"--throttle-threshold=0"}, "--throttle-threshold=0 must be greater than 0"},
      {{"--throttle-threshold=1.5"}, "--throttle-threshold=1.5 must be above 0 and at most 1"},
      {{"--throttle-threshold=abc"}, "--throttle-threshold=abc is not a number"},
  };
  for (const auto& [flags, expected] : cases) {
    const auto err = usage_error(flags);
    EXPECT_NE(err.find(expected), std::string::npos) << flags.back() << ": " << err;
    EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << flags.back() << ": " << err;
  }
}

// --- whole runs with the fake NVML --------------------------------------------------------------

struct Run {
  nlohmann::json json;
  ProcessRun process;
  std::vector<nlohmann::json> repetitions(const std::string& strategy) const {
    std::vector<nlohmann::json> found;
    for (const auto& entry : json.at("benchmarks")) {
      if (entry.at("run_type") == "iteration" && entry.at("name").get<std::string>().rfind("train/" + strategy + "/", 0) == 0) {
        found.push_back(entry);
      }
    }
    return found;
  }
};

Run run_parbench(const std::vector<std::string>& flags, std::map<std::string, std::string> environment) {
  TemporaryDirectory dir("parbench-clocks-test");
  const auto out = dir.file("run.json");
  std::vector<std::string> arguments = {"--preset=cpu", "--models=tinycnn", "--batch=2", "--image=16", "--warmup=1",
                                        "--iterations=2", "--allreduce=off", "--busy-profile=off",
                                        "--benchmark_out=" + out};
  arguments.insert(arguments.end(), flags.begin(), flags.end());
  environment["CUDA_VISIBLE_DEVICES"] = "";
  environment["OMP_NUM_THREADS"] = "1";
  ParbenchProcess parbench(arguments, environment);
  Run run;
  run.process = parbench.wait(kDeadline);
  EXPECT_EQ(run.process.exit_code, 0) << run.process.err;
  run.json = read_json(out);
  return run;
}

std::map<std::string, std::string> fake_gpu(std::map<std::string, std::string> more = {}) {
  more["LD_LIBRARY_PATH"] = FAKE_NVML_DIR;
  more["PARBENCH_TEST_NVML_DEVICE"] = "0";
  return more;
}

TEST(Clocks, AThrottledFakeGpuFlagsEveryRepetition) {
  const auto run = run_parbench({"--strategies=single", "--repetitions=2"},
                                fake_gpu({{"FAKE_NVML_SM_CLOCK_MHZ", "1980"}, {"FAKE_NVML_CLOCK_EVENT_REASONS", "0x20"}}));
  EXPECT_EQ(run.json.at("context").at("clock_sampling"), "ok");
  EXPECT_EQ(run.json.at("context").at("throttle_threshold"), "0.9");
  EXPECT_EQ(run.json.at("context").at("parbench_json_schema"), "1.17.0");
  const auto repetitions = run.repetitions("single");
  ASSERT_EQ(repetitions.size(), 2u);
  for (const auto& entry : repetitions) {
    EXPECT_EQ(entry.at("throttled"), 1) << entry.dump();
    EXPECT_EQ(entry.at("throttle_reasons_dev0"), 0x20);
    EXPECT_EQ(entry.at("sm_clock_mhz_dev0"), 1980);
    EXPECT_EQ(entry.at("sm_clock_max_mhz_dev0"), 1980);
    EXPECT_DOUBLE_EQ(entry.at("power_w_dev0").get<double>(), 312.5);
    EXPECT_EQ(entry.at("temperature_c_dev0"), 64);
  }
}

TEST(Clocks, ACoolFakeGpuIsNotFlagged) {
  const auto run = run_parbench({"--strategies=single", "--repetitions=2"}, fake_gpu({{"FAKE_NVML_SM_CLOCK_MHZ", "1980"}}));
  for (const auto& entry : run.repetitions("single")) {
    EXPECT_EQ(entry.at("throttled"), 0) << entry.dump();
    EXPECT_EQ(entry.at("throttle_reasons_dev0"), 0);
  }
}

TEST(Clocks, ALowClockIsFlaggedBelowTheThresholdOnly) {
  const auto low = run_parbench({"--strategies=single", "--repetitions=1"}, fake_gpu({{"FAKE_NVML_SM_CLOCK_MHZ", "1000"}}));
  EXPECT_EQ(low.repetitions("single").at(0).at("throttled"), 1);
  const auto lenient = run_parbench({"--strategies=single", "--repetitions=1", "--throttle-threshold=0.5"},
                                    fake_gpu({{"FAKE_NVML_SM_CLOCK_MHZ", "1000"}}));
  EXPECT_EQ(lenient.repetitions("single").at(0).at("throttled"), 0);
  EXPECT_EQ(lenient.json.at("context").at("throttle_threshold"), "0.5");
}

TEST(Clocks, ADriverBefore535IsReadThroughTheDeprecatedName) {
  const auto run = run_parbench({"--strategies=single", "--repetitions=1"},
                                fake_gpu({{"FAKE_NVML_SM_CLOCK_MHZ", "1980"}, {"FAKE_NVML_CLOCK_EVENT_REASONS", "4"},
                                          {"FAKE_NVML_OLD_DRIVER", "1"}}));
  const auto entry = run.repetitions("single").at(0);
  EXPECT_EQ(entry.at("throttle_reasons_dev0"), 4);
  EXPECT_EQ(entry.at("throttled"), 1);
}

TEST(Clocks, SamplesAreTakenAroundRepetitionsNeverInsideTheStepLoop) {
  // 3 repetitions of 25 iterations of 2 steps: a sample before and after each repetition, 6 in
  // all, however many steps run.
  TemporaryDirectory dir("parbench-clocks-calls");
  const auto log = dir.file("calls.log");
  run_parbench({"--strategies=single", "--repetitions=3", "--iterations=25", "--steps=2"},
               fake_gpu({{"FAKE_NVML_SM_CLOCK_MHZ", "1980"}, {"FAKE_NVML_CALL_LOG", log}}));
  std::ifstream file(log);
  const auto samples = std::count(std::istreambuf_iterator<char>(file), std::istreambuf_iterator<char>(), '\n');
  EXPECT_EQ(samples, 6);
}

TEST(Clocks, DdpRanksSampleTheirOwnGpuAndHandItBack) {
  const auto run = run_parbench({"--strategies=ddp", "--repetitions=2"},
                                fake_gpu({{"FAKE_NVML_SM_CLOCK_MHZ", "1980"}, {"FAKE_NVML_CLOCK_EVENT_REASONS", "0x40"}}));
  const auto repetitions = run.repetitions("ddp");
  ASSERT_EQ(repetitions.size(), 2u);
  for (const auto& entry : repetitions) {
    EXPECT_EQ(entry.at("throttled"), 1) << entry.dump();
    for (const char* rank : {"dev0", "dev1"}) {
      EXPECT_EQ(entry.at(std::string("throttle_reasons_") + rank), 0x40) << entry.dump();
      EXPECT_EQ(entry.at(std::string("sm_clock_mhz_") + rank), 1980);
    }
  }
}

TEST(Clocks, WithoutNvmlNothingIsSampledAndTheContextSaysWhy) {
  TemporaryDirectory empty("parbench-no-nvml");
  const auto run = run_parbench({"--strategies=single", "--repetitions=1"}, {{"LD_LIBRARY_PATH", empty.path()}});
  const auto sampling = run.json.at("context").at("clock_sampling").get<std::string>();
  EXPECT_EQ(sampling.rfind("unavailable: ", 0), 0u) << sampling;
  for (const auto& entry : run.repetitions("single")) {
    EXPECT_FALSE(entry.contains("throttled")) << entry.dump();
    EXPECT_FALSE(entry.contains("sm_clock_mhz_dev0")) << entry.dump();
  }
}

// --- whole runs under the noise rule ------------------------------------------------------------

// A bound every two positive times meet (their relative spread is at most sqrt(2)), and one no
// two different times can (they would have to agree to 14 digits).
const std::string kAlwaysMet = "--max-noise=1000%";
const std::string kNeverMet = "--max-noise=1e-12%";

void expect_noise(const Run& run, const std::string& strategy, size_t repetitions, bool reached) {
  const auto entries = run.repetitions(strategy);
  ASSERT_EQ(entries.size(), repetitions) << run.json.dump(1);
  for (size_t i = 0; i < entries.size(); ++i) {
    const auto& entry = entries[i];
    EXPECT_FALSE(entry.value("error_occurred", false)) << entry.dump();
    EXPECT_EQ(entry.at("repetition_index"), i);
    EXPECT_EQ(entry.at("repetitions"), repetitions);
    const auto& noise = entry.at("noise");
    EXPECT_EQ(noise.at("reached"), reached) << noise.dump();
    EXPECT_EQ(noise.at("repetitions"), repetitions);
    EXPECT_GE(noise.at("relative_spread").get<double>(), 0.0);
  }
  size_t aggregates = 0;
  for (const auto& entry : run.json.at("benchmarks")) {
    if (entry.at("run_type") == "aggregate" && entry.at("name").get<std::string>().rfind("train/" + strategy + "/", 0) == 0) {
      ++aggregates;
      EXPECT_EQ(entry.at("repetitions"), repetitions);
    }
  }
  EXPECT_EQ(aggregates, 4u) << "mean, median, stddev, cv over the repetitions that ran";
  EXPECT_NE(run.process.err.find("1 ran, 0 skipped, 0 failed"), std::string::npos) << run.process.err;
}

TEST(NoiseRuleRun, ACaseStopsAtTheMinimumOnceTheNoiseIsReached) {
  const auto run = run_parbench({"--strategies=single", kAlwaysMet, "--min-repetitions=3", "--max-repetitions=8"}, {});
  expect_noise(run, "single", 3, true);
  EXPECT_EQ(run.json.at("context").at("max_noise"), "10");
  EXPECT_EQ(run.json.at("context").at("min_repetitions"), "3");
}

TEST(NoiseRuleRun, ACaseThatNeverReachesTheNoiseStopsAtTheMaximum) {
  const auto run = run_parbench({"--strategies=single", kNeverMet, "--min-repetitions=2", "--max-repetitions=4"}, {});
  expect_noise(run, "single", 4, false);
}

TEST(NoiseRuleRun, DdpRanksStopTogether) {
  const auto run = run_parbench({"--strategies=ddp", kAlwaysMet, "--min-repetitions=2", "--max-repetitions=5"}, {});
  expect_noise(run, "ddp", 2, true);
}

}  // namespace
}  // namespace parbench
