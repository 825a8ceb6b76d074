// ddp on the CPU (the store backend), ranks started by parbench's launcher: after a few steps
// every rank holds bitwise the same weights, the same (within 1e-5) as single-device training
// on all ranks' batches concatenated, and neither the bucket size nor overlap changes them.
#include "benchmarks/launch/launcher.h"
#include "benchmarks/launch/temporary_directory.h"
#include "benchmarks/measure/graphed_step.h"
#include "core/device_timer.h"
#include "models/model_zoo.h"
#include "strategies/strategy.h"
#include "strategies/training.h"
#include "tests/launched_case.h"
#include "tests/single_reference.h"
#include "tests/tensor_compare.h"

#include <gtest/gtest.h>

#include <cstdlib>

#include <dirent.h>
#include <unistd.h>

namespace parbench {
namespace {

constexpr double kTolerance = 1e-5;  // relative, per tensor
constexpr int64_t kBatchPerRank = 3;
constexpr int kSteps = 3;  // one warm-up step and two timed iterations of one step
const std::vector<std::string> kOptions = {"--strategies=ddp", "--batch=3",     "--image=16",
                                           "--seq=16",          "--repetitions=1", "--iterations=2",
                                           "--steps=1",         "--allreduce=off", "--dist-timeout=30"};

struct DdpResult {
  std::map<std::string, std::string> facts;
  std::vector<std::vector<torch::Tensor>> ranks;  // per rank: parameters, then their gradients
};

DdpResult run_ddp(int ranks, const std::string& bucket_mib, const std::string& overlap,
                  const std::string& precision = "fp32", bool cuda_graph = false, int warmup_steps = 1,
                  const std::string& model = "tinycnn", const std::string& optimizer = "sgd",
                  const std::string& checkpoint = "off") {
  TemporaryDirectory weights("parbench-ddp-test");
  auto arguments = kOptions;
  arguments.push_back("--checkpoint=" + checkpoint);
  arguments.push_back("--optimizer=" + optimizer);
  arguments.push_back("--models=" + model);
  arguments.push_back("--bucket-mib=" + bucket_mib);
  arguments.push_back("--overlap=" + overlap);
  arguments.push_back("--precision=" + precision);
  arguments.push_back("--warmup=" + std::to_string(warmup_steps));
  if (cuda_graph) arguments.push_back("--cuda-graph=on");
  const auto run = launch_case(PARBENCH_BINARY, arguments, only_train_case(arguments, ranks), ranks, /*timeout_s=*/30,
                               {{"PARBENCH_TEST_SAVE_WEIGHTS", weights.path()}});
  EXPECT_EQ(run.world_size, ranks);
  EXPECT_EQ(run.repetitions.size(), 1u);
  return {run.facts, saved_rank_weights(weights.path(), ranks)};
}

// Single-device training on every rank's batch concatenated, from the seeded initial weights.
std::vector<torch::Tensor> run_single(int ranks, Precision precision, int steps, const std::string& model,
                                      OptimizerKind optimizer = OptimizerKind::kSgd) {
  RunConfig config;
  config.optimizer = optimizer;
  config.precision = precision;
  config.model = model;
  config.image_size = 16;
  config.seq_len = 16;
  return single_on_rank_batches(config, ranks, kBatchPerRank, steps);
}

void expect_bitwise_equal(const std::vector<torch::Tensor>& value, const std::vector<torch::Tensor>& reference,
                          const std::string& what) {
  ASSERT_EQ(value.size(), reference.size()) << what;
  for (size_t i = 0; i < value.size(); ++i)
    EXPECT_TRUE(torch::equal(value[i], reference[i])) << what << " tensor " << i;
}

void expect_matches_single(const DdpResult& ddp, int ranks, Precision precision = Precision::kFloat32,
                           double tolerance = kTolerance, int steps = kSteps, const std::string& model = "tinycnn",
                           OptimizerKind optimizer = OptimizerKind::kSgd) {
  for (int rank = 1; rank < ranks; ++rank)
    expect_bitwise_equal(ddp.ranks[rank], ddp.ranks[0], "rank " + std::to_string(rank));
  const auto single = run_single(ranks, precision, steps, model, optimizer);
  ASSERT_EQ(ddp.ranks[0].size(), single.size());
  for (size_t i = 0; i < single.size(); ++i) {
    EXPECT_LT(relative_difference(ddp.ranks[0][i], single[i]), tolerance)
        << (i < single.size() / 2 ? "weight " : "gradient ") << i % (single.size() / 2);
  }
}

TEST(Ddp, TwoRanksAgreeBitwiseAndMatchSingleDeviceWhateverTheBucketsAndOverlap) {
  const GpusHiddenFromRanks gpus_hidden;
  const auto ddp = run_ddp(2, "25", "on");
  EXPECT_EQ(ddp.facts.at("backend"), "store");
  EXPECT_EQ(ddp.facts.at("buckets"), "1");  // tinycnn's 156 KiB of gradients
  expect_matches_single(ddp, 2);

  // 100 bytes: nearly every parameter gets a bucket of its own.
  const auto many_buckets = run_ddp(2, "0.0001", "on");
  EXPECT_GT(std::stoi(many_buckets.facts.at("buckets")), 4);
  expect_bitwise_equal(many_buckets.ranks[0], ddp.ranks[0], "tiny buckets");
  const auto after_backward = run_ddp(2, "0.0001", "off");
  EXPECT_EQ(after_backward.facts.at("overlap"), "off");
  expect_bitwise_equal(after_backward.ranks[0], ddp.ranks[0], "overlap off");
}

// AdamW on every rank from the averaged gradients: the same update as single's on the whole batch.
TEST(Ddp, AdamwMatchesSingleDevice) {
  const GpusHiddenFromRanks gpus_hidden;
  const auto ddp = run_ddp(2, "0.01", "on", "fp32", /*cuda_graph=*/false, /*warmup_steps=*/1, "tinycnn", "adamw");
  expect_matches_single(ddp, 2, Precision::kFloat32, kTolerance, kSteps, "tinycnn", OptimizerKind::kAdamW);
}

TEST(Ddp, TransformerMatchesSingleDevice) {
  const GpusHiddenFromRanks gpus_hidden;
  for (const std::string model : {"tinygpt", "tinyllama"}) {
    const auto ddp = run_ddp(2, "0.01", "on", "fp32", /*cuda_graph=*/false, /*warmup_steps=*/1, model);
    expect_matches_single(ddp, 2, Precision::kFloat32, kTolerance, kSteps, model);
  }
  // AdamW on the Llama, which has no biases: tinygpt's key bias has only rounding noise for a
  // gradient, which AdamW turns into updates of +-lr (zero_test.cpp compares it with ddp instead).
  const auto adamw = run_ddp(2, "0.01", "on", "fp32", /*cuda_graph=*/false, /*warmup_steps=*/1, "tinyllama", "adamw");
  expect_matches_single(adamw, 2, Precision::kFloat32, kTolerance, kSteps, "tinyllama", OptimizerKind::kAdamW);
}

// Checkpointed blocks: the gradient hooks fire as each block's recomputed backward accumulates
// its weights' gradients, and the buckets reduce them as without.
TEST(Ddp, CheckpointedBlocksMatchSingleDevice) {
  const GpusHiddenFromRanks gpus_hidden;
  const auto ddp = run_ddp(2, "0.01", "on", "fp32", /*cuda_graph=*/false, /*warmup_steps=*/1, "tinygpt", "sgd", "blocks");
  expect_matches_single(ddp, 2, Precision::kFloat32, kTolerance, kSteps, "tinygpt");
}

TEST(Ddp, FourRanksMatchSingleDevice) {
  const GpusHiddenFromRanks gpus_hidden;
  expect_matches_single(run_ddp(4, "0.01", "on"), 4);
}

// bf16 keeps conv weights channels-last; their gradients must land in their buckets in that
// layout. A scrambled layout would be off by O(1); bf16 rounding of a 6-image batch split in
// two stays near bf16's epsilon (2^-8).
TEST(Ddp, Bf16ChannelsLastWeightsMatchSingleDevice) {
  const GpusHiddenFromRanks gpus_hidden;
  expect_matches_single(run_ddp(2, "0.0001", "on", "bf16"), 2, Precision::kBFloat16, /*tolerance=*/2e-2);
}

// Building the model is a rank's own work, waiting for no peer: a build that outlasts
// --dist-timeout and the watchdog's grace (1 + 5 s) is not taken for a stall.
TEST(Ddp, AModelBuildLongerThanTheTimeoutIsNotAStall) {
  const GpusHiddenFromRanks gpus_hidden;
  auto arguments = kOptions;
  arguments.back() = "--dist-timeout=1";
  arguments.insert(arguments.end(), {"--models=tinycnn", "--warmup=1"});
  const auto run = launch_case(PARBENCH_BINARY, arguments, only_train_case(arguments, 2), 2, /*timeout_s=*/60,
                               {{"PARBENCH_TEST_SLOW_MODEL_BUILD_MS", "8000"}});
  EXPECT_EQ(run.world_size, 2);
  EXPECT_EQ(run.repetitions.size(), 1u);
}

// On GPUs (NCCL): replaying a captured step, all-reduces included, trains as the eager steps do.
TEST(Ddp, CudaGraphReplaysMatchEagerStepsOnGpus) {
  const int gpus = visible_gpu_count();
  if (gpus < 2) GTEST_SKIP() << "needs 2 GPUs, " << gpus << " visible";
  // Six steps either way: warm-up and two timed steps (the busy-time step comes after the
  // weights are saved); with a graph, kGraphWarmupSteps of the warm-up run on the side stream
  // before the capture.
  const auto eager = run_ddp(2, "0.01", "on", "fp32", /*cuda_graph=*/false, /*warmup_steps=*/1 + kGraphWarmupSteps);
  const auto graphed = run_ddp(2, "0.01", "on", "fp32", /*cuda_graph=*/true, /*warmup_steps=*/1);
  EXPECT_EQ(graphed.facts.at("backend"), "nccl");
  // NCCL's mean against the CPU, loosely: the GPUs' convolutions run in TF32. A sum in place
  // of the mean would be off by 1.
  expect_matches_single(eager, 2, Precision::kFloat32, /*tolerance=*/2e-2, /*steps=*/6);
  EXPECT_GT(std::stoi(graphed.facts.at("buckets")), 1);
  expect_bitwise_equal(graphed.ranks[1], graphed.ranks[0], "graphed rank 1");
  ASSERT_EQ(graphed.ranks[0].size(), eager.ranks[0].size());
  for (size_t i = 0; i < eager.ranks[0].size(); ++i) {
    EXPECT_LT(relative_difference(graphed.ranks[0][i], eager.ranks[0][i]), kTolerance) << "tensor " << i;
  }
}

TEST(Ddp, SetupOutsideADistributedRunSaysHowToStartIt) {
  const GpusHiddenFromRanks gpus_hidden;
  RunConfig config;
  config.model = "tinycnn";
  auto strategy = StrategyRegistry::instance().get("ddp").create();
  try {
    strategy->setup([&](torch::Device) { return make_model(config.model, config.num_classes); }, {torch::kCPU}, config);
    FAIL() << "ddp set up without a process group";
  } catch (const c10::Error& error) {
    EXPECT_NE(std::string(error.what_without_backtrace()).find("torchrun"), std::string::npos);
  }
}

}  // namespace
}  // namespace parbench
