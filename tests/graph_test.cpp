// A training step captured in a CUDA graph: replays train as the same steps run eagerly, on one
// GPU (single), over two stages (model_parallel, pipeline) and over two replicas (data_parallel):
// one graph spanning both GPUs, or both stages or replicas on GPU 0 where only one is visible.
// Capture refuses a step that is not on GPUs.
#include "benchmarks/advise/advise.h"
#include "benchmarks/config/options.h"
#include "benchmarks/measure/graphed_step.h"
#include "benchmarks/measure/memory.h"
#include "core/device_timer.h"
#include "models/model_zoo.h"
#include "strategies/strategy.h"
#include "strategies/training.h"
#include "tests/case_options.h"
#include "tests/option_parsing.h"
#include "tests/tensor_compare.h"

#include <gtest/gtest.h>

#ifdef PARBENCH_WITH_CUDA
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDACachingAllocator.h>
#endif

#include <algorithm>
#include <cmath>

namespace parbench {
namespace {

constexpr int kReplays = 2;

struct Trained {
  double loss = 0;
  std::vector<torch::Tensor> tensors;  // parameters, their gradients, buffers
};

std::unique_ptr<Strategy> make_strategy(const std::string& name, const RunConfig& config,
                                        const std::vector<torch::Device>& devices) {
  auto strategy = StrategyRegistry::instance().get(name).create();
  strategy->setup(
      [&](torch::Device) {
        torch::manual_seed(11);
        return make_model(config.model, config.num_classes);
      },
      devices, config);
  return strategy;
}

std::unique_ptr<Strategy> make_single(const RunConfig& config, torch::Device device) {
  return make_strategy("single", config, {device});
}


// The same kernels run eagerly and replayed; what differs is the order of their atomic additions.
void deterministic_fp32_kernels() {
  at::globalContext().setDeterministicCuDNN(true);
  at::globalContext().setAllowTF32CuDNN(false);
  at::globalContext().setAllowTF32CuBLAS(false);
}

Trained collect(Strategy& strategy, const torch::Tensor& loss) {
  Trained trained{loss.item<double>(), {}};
  const auto& module = strategy.model().module();
  for (const auto& parameter : module.parameters()) trained.tensors.push_back(parameter.detach().cpu());
  for (const auto& parameter : module.parameters()) trained.tensors.push_back(parameter.grad().cpu());
  for (const auto& buffer : module.buffers()) trained.tensors.push_back(buffer.cpu());
  return trained;
}

class GraphedSingle : public ::testing::TestWithParam<Precision> {};

TEST_P(GraphedSingle, ReplaysTrainAsEagerStepsDo) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "needs a GPU, 0 visible";
  deterministic_fp32_kernels();
  RunConfig config;
  config.model = "resnet50";  // batch-norm buffers, and under bf16 autocast's casts of the weights
  config.num_classes = 10;
  config.batch_size = 8;
  config.image_size = 32;
  config.precision = GetParam();
  config.learning_rate = 1e-3;  // the tutorial's: each step moves the loss by tens of percent, and 0.01 diverges
  const torch::Device gpu(torch::kCUDA, 0);
  torch::manual_seed(3);
  const auto first = make_random_batch(config, config.batch_size, gpu, gpu);
  const auto second = make_random_batch(config, config.batch_size, gpu, gpu);

  auto eager = make_single(config, gpu);
  for (int step = 0; step < kGraphWarmupSteps; ++step) eager->train_step(first);
  torch::Tensor eager_loss;
  for (int step = 0; step < kReplays; ++step) eager_loss = eager->train_step(second);
  const auto expected = collect(*eager, eager_loss);

  auto strategy = make_single(config, gpu);
  GraphedStep graphed(*strategy, {first.inputs.clone(), first.targets.clone()});  // warms up on `first`
  torch::Tensor loss;
  for (int step = 0; step < kReplays; ++step) loss = graphed.run(second);  // copied into the graph's input
  const auto replayed = collect(*strategy, loss);

  ASSERT_TRUE(std::isfinite(expected.loss)) << expected.loss;
  const double tolerance = GetParam() == Precision::kFloat32 ? 1e-5 : 1e-3;
  EXPECT_NEAR(replayed.loss, expected.loss, tolerance * std::abs(expected.loss));
  ASSERT_EQ(replayed.tensors.size(), expected.tensors.size());
  for (size_t i = 0; i < expected.tensors.size(); ++i) {
    EXPECT_LT(relative_difference(replayed.tensors[i], expected.tensors[i]), tolerance) << "tensor " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(Precisions, GraphedSingle, ::testing::Values(Precision::kFloat32, Precision::kBFloat16),
                         [](const auto& info) { return to_string(info.param); });

// model_parallel and pipeline over two stages, and data_parallel over two replicas, on two GPUs
// (both on GPU 0 where one is visible: the host threads, streams, copies and capture still run,
// the copies within one GPU). The pipeline runs each schedule, with a split that divides the
// batch and one that does not (a remainder micro-batch). Batch-norm is in train mode, so its
// running statistics must advance on replay as they do eagerly.
struct StagedCase {
  std::string strategy;
  std::string schedule;
  int64_t split_size;
  int lanes = 1;
};

void PrintTo(const StagedCase& c, std::ostream* os) {
  *os << c.strategy << " " << c.schedule << " split " << c.split_size << " lanes " << c.lanes;
}

class GraphedStaged : public ::testing::TestWithParam<StagedCase> {};

INSTANTIATE_TEST_SUITE_P(
    TwoStages, GraphedStaged,
    ::testing::Values(StagedCase{"model_parallel", "", 0}, StagedCase{"data_parallel", "", 0},
                      StagedCase{"pipeline", "tutorial", 4},
                      StagedCase{"pipeline", "tutorial", 3}, StagedCase{"pipeline", "gpipe", 4},
                      StagedCase{"pipeline", "gpipe", 3}, StagedCase{"pipeline", "1f1b", 2},
                      StagedCase{"pipeline", "1f1b", 3}, StagedCase{"pipeline", "1f1b", 2, /*lanes=*/2},
                      StagedCase{"pipeline", "tutorial", 3, /*lanes=*/2},
                      StagedCase{"pipeline", "interleaved-1f1b", 2}, StagedCase{"pipeline", "interleaved-1f1b", 2, 2},
                      StagedCase{"pipeline", "zb-h1", 2}, StagedCase{"pipeline", "zb-h1", 3, 2}),
    [](const auto& info) {
      const auto& c = info.param;
      auto schedule = c.schedule;
      std::replace(schedule.begin(), schedule.end(), '-', '_');  // test names take no '-'
      return c.strategy + (schedule.empty() ? "" : "_" + schedule + "_split" + std::to_string(c.split_size)) +
             (c.lanes == 1 ? "" : "_lanes" + std::to_string(c.lanes));
    });

// Trains `config` under the case's strategy on two stages (or replicas: GPU 0 alone if need be)
// eagerly and as replays of one captured step, from the same seed, and compares the losses
// (within 1e-5) and the weights and gradients (within `tensor_tolerance`). Returns both losses.
std::pair<double, double> expect_replays_train_as_eager_steps(const StagedCase& c, RunConfig config,
                                                              double tensor_tolerance) {
  set_option(config, "split", c.split_size);
  set_option(config, "schedule", c.schedule.empty() ? "gpipe" : c.schedule);
  config.learning_rate = 1e-3;
  const std::vector<torch::Device> gpus = {torch::Device(torch::kCUDA, 0),
                                           torch::Device(torch::kCUDA, visible_gpu_count() >= 2 ? 1 : 0)};
  auto eager = make_strategy(c.strategy, config, gpus);
  // Where the strategy takes them: data_parallel's loss is on its first device, a pipeline's on its last.
  torch::manual_seed(3);
  const auto first = make_random_batch(config, config.batch_size, eager->input_device(), eager->target_device());
  const auto second = make_random_batch(config, config.batch_size, eager->input_device(), eager->target_device());

  for (int step = 0; step < kGraphWarmupSteps; ++step) eager->train_step(first);
  torch::Tensor eager_loss;
  for (int step = 0; step < kReplays; ++step) eager_loss = eager->train_step(second);
  const auto expected = collect(*eager, eager_loss);

  auto strategy = make_strategy(c.strategy, config, gpus);
  GraphedStep graphed(*strategy, {first.inputs.clone(), first.targets.clone()});
  torch::Tensor loss;
  for (int step = 0; step < kReplays; ++step) loss = graphed.run(second);
  const auto replayed = collect(*strategy, loss);

  EXPECT_TRUE(std::isfinite(expected.loss)) << expected.loss;
  EXPECT_NEAR(replayed.loss, expected.loss, 1e-5 * std::abs(expected.loss));
  EXPECT_EQ(replayed.tensors.size(), expected.tensors.size());
  for (size_t i = 0; i < std::min(expected.tensors.size(), replayed.tensors.size()); ++i) {
    EXPECT_LT(relative_difference(replayed.tensors[i], expected.tensors[i]), tensor_tolerance) << "tensor " << i;
  }
  return {expected.loss, replayed.loss};
}

TEST_P(GraphedStaged, ReplaysTrainAsEagerStepsDo) {
  if (visible_gpu_count() == 0) GTEST_SKIP() << "needs a GPU, 0 visible";
  deterministic_fp32_kernels();
  const auto& c = GetParam();
  RunConfig config;
  config.model = "resnet50";
  config.num_classes = 10;
  config.batch_size = 8;
  config.image_size = 32;
  set_option(config, "lanes", c.lanes);
  expect_replays_train_as_eager_steps(c, config, /*tensor_tolerance=*/1e-5);
}

// gpt2-small over two stages (or replicas) under every strategy and schedule, GPU 0 alone if
// need be: replays train as eager steps do. Losses within the tolerance of the tests above;
// weights and gradients within 1e-4, since the fp32 attention kernel (memory-efficient) adds its
// backward's partial sums in an order that can differ from run to run.
class GraphedGptStages : public ::testing::TestWithParam<StagedCase> {};

INSTANTIATE_TEST_SUITE_P(
    TwoStages, GraphedGptStages,
    ::testing::Values(StagedCase{"model_parallel", "", 0}, StagedCase{"data_parallel", "", 0},
                      StagedCase{"pipeline", "tutorial", 2}, StagedCase{"pipeline", "gpipe", 2},
                      StagedCase{"pipeline", "1f1b", 2}, StagedCase{"pipeline", "interleaved-1f1b", 1},
                      StagedCase{"pipeline", "zb-h1", 2}),
    [](const auto& info) {
      auto schedule = info.param.schedule;
      std::replace(schedule.begin(), schedule.end(), '-', '_');
      return info.param.strategy + (schedule.empty() ? "" : "_" + schedule);
    });

TEST_P(GraphedGptStages, ReplaysTrainAsEagerStepsDo) {
  if (visible_gpu_count() == 0) GTEST_SKIP() << "needs a GPU, 0 visible";
  deterministic_fp32_kernels();
  const auto& c = GetParam();
  RunConfig config;
  config.model = "gpt2-small";
  config.seq_len = 128;
  fit_config_to_model(config);
  config.batch_size = 4;
  const auto [eager_loss, replayed_loss] = expect_replays_train_as_eager_steps(c, config, /*tensor_tolerance=*/1e-4);
  std::printf("%s: eager loss %.7f, replayed %.7f\n", c.strategy.c_str(), eager_loss, replayed_loss);
}

// A set-up for --advise's profile: resnet50 on 64x64 images, 10 classes, `batch` images.
CaseSpec small_resnet50_setup(const std::string& strategy, int64_t batch) {
  CaseSpec spec;
  spec.strategy = &StrategyRegistry::instance().get(strategy);
  spec.config.model = "resnet50";
  spec.config.num_classes = 10;
  spec.config.batch_size = batch;
  spec.config.image_size = 64;
  return spec;
}

// --advise's profile (benchmarks/advise/advise.h) eager and with every piece captured in a graph of its
// own: every part timed at every size, zb-h1's B and W included, and interleaved-1f1b's four parts
// of two chunks per device, on two GPUs (both parts on GPU 0 where one is visible).
TEST(AdviseProfile, TimesEveryPartAtEverySizeEagerAndGraphed) {
  if (visible_gpu_count() == 0) GTEST_SKIP() << "needs a GPU, 0 visible";
  const auto spec = small_resnet50_setup("pipeline", 8);
  const std::vector<torch::Device> gpus = {torch::Device(torch::kCUDA, 0),
                                           torch::Device(torch::kCUDA, visible_gpu_count() >= 2 ? 1 : 0)};
  for (bool graphed : {false, true}) {
    ProfileRequest request;
    request.parts = true;
    request.backward_halves = true;
    request.cuts[CutKey{4, 8}] = {1, 2, 4, 8};  // the executor's cut into four parts, at the profile's sizes
    request.sizes = {1, 2};
    const auto profile = profile_setup(spec, gpus, graphed, request);
    EXPECT_EQ(profile.graphed, graphed);
    EXPECT_EQ(profile.parts.cut, "stem,layer1,layer2|layer3,layer4,head");
    EXPECT_EQ(profile.sizes, (std::vector<int64_t>{1, 2, 4, 8}));
    EXPECT_GT(profile.single_step_ms, 0.0);
    ASSERT_EQ(profile.cuts.count(CutKey{4, 8}), 1u);
    for (const auto* cut : {&profile.parts, &profile.cuts.at(CutKey{4, 8})}) {
      const size_t parts = cut == &profile.parts ? 2 : 4;
      const bool halves = true;  // asked for: every cut profiled has them
      ASSERT_EQ(cut->forward_ms.size(), parts) << cut->cut;
      ASSERT_EQ(cut->copy_ms.size(), parts - 1) << cut->cut;
      ASSERT_EQ(cut->update_ms.size(), parts) << cut->cut;
      ASSERT_EQ(cut->input_gradient_ms.size(), halves ? parts : 0) << cut->cut;
      ASSERT_EQ(cut->weight_gradient_ms.size(), halves ? parts : 0) << cut->cut;
      for (size_t part = 0; part < parts; ++part) {
        ASSERT_EQ(cut->forward_ms[part].size(), 4u);
        ASSERT_EQ(cut->backward_ms[part].size(), 4u);
        for (size_t i = 0; i < 4; ++i) {
          const auto what = cut->cut + " part " + std::to_string(part) + " size " + std::to_string(profile.sizes[i]);
          EXPECT_GT(cut->forward_ms[part][i], 0.0) << what;
          // advise clamps a backward at 0 (forward and backward, less the forward): a part's
          // backward does work, so a clamped 0 means its time was lost.
          EXPECT_GT(cut->backward_ms[part][i], 0.0) << what;
          if (!halves) continue;
          // The first part has no input gradient: its B computes nothing, its W the whole backward.
          if (part == 0) EXPECT_EQ(cut->input_gradient_ms[part][i], 0.0) << what;
          if (part > 0) EXPECT_GT(cut->input_gradient_ms[part][i], 0.0) << what;
          EXPECT_GT(cut->weight_gradient_ms[part][i], 0.0) << what;
        }
        EXPECT_GT(cut->update_ms[part], 0.0);
      }
      EXPECT_EQ(cut->copy_ms.front().size(), 4u);
    }
  }
  // No capture is left open: the device still runs eager work.
  EXPECT_EQ(torch::ones({2}, gpus.front()).sum().item<double>(), 2.0);
}

// ddp's pieces: ResNet-50's 25 MiB buckets come ready in backward's order, the last (the stem's)
// at backward's end, and each has an all-reduce time across the two GPUs.
TEST(AdviseProfile, TimesDdpsBucketsOnTwoGpus) {
  if (visible_gpu_count() < 2) GTEST_SKIP() << "needs 2 GPUs, " << visible_gpu_count() << " visible";
  const auto spec = small_resnet50_setup("ddp", 16);
  const std::vector<torch::Device> gpus = {torch::Device(torch::kCUDA, 0), torch::Device(torch::kCUDA, 1)};
  for (bool graphed : {false, true}) {
    ProfileRequest request;
    request.ranks = {{25.0, 8}, {100.0, 8}};
    const auto profile = profile_setup(spec, gpus, graphed, request);
    ASSERT_EQ(profile.ranks.size(), 2u);
    const auto& small = profile.ranks.at({25.0, 8});
    const auto& large = profile.ranks.at({100.0, 8});
    // Graphed, the whole step outlasts its backward. (Eager at this size each stage's backward,
    // timed alone, carries the host's issue time, and their sum can pass the step's.)
    if (graphed) EXPECT_GT(small.rank_step_ms, small.backward_ms);
    EXPECT_EQ(small.rank_step_ms, large.rank_step_ms);  // one measurement serves both
    EXPECT_EQ(small.step_lost_per_comm_ms, large.step_lost_per_comm_ms);
    // No bound: at this small size the eager step is host-paced, and the all-reduce's host time
    // can cost it more than the all-reduce's own (3.9 ms a ms on 2 H200s in one of the modes).
    std::printf("step_lost_per_comm_ms, %s: %.3f\n", graphed ? "graphed" : "eager", small.step_lost_per_comm_ms);
    EXPECT_GE(small.bucket_ready_ms.size(), 4u);  // 97.5 MiB of fp32 gradients
    EXPECT_EQ(large.bucket_ready_ms.size(), 1u);
    ASSERT_EQ(small.bucket_allreduce_ms.size(), small.bucket_ready_ms.size());
    for (size_t b = 0; b < small.bucket_ready_ms.size(); ++b) {
      if (b > 0) EXPECT_GE(small.bucket_ready_ms[b], small.bucket_ready_ms[b - 1]) << "bucket " << b;
      EXPECT_GT(small.bucket_allreduce_ms[b], 0.0) << "bucket " << b;
    }
    EXPECT_DOUBLE_EQ(small.bucket_ready_ms.back(), small.backward_ms);
    EXPECT_DOUBLE_EQ(large.bucket_ready_ms.back(), large.backward_ms);
  }
}

// --advise on a machine with fewer GPUs than a case needs: the case is predicted from its parts
// sharing the visible GPUs, and left out of the cases to run.
TEST(Advise, PredictsCasesNeedingMoreGpusThanVisibleWithoutRunningThem) {
  if (visible_gpu_count() == 0) GTEST_SKIP() << "needs a GPU, 0 visible";
  const auto gpus = "--gpus=" + std::to_string(visible_gpu_count() + 1);
  // resnet18's 10 stages can be cut for up to 9 visible GPUs (tinycnn's 4 for 2 only).
  const auto options = parsed_options({"--strategies=single,pipeline,ddp", "--models=resnet18", "--batch=8", "--image=32",
                                       "--split-sizes=4", "--schedules=gpipe", "--advise=all", gpus},
                                      /*has_gpu=*/true);
  const auto cases = build_cases(options, visible_gpu_count());
  testing::internal::CaptureStdout();
  const auto to_run = advise(cases, options);
  const auto table = testing::internal::GetCapturedStdout();
  ASSERT_EQ(to_run.size(), 1u);  // single; pipeline needs a GPU more than are visible, ddp too
  EXPECT_EQ(to_run.front().strategy->name(), "single");
  EXPECT_TRUE(to_run.front().predicted_step_ms.has_value());
  const auto pipeline_row = table.find("train/pipeline/resnet18");
  ASSERT_NE(pipeline_row, std::string::npos) << table;
  EXPECT_NE(table.find("(not run: needs", pipeline_row), std::string::npos) << table;
  EXPECT_EQ(table.find("train/ddp"), std::string::npos) << table;
}

#ifdef PARBENCH_WITH_CUDA
// A step whose capture the device refuses: it waits on work outside the capture, as autograd's
// sync with a device's default stream did in data_parallel's backward across two GPUs.
class WaitsOutsideTheCapture final : public Strategy {
 public:
  explicit WaitsOutsideTheCapture(torch::Device device) { devices_ = {device}; }
  void setup(const ModelFactory&, const std::vector<torch::Device>&, const RunConfig&) override {}
  torch::Device input_device() const override { return devices_.front(); }
  torch::Device target_device() const override { return devices_.front(); }
  torch::Tensor train_step(const Batch& batch) override {
    const auto doubled = batch.inputs * 2;  // in the capture's pool
    const auto index = devices_.front().index();
    at::cuda::CUDAEvent outside;
    outside.record(c10::cuda::getStreamFromPool(/*isHighPriority=*/false, index));
    outside.block(c10::cuda::getCurrentCUDAStream(index));
    return doubled.sum();
  }
};

// After a capture that failed, the allocator still frees memory that another stream used:
// CUDAGraph leaves its pool's capture open when cudaStreamEndCapture fails, and the allocator
// then defers every such free until no capture is underway, which was never.
TEST(GraphedStep, AFailedCaptureLeavesTheAllocatorFreeingMemory) {
  if (visible_gpu_count() == 0) GTEST_SKIP() << "needs a GPU, 0 visible";
  const torch::Device gpu(torch::kCUDA, 0);
  WaitsOutsideTheCapture strategy(gpu);
  const Batch batch{torch::ones({1024}, gpu), torch::ones({1}, gpu)};
  EXPECT_THROW(GraphedStep(strategy, batch), std::exception);

  const auto reserved_bytes = [] {
    torch::cuda::synchronize();
    c10::cuda::CUDACachingAllocator::emptyCache();
    return c10::cuda::CUDACachingAllocator::getDeviceStats(0)
        .reserved_bytes[static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE)]
        .current;
  };
  const auto before = reserved_bytes();
  {
    const auto used_elsewhere = torch::empty({64 << 20}, torch::TensorOptions().device(gpu));  // 256 MiB
    c10::cuda::CUDACachingAllocator::recordStream(used_elsewhere.storage().data_ptr(),
                                                  c10::cuda::getStreamFromPool(/*isHighPriority=*/false, 0));
  }
  EXPECT_EQ(reserved_bytes(), before);
  // And the next capture works.
  RunConfig config;
  config.model = "tinycnn";
  auto single = make_single(config, gpu);
  const auto example = make_random_batch(config, 2, gpu, gpu);
  GraphedStep replayed(*single, example);
  EXPECT_TRUE(std::isfinite(replayed.run(example).item<double>()));
}
#endif

#ifdef PARBENCH_WITH_CUDA
// A graphed case leaves cuBLAS workspaces allocated after its graph is gone (its warm-up took them
// on a fresh pool stream), and the next case's peak counted them; release_leftover_memory, which
// each case's set-up calls, hands them back, so that what stays allocated is what was before.
TEST(GraphedStep, WhatAGraphedCaseLeavesIsReleasedBeforeTheNext) {
  if (visible_gpu_count() == 0) GTEST_SKIP() << "needs a GPU, 0 visible";
  const torch::Device gpu(torch::kCUDA, 0);
  const auto allocated_bytes = [] {
    torch::cuda::synchronize();
    return c10::cuda::CUDACachingAllocator::getDeviceStats(0)
        .allocated_bytes[static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE)]
        .current;
  };
  release_leftover_memory({gpu});
  const auto before = allocated_bytes();
  {
    RunConfig config;
    config.model = "tinycnn";  // its head is a matrix product: cuBLAS takes a workspace
    auto single = make_single(config, gpu);
    const auto example = make_random_batch(config, 4, gpu, gpu);
    GraphedStep replayed(*single, example);
    EXPECT_TRUE(std::isfinite(replayed.run(example).item<double>()));
  }
  const auto left = allocated_bytes();
  EXPECT_GT(left, before) << "the graphed case left no workspace: nothing for the release to do";
  release_leftover_memory({gpu});
  EXPECT_EQ(allocated_bytes(), before);
}
#endif

TEST(GraphedStep, RefusesAStepThatIsNotOnGpus) {
  RunConfig config;
  config.model = "tinycnn";
  auto strategy = make_single(config, torch::kCPU);
  const auto batch = make_random_batch(config, 2, torch::kCPU, torch::kCPU);
  try {
    GraphedStep graphed(*strategy, batch);
    FAIL() << "captured a step on the CPU";
  } catch (const std::invalid_argument& error) {
    EXPECT_NE(std::string(error.what()).find("on GPUs"), std::string::npos) << error.what();
  }
}

}  // namespace
}  // namespace parbench
