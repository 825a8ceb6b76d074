// Every number parbench reports, from fixed inputs (docs/METRICS.md): each test fails when its
// formula changes. MFU against fixed peaks, TFLOP/s as three forwards, ddp's global batch,
// the slowest rank's time, the timer's span over every device, the busy and bubble fractions.
// The DeviceTimerGpu tests need GPUs and skip, with the reason, without them.
#include "benchmarks/cases/cases.h"
#include "benchmarks/launch/rank_results.h"
#include "benchmarks/measure/memory.h"
#include "benchmarks/measure/mfu.h"
#include "benchmarks/output/counters.h"
#include "core/device_timer.h"
#include "models/model_zoo.h"
#include "strategies/training.h"
#include "tests/case_options.h"

#include <gtest/gtest.h>

#ifdef PARBENCH_WITH_CUDA
#include <ATen/cuda/CUDAEvent.h>
#include <ATen/cuda/Sleep.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

#include <chrono>
#include <thread>

namespace parbench {
namespace {

double counter(const benchmark::UserCounters& counters, const std::string& name) {
  const auto found = counters.find(name);
  if (found == counters.end()) {
    ADD_FAILURE() << "no counter " << name;
    return -1;
  }
  return found->second.value;
}

// ---- MFU ---------------------------------------------------------------------------------------

ComputePeaks h100_bf16_peaks() {
  ComputePeaks peaks;
  peaks.math = "bf16";
  peaks.gpu_name = "NVIDIA H100 80GB HBM3";
  peaks.datasheet = DatasheetPeak{989.4e12, "NVIDIA H100 Tensor Core GPU datasheet (SXM), dense bf16"};
  peaks.gemm_flops = 700e12;
  return peaks;
}

TEST(Mfu, DividesByThePeakTimesTheGpus) {
  for (const int gpus : {1, 2, 4}) {
    benchmark::UserCounters counters;
    std::map<std::string, std::string> facts;
    // 400 TFLOP/s achieved over the GPUs.
    add_mfu(h100_bf16_peaks(), 400e12, gpus, counters, facts);
    EXPECT_DOUBLE_EQ(counter(counters, "mfu"), 400.0 / (989.4 * gpus)) << gpus << " GPUs";
    EXPECT_DOUBLE_EQ(counter(counters, "mfu_gemm"), 400.0 / (700.0 * gpus)) << gpus << " GPUs";
    // The peaks are per GPU, whatever the count.
    EXPECT_DOUBLE_EQ(counter(counters, "peak_tflops"), 989.4);
    EXPECT_DOUBLE_EQ(counter(counters, "gemm_tflops"), 700.0);
    EXPECT_EQ(facts["peak_math"], "bf16");
    EXPECT_EQ(facts["peak_source"], "NVIDIA H100 Tensor Core GPU datasheet (SXM), dense bf16");
  }
}

// Which TF32 switch decides an fp32 model's peak is the model's declared fp32 engine: cuDNN's for
// the convolution networks, cuBLAS's for the transformers (as before the registry, when it was
// chosen by "language model").
// Every case's runner hands add_mfu the GPUs the case runs on: its distinct GPUs, so two stages
// placed on one GPU share that GPU's peak, and ddp's ranks each bring their own.
TEST(Mfu, ACaseIsJudgedAgainstTheGpusItRunsOn) {
  const auto mfu_of = [](int gpus, std::vector<int> gpu_ids) {
    CaseSpec spec;
    spec.gpus = gpus;
    spec.gpu_ids = std::move(gpu_ids);
    benchmark::UserCounters counters;
    std::map<std::string, std::string> facts;
    add_case_mfu(h100_bf16_peaks(), 400e12, spec, counters, facts);
    return std::make_pair(counter(counters, "mfu"), counter(counters, "mfu_gemm"));
  };
  EXPECT_DOUBLE_EQ(mfu_of(1, {}).first, 400.0 / 989.4);
  EXPECT_DOUBLE_EQ(mfu_of(4, {}).first, 400.0 / (989.4 * 4));
  EXPECT_DOUBLE_EQ(mfu_of(4, {}).second, 400.0 / (700.0 * 4));
  EXPECT_DOUBLE_EQ(mfu_of(2, {3, 5}).first, 400.0 / (989.4 * 2));
  EXPECT_DOUBLE_EQ(mfu_of(2, {1, 1}).first, 400.0 / 989.4) << "two stages on one GPU: one GPU's peak";
}

TEST(Mfu, TheModelsFp32EngineChoosesTheTf32SwitchThatSetsItsPeak) {
  auto& context = at::globalContext();
  const bool cudnn_was = context.allowTF32CuDNN(), cublas_was = context.allowTF32CuBLAS();
  const auto engine = [](const std::string& model) { return ModelRegistry::instance().get(model).fp32_engine; };
  for (const std::string model : {"resnet18", "resnet50", "resnet152", "tinycnn"}) {
    EXPECT_EQ(engine(model), Fp32Engine::kCudnnConvolution) << model;
  }
  for (const std::string model : {"gpt2-small", "gpt2-large", "tinygpt"}) {
    EXPECT_EQ(engine(model), Fp32Engine::kCublasMatmul) << model;
  }
  for (const bool cudnn : {false, true}) {
    context.setAllowTF32CuDNN(cudnn);
    context.setAllowTF32CuBLAS(!cudnn);
    EXPECT_EQ(peak_math(Precision::kFloat32, engine("resnet50")), cudnn ? "tf32" : "fp32");
    EXPECT_EQ(peak_math(Precision::kFloat32, engine("tinygpt")), cudnn ? "fp32" : "tf32");
    EXPECT_EQ(peak_math(Precision::kBFloat16, engine("resnet50")), "bf16");
    EXPECT_EQ(peak_math(Precision::kBFloat16, engine("tinygpt")), "bf16");
  }
  context.setAllowTF32CuDNN(cudnn_was);
  context.setAllowTF32CuBLAS(cublas_was);
}

TEST(Mfu, AGpuOutsideTheTableGetsOnlyTheGemmFigure) {
  auto peaks = h100_bf16_peaks();
  peaks.gpu_name = "Imaginary GPU";
  peaks.datasheet.reset();
  benchmark::UserCounters counters;
  std::map<std::string, std::string> facts;
  add_mfu(peaks, 350e12, 2, counters, facts);
  EXPECT_DOUBLE_EQ(counter(counters, "mfu_gemm"), 350.0 / 1400.0);
  EXPECT_EQ(counters.count("mfu"), 0u);
  EXPECT_EQ(counters.count("peak_tflops"), 0u);
  EXPECT_EQ(facts["peak_source"], "none: Imaginary GPU is not in the datasheet table (benchmarks/measure/mfu.cpp)");
}

TEST(Mfu, DatasheetPeaksByGpuAndMath) {
  const auto sxm = datasheet_peak("NVIDIA H100 80GB HBM3", "bf16");
  ASSERT_TRUE(sxm);
  EXPECT_DOUBLE_EQ(sxm->flops, 989.4e12);
  EXPECT_DOUBLE_EQ(datasheet_peak("NVIDIA H100 80GB HBM3", "tf32")->flops, 494.7e12);
  EXPECT_DOUBLE_EQ(datasheet_peak("NVIDIA H100 80GB HBM3", "fp32")->flops, 66.9e12);
  EXPECT_DOUBLE_EQ(datasheet_peak("NVIDIA H100 PCIe", "bf16")->flops, 756e12);
  EXPECT_DOUBLE_EQ(datasheet_peak("NVIDIA H200", "bf16")->flops, 989.4e12);
  EXPECT_DOUBLE_EQ(datasheet_peak("NVIDIA A100-SXM4-80GB", "tf32")->flops, 156e12);
  EXPECT_FALSE(datasheet_peak("Tesla T4", "bf16"));
}

// ---- Training counters -------------------------------------------------------------------------

const CaseSpec& only_case(const std::vector<CaseSpec>& cases) {
  EXPECT_EQ(cases.size(), 1u);
  return cases.front();
}

TEST(TrainingCounters, TflopsCountTrainingAsThreeForwards) {
  Options options;
  options.strategies = {"single"};
  options.models = {"tinycnn"};
  options.batch_sizes = {4};
  options.image_sizes = {16};
  const auto cases = build_cases(options, /*visible_gpus=*/0);
  const auto& spec = only_case(cases);
  ASSERT_EQ(spec.global_batch, 4);
  // 10 steps of 4 samples in 2 s, 1 GFLOP per sample's forward.
  const auto training = training_counters(spec, /*seconds=*/2.0, /*steps=*/10, /*params=*/123, 1e9);
  EXPECT_DOUBLE_EQ(training.samples, 40);
  EXPECT_DOUBLE_EQ(counter(training.counters, "tflops"), 3 * 1e9 * 40 / 2.0 / 1e12);
  EXPECT_DOUBLE_EQ(counter(training.counters, "step_ms"), 200);
  EXPECT_DOUBLE_EQ(counter(training.counters, "batch"), 4);
  EXPECT_DOUBLE_EQ(counter(training.counters, "params"), 123);
  EXPECT_DOUBLE_EQ(counter(training.counters, "image"), 16);
  EXPECT_DOUBLE_EQ(counter(training.counters, "gpus"), 1);
}

TEST(TrainingCounters, LanguageModelsCountTokens) {
  Options options;
  options.strategies = {"single"};
  options.models = {"tinygpt"};
  options.batch_sizes = {4};
  options.seq_lens = {16};
  const auto& spec = only_case(build_cases(options, 0));
  const auto training = training_counters(spec, 2.0, 10, 1, 1e6);
  EXPECT_DOUBLE_EQ(counter(training.counters, "tokens_per_second"), 40 * 16 / 2.0);
  EXPECT_DOUBLE_EQ(counter(training.counters, "seq"), 16);
  EXPECT_DOUBLE_EQ(counter(training.counters, "tflops"), 3 * 1e6 * 40 / 2.0 / 1e12);
}

// ddp's --batch is per rank in weak scaling: the step trains ranks x --batch samples, which
// `batch` and images/s count. In strong scaling --batch is the global batch.
TEST(TrainingCounters, DdpCountsEveryRanksBatch) {
  Options options;
  options.strategies = {"ddp"};
  options.models = {"tinycnn"};
  options.batch_sizes = {4};
  options.image_sizes = {16};
  options.strategy_options = {{"scaling", {"weak", "strong"}}, {"overlap", {"on"}}, {"bucket_mib", {"25"}}};
  for (const int ranks : {2, 4}) {
    options.gpus = ranks;
    const auto cases = build_cases(options, /*visible_gpus=*/0);
    ASSERT_EQ(cases.size(), 2u);
    for (const auto& spec : cases) {
      const bool strong = spec.config.options.at("scaling") == "strong";
      ASSERT_EQ(spec.gpus, ranks) << spec.name;
      EXPECT_EQ(spec.config.batch_size, strong ? 4 / ranks : 4) << spec.name;  // per rank
      const int64_t global = strong ? 4 : 4 * ranks;
      EXPECT_EQ(spec.global_batch, global) << spec.name;
      const auto training = training_counters(spec, /*seconds=*/2.0, /*steps=*/10, 1, 1e9);
      EXPECT_DOUBLE_EQ(counter(training.counters, "batch"), static_cast<double>(global)) << spec.name;
      EXPECT_DOUBLE_EQ(training.samples, 10.0 * static_cast<double>(global)) << spec.name;  // items/s = this / 2 s
      EXPECT_DOUBLE_EQ(counter(training.counters, "tflops"), 3 * 1e9 * 10.0 * static_cast<double>(global) / 2.0 / 1e12);
      EXPECT_DOUBLE_EQ(counter(training.counters, "gpus"), ranks);
    }
  }
}

// ---- Busy and bubble fractions -----------------------------------------------------------------

TEST(DeviceCounters, BusyIsBusyTimeOverTheStepAndBubbleTheRest) {
  const std::vector<double> peak_bytes = {1024.0 * 1024 * 1024 * 3, 512.0 * 1024 * 1024};
  // A step of 50 ms: device 0 busy 30 ms, device 1 10 ms, device 2 (clock skew) 60 ms.
  const auto counters = device_counters(peak_bytes, {0.030, 0.010, 0.060}, 0.050);
  EXPECT_DOUBLE_EQ(counter(counters, "peak_mem_gib_dev0"), 3.0);
  EXPECT_DOUBLE_EQ(counter(counters, "peak_mem_gib_dev1"), 0.5);
  EXPECT_DOUBLE_EQ(counter(counters, "busy_frac_dev0"), 0.6);
  EXPECT_DOUBLE_EQ(counter(counters, "bubble_frac_dev0"), 1 - 0.6);
  EXPECT_DOUBLE_EQ(counter(counters, "busy_frac_dev1"), 0.2);
  EXPECT_DOUBLE_EQ(counter(counters, "bubble_frac_dev1"), 1 - 0.2);
  EXPECT_DOUBLE_EQ(counter(counters, "busy_frac_dev2"), 1.0);  // never above the step
  EXPECT_DOUBLE_EQ(counter(counters, "bubble_frac_dev2"), 0.0);
  EXPECT_EQ(counters.count("peak_mem_gib_dev2"), 0u);
  // Not measured (CPU, --busy-profile=off): no fractions at all.
  const auto unmeasured = device_counters({}, {}, 0.050);
  EXPECT_TRUE(unmeasured.empty());
}

// ---- Stalls inside a repetition -----------------------------------------------------------------

TEST(StallCounters, TheSlowestIterationOverTheMedianFlagsAStall) {
  // Five iterations of 10 ms, one of them 50 ms: 5 times the median.
  auto counters = stall_counters({0.010, 0.050, 0.010, 0.010, 0.010});
  EXPECT_DOUBLE_EQ(counter(counters, "iteration_max_over_median"), 5.0);
  EXPECT_DOUBLE_EQ(counter(counters, "stalled"), 1.0);
  // Just below the ratio: not flagged.
  counters = stall_counters({0.010, 0.0299, 0.010});
  EXPECT_NEAR(counter(counters, "iteration_max_over_median"), 2.99, 1e-12);
  EXPECT_EQ(counters.count("stalled"), 0u);  // absent, not 0 (a mean of 0 has a NaN coefficient of variation)
  // At the ratio, with an even count (median 0.015): flagged.
  counters = stall_counters({0.010, 0.020, 0.045, 0.010});
  EXPECT_DOUBLE_EQ(counter(counters, "iteration_max_over_median"), 3.0);
  EXPECT_DOUBLE_EQ(counter(counters, "stalled"), 1.0);
  // Two iterations cannot tell a stall from the rest.
  counters = stall_counters({0.010, 0.100});
  EXPECT_EQ(counters.count("stalled"), 0u);
  EXPECT_TRUE(stall_counters({}).empty());
}

// ---- The slowest rank ---------------------------------------------------------------------------

RankMeasurements rank_measuring(std::vector<std::vector<double>> seconds, std::optional<double> peak = std::nullopt,
                                std::optional<double> busy = std::nullopt) {
  RankMeasurements measurements;
  measurements.seconds = std::move(seconds);
  measurements.peak_bytes = peak;
  measurements.busy_seconds = busy;
  return measurements;
}

// ddp's noise rule (--max-noise) judges each iteration at its slowest rank, as the reported times do.
TEST(CombineRanks, TheNoiseRuleReadsTheSlowestRanksTimes) {
  EXPECT_EQ(slowest_rank_times({"[1.0, 5.0, 2.0]", "[3.0, 2.0, 2.5]", "[2.0, 4.0, 0.5]"}),
            (std::vector<double>{3.0, 5.0, 2.5}));
  EXPECT_EQ(slowest_rank_times({"[0.25, 0.5]"}), (std::vector<double>{0.25, 0.5}));
}

TEST(CombineRanks, EachIterationTakesTheSlowestRank) {
  // Three ranks, two repetitions of three iterations; a different rank is slowest each time,
  // rank 0 in none of the first repetition's.
  const std::vector<RankMeasurements> ranks = {
      rank_measuring({{1.0, 1.0, 1.0}, {2.0, 1.0, 4.0}}, 100, 0.5),
      rank_measuring({{3.0, 1.5, 1.0}, {1.0, 1.0, 1.0}}, 200, 0.25),
      rank_measuring({{2.0, 5.0, 2.0}, {1.0, 3.0, 1.0}}, 300, 0.125),
  };
  RankedRun run;
  run.params = 7;
  const auto combined = combine_ranks(ranks, run);
  EXPECT_EQ(combined.params, 7);
  ASSERT_EQ(combined.repetitions.size(), 2u);
  EXPECT_EQ(combined.repetitions[0].seconds, (std::vector<double>{3.0, 5.0, 2.0}));
  EXPECT_EQ(combined.repetitions[1].seconds, (std::vector<double>{2.0, 3.0, 4.0}));
  // Repetition 0: the ranks' medians 1, 1.5, 2; (2 - 1) / 1.5.
  EXPECT_DOUBLE_EQ(combined.repetitions[0].rank_spread, 1.0 / 1.5);
  // Repetition 1: medians 2, 1, 1; (2 - 1) / 1.
  EXPECT_DOUBLE_EQ(combined.repetitions[1].rank_spread, 1.0);
  EXPECT_EQ(combined.peak_bytes, (std::vector<double>{100, 200, 300}));
  EXPECT_EQ(combined.busy_seconds, (std::vector<double>{0.5, 0.25, 0.125}));
}

TEST(CombineRanks, PerRankFiguresOnlyWhereEveryRankHasThem) {
  const std::vector<RankMeasurements> ranks = {rank_measuring({{1.0}}, 100, 0.5), rank_measuring({{1.0}}, 200)};
  const auto combined = combine_ranks(ranks, RankedRun{});
  EXPECT_EQ(combined.peak_bytes, (std::vector<double>{100, 200}));
  EXPECT_TRUE(combined.busy_seconds.empty());
}

TEST(CombineRanks, EachRanksCountersArriveAsItsDevicesOrTaggedWithItsRank) {
  auto zero = rank_measuring({{1.0}}), one = rank_measuring({{1.0}});
  zero.counters = {{"param_mem_gib_dev0", 1.5}, {"reduce_ms", 2}};
  one.counters = {{"param_mem_gib_dev0", 2.5}, {"reduce_ms", 3}};
  const auto combined = combine_ranks({zero, one}, RankedRun{});
  EXPECT_EQ(combined.counters, (std::map<std::string, double>{{"param_mem_gib_dev0", 1.5},
                                                              {"param_mem_gib_dev1", 2.5},
                                                              {"reduce_ms_rank0", 2},
                                                              {"reduce_ms_rank1", 3}}));
  // Through the launcher's file and back.
  EXPECT_EQ(ranked_run_from(to_json_value(combined)).counters, combined.counters);
  EXPECT_EQ(rank_counter_name("busy_frac_dev0", 3), "busy_frac_dev3");
  EXPECT_EQ(rank_counter_name("host_wait_ms_stage0", 1), "host_wait_ms_stage0_rank1");
}

TEST(CombineRanks, RanksThatRanDifferentCountsAreNamed) {
  try {
    combine_ranks({rank_measuring({{1.0}, {1.0}}), rank_measuring({{1.0}})}, RankedRun{});
    ADD_FAILURE() << "no error";
  } catch (const std::runtime_error& error) {
    EXPECT_STREQ(error.what(), "rank 1 ran 1 repetitions, rank 0 2");
  }
  try {
    combine_ranks({rank_measuring({{1.0, 1.0}}), rank_measuring({{1.0, 1.0}}), rank_measuring({{1.0}})}, RankedRun{});
    ADD_FAILURE() << "no error";
  } catch (const std::runtime_error& error) {
    EXPECT_STREQ(error.what(), "rank 2 ran 1 iterations in repetition 1, rank 0 2");
  }
}

// ---- The device timer ----------------------------------------------------------------------------

TEST(DeviceTimer, AnIterationLastsItsLongestDeviceSpan) {
  // Every device's span is read, the last one longest.
  std::vector<size_t> read;
  const std::vector<double> spans_ms = {2.0, 5.0, 3.0, 11.0};
  const double seconds = longest_span_seconds(spans_ms.size(), [&](size_t device) {
    read.push_back(device);
    return spans_ms[device];
  });
  EXPECT_DOUBLE_EQ(seconds, 0.011);
  EXPECT_EQ(read, (std::vector<size_t>{0, 1, 2, 3}));
  // The first one longest.
  EXPECT_DOUBLE_EQ(longest_span_seconds(3, [](size_t device) { return device == 0 ? 7.0 : 1.0; }), 0.007);
  EXPECT_DOUBLE_EQ(longest_span_seconds(1, [](size_t) { return 4.0; }), 0.004);
}

TEST(DeviceTimer, OnTheCpuItReadsTheHostClock) {
  // A lower bound only: the host clock runs at least as long as the sleep.
  for (const auto kind : {TimerKind::kEvent, TimerKind::kHost}) {
    DeviceTimer timer({torch::kCPU, torch::kCPU}, kind);
    timer.start();
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    EXPECT_GE(timer.stop(), 0.020);
  }
}

#ifdef PARBENCH_WITH_CUDA
// A spinning kernel queued on a device's current stream, between two events of that stream; ms()
// is the span between them.
struct TimedSleep {
  at::cuda::CUDAEvent before{cudaEventDefault}, after{cudaEventDefault};  // timing events (the default disables timing)
  void queue(int device, int64_t cycles) {
    c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(device));
    const auto stream = c10::cuda::getCurrentCUDAStream(static_cast<c10::DeviceIndex>(device));
    before.record(stream);
    at::cuda::sleep(cycles);
    after.record(stream);
  }
  double ms() {
    after.synchronize();
    return before.elapsed_time(after);
  }
};

constexpr int64_t kSleepCycles = 100'000'000;  // about 50 ms at 2 GHz
#endif

// The timer's events bracket the work on each device's stream, so its reading is at least the
// span of any work queued inside it, on whichever device of the case.
TEST(DeviceTimerGpu, TimesTheWorkQueuedOnOneGpu) {
  if (visible_gpu_count() < 1) GTEST_SKIP() << "needs a GPU, 0 visible";
#ifdef PARBENCH_WITH_CUDA
  DeviceTimer timer({torch::Device(torch::kCUDA, 0)}, TimerKind::kEvent);
  TimedSleep sleep;
  timer.start();
  sleep.queue(0, kSleepCycles);
  const double seconds = timer.stop();
  const double inner_ms = sleep.ms();
  ASSERT_GT(inner_ms, 1.0) << "the sleep kernel did not run";
  EXPECT_GE(seconds * 1e3, inner_ms - 0.01);
#endif
}

TEST(DeviceTimerGpu, SpansEveryGpuOfTheCase) {
  if (visible_gpu_count() < 2) GTEST_SKIP() << "needs 2 GPUs, " << visible_gpu_count() << " visible";
#ifdef PARBENCH_WITH_CUDA
  // The work on one device only, each in turn: the timer sees it wherever it is.
  for (const int busy : {1, 0}) {
    DeviceTimer timer({torch::Device(torch::kCUDA, 0), torch::Device(torch::kCUDA, 1)}, TimerKind::kEvent);
    TimedSleep sleep;
    timer.start();
    sleep.queue(busy, kSleepCycles);
    const double seconds = timer.stop();
    const double inner_ms = sleep.ms();
    ASSERT_GT(inner_ms, 1.0) << "the sleep kernel did not run on GPU " << busy;
    EXPECT_GE(seconds * 1e3, inner_ms - 0.01) << "work on GPU " << busy;
  }
#endif
}

// ---- Memory -----------------------------------------------------------------------------------

// Model states per device after `steps` steps of `strategy_name` on CPU devices.
std::vector<ModelStateBytes> states_after_steps(const std::string& strategy_name, OptimizerKind optimizer,
                                                size_t devices, double* parameters = nullptr) {
  RunConfig config;
  config.model = "tinycnn";
  config.num_classes = 10;
  config.batch_size = 4;
  config.image_size = 16;
  config.optimizer = optimizer;
  set_option(config, "split", 2);
  set_option(config, "schedule", "gpipe");
  fit_config_to_model(config);
  auto strategy = StrategyRegistry::instance().get(strategy_name).create();
  strategy->setup([&](torch::Device) { return make_model(config.model, config.num_classes); },
                  std::vector<torch::Device>(devices, torch::kCPU), config);
  const auto batch = make_random_batch(config, config.batch_size, torch::kCPU, torch::kCPU);
  strategy->train_step(batch);
  strategy->train_step(batch);
  if (parameters) {
    *parameters = 0;
    for (const auto& parameter : strategy->model().module().parameters()) *parameters += parameter.numel();
  }
  return model_state_bytes(*strategy);
}

// The formula the breakdown must meet (docs/METRICS.md, "Memory"): fp32 parameters 4 bytes each,
// their gradients 4, AdamW's two moments 8 (plus a 4-byte step count per tensor), SGD none.
TEST(Memory, ModelStatesMeetTheBytesPerParameterFormulaWithinTwoPercent) {
  double params = 0;
  const auto adamw = states_after_steps("single", OptimizerKind::kAdamW, 1, &params);
  ASSERT_EQ(adamw.size(), 1u);
  EXPECT_DOUBLE_EQ(adamw[0].parameters, 4 * params);
  EXPECT_DOUBLE_EQ(adamw[0].gradients, 4 * params);
  EXPECT_NEAR(adamw[0].optimizer_state, 8 * params, 0.02 * 8 * params);
  EXPECT_GT(adamw[0].optimizer_state, 8 * params);  // the step counts
  EXPECT_NEAR(adamw[0].total(), 16 * params, 0.02 * 16 * params);
  const auto sgd = states_after_steps("single", OptimizerKind::kSgd, 1);
  EXPECT_EQ(sgd[0].optimizer_state, 0);
  EXPECT_DOUBLE_EQ(sgd[0].total(), 8 * params);
}

TEST(Memory, StagesSplitTheStatesAndReplicasHoldParametersButOnlyReplicaZeroHasState) {
  double params = 0;
  const auto single = states_after_steps("single", OptimizerKind::kAdamW, 1, &params);
  for (const auto* staged : {"model_parallel", "pipeline"}) {
    const auto devices = states_after_steps(staged, OptimizerKind::kAdamW, 2);
    ASSERT_EQ(devices.size(), 2u) << staged;
    EXPECT_GT(devices[0].parameters, 0) << staged;
    EXPECT_GT(devices[1].parameters, 0) << staged;
    EXPECT_DOUBLE_EQ(devices[0].parameters + devices[1].parameters, 4 * params) << staged;
    EXPECT_DOUBLE_EQ(devices[0].gradients + devices[1].gradients, 4 * params) << staged;
    EXPECT_DOUBLE_EQ(devices[0].optimizer_state + devices[1].optimizer_state, single[0].optimizer_state) << staged;
  }
  const auto replicas = states_after_steps("data_parallel", OptimizerKind::kAdamW, 2);
  ASSERT_EQ(replicas.size(), 2u);
  EXPECT_DOUBLE_EQ(replicas[0].parameters, 4 * params);
  EXPECT_DOUBLE_EQ(replicas[1].parameters, 4 * params);
  EXPECT_DOUBLE_EQ(replicas[0].optimizer_state, single[0].optimizer_state);
  EXPECT_EQ(replicas[1].optimizer_state, 0);
}

TEST(Memory, CountersFromTensorsOnCpuAndFromTheAllocatorOnGpus) {
  constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
  const std::vector<ModelStateBytes> tensors = {{4 * kGiB, 4 * kGiB, 8 * kGiB}, {2 * kGiB, 2 * kGiB, 0}};
  // CPU: no allocator; model states are the tensors' sum, and nothing else is reported.
  auto counters = memory_counters(tensors, AllocatorWindow{});
  EXPECT_EQ(counters["param_mem_gib_dev0"], 4);
  EXPECT_EQ(counters["grad_mem_gib_dev0"], 4);
  EXPECT_EQ(counters["optim_mem_gib_dev0"], 8);
  EXPECT_EQ(counters["model_state_mem_gib_dev0"], 16);
  EXPECT_EQ(counters["model_state_mem_gib_dev1"], 4);
  EXPECT_EQ(counters.count("activation_mem_gib_dev0"), 0u);
  EXPECT_EQ(counters.count("peak_reserved_gib_dev0"), 0u);
  // GPU: model states = allocated between steps - before the set-up - the batch held; activations
  // = peak - allocated between steps; retries and OOMs over the case.
  AllocatorWindow window;
  window.before_setup = {{1 * kGiB, 0, 0, 2, 1}, {0, 0, 0, 0, 0}};
  window.between_steps = {{18 * kGiB, 0, 0, 0, 0}, {5 * kGiB, 0, 0, 0, 0}};
  window.now = {{18 * kGiB, 30 * kGiB, 32 * kGiB, 5, 1}, {5 * kGiB, 7 * kGiB, 8 * kGiB, 0, 0}};
  window.batch_bytes = {1 * kGiB, 0};
  counters = memory_counters(tensors, window);
  EXPECT_EQ(counters["param_mem_gib_dev0"], 4);  // still the tensors'
  EXPECT_EQ(counters["model_state_mem_gib_dev0"], 16);
  EXPECT_EQ(counters["model_state_mem_gib_dev1"], 5);
  EXPECT_EQ(counters["activation_mem_gib_dev0"], 12);
  EXPECT_EQ(counters["activation_mem_gib_dev1"], 2);
  EXPECT_EQ(counters["peak_reserved_gib_dev0"], 32);
  EXPECT_EQ(counters["alloc_retries_dev0"], 3);
  EXPECT_EQ(counters["ooms_dev0"], 0);
  // A captured case without warm-up has no between-steps reading: no model states or activations
  // from the allocator, the rest still.
  window.between_steps.clear();
  counters = memory_counters(tensors, window);
  EXPECT_EQ(counters.count("model_state_mem_gib_dev0"), 0u);
  EXPECT_EQ(counters.count("activation_mem_gib_dev0"), 0u);
  EXPECT_EQ(counters["peak_reserved_gib_dev1"], 8);
}

}  // namespace
}  // namespace parbench
