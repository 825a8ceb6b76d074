// zero (ZeRO stages 1-3) on the CPU (the store backend), ranks started by parbench's launcher:
// the flat shard layout's arithmetic (padding, pieces) for 1, 2 and 3 ranks; every stage, with
// SGD and AdamW, trains to single-device training's parameters and gradients on all ranks'
// batches concatenated (within 1e-5), or to ddp's (AdamW on a transformer), every rank agreeing;
// the model states per rank are what the stage shards, and stage 3 holds no unit's whole
// parameters between steps; --advise predicts each stage from ddp's profile; a rank that dies or
// never joins fails the case, naming it.
#include "benchmarks/advise/advise.h"
#include "benchmarks/launch/launcher.h"
#include "benchmarks/launch/temporary_directory.h"
#include "benchmarks/measure/graphed_step.h"
#include "core/device_timer.h"
#include "models/model_zoo.h"
#include "strategies/ddp_options.h"
#include "strategies/distributed/flat_shards.h"
#include "strategies/prediction.h"
#include "strategies/strategy.h"
#include "strategies/training.h"
#include "tests/launched_case.h"
#include "tests/single_reference.h"
#include "tests/tensor_compare.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>

namespace parbench {
namespace {

// ---- the layout, without processes ----------------------------------------------------------

// Every element of every tensor lies in exactly one rank's shard, at its flat place, and only
// padding is left over.
void expect_pieces_cover_each_tensor_once(const FlatShardLayout& layout) {
  std::vector<std::vector<int>> owners(layout.tensors());
  for (size_t t = 0; t < layout.tensors(); ++t) owners[t].assign(static_cast<size_t>(layout.numel(t)), 0);
  for (int rank = 0; rank < layout.world(); ++rank) {
    int64_t shard_end = 0;
    for (const auto& piece : layout.pieces(rank)) {
      EXPECT_EQ(layout.shard_begin(rank) + piece.shard_offset, layout.offset(piece.tensor) + piece.tensor_offset);
      EXPECT_GE(piece.shard_offset, shard_end) << "pieces overlap in rank " << rank << "'s shard";
      shard_end = piece.shard_offset + piece.length;
      EXPECT_LE(shard_end, layout.shard());
      for (int64_t e = 0; e < piece.length; ++e) ++owners[piece.tensor][static_cast<size_t>(piece.tensor_offset + e)];
    }
  }
  for (size_t t = 0; t < layout.tensors(); ++t) {
    for (int count : owners[t]) EXPECT_EQ(count, 1) << "tensor " << t;
  }
}

TEST(ZeroLayout, PadsToAMultipleOfTheWorldAndSplitsTensorsAcrossShards) {
  const std::vector<int64_t> numels = {5, 3, 1};  // 9 elements
  const FlatShardLayout one(numels, 1);
  EXPECT_EQ(one.shard(), 9);
  EXPECT_EQ(one.padding(), 0);
  ASSERT_EQ(one.pieces(0).size(), 3u);

  const FlatShardLayout two(numels, 2);
  EXPECT_EQ(two.shard(), 5);
  EXPECT_EQ(two.padded(), 10);
  EXPECT_EQ(two.padding(), 1);
  ASSERT_EQ(two.pieces(0).size(), 1u);  // all of tensor 0
  EXPECT_EQ(two.pieces(0)[0].length, 5);
  const auto second = two.pieces(1);
  ASSERT_EQ(second.size(), 2u);  // tensors 1 and 2, then one padding element
  EXPECT_EQ(second[0].tensor, 1u);
  EXPECT_EQ(second[1].tensor, 2u);
  EXPECT_EQ(second[1].shard_offset, 3);

  const FlatShardLayout three(numels, 3);
  EXPECT_EQ(three.shard(), 3);
  EXPECT_EQ(three.padding(), 0);
  const auto middle = three.pieces(1);  // tensor 0's last 2 elements, tensor 1's first
  ASSERT_EQ(middle.size(), 2u);
  EXPECT_EQ(middle[0].tensor_offset, 3);
  EXPECT_EQ(middle[0].length, 2);
  EXPECT_EQ(middle[1].tensor, 1u);
  EXPECT_EQ(middle[1].length, 1);

  const FlatShardLayout uneven({7, 1, 2}, 3);  // 10 elements: 2 of padding on rank 2
  EXPECT_EQ(uneven.shard(), 4);
  EXPECT_EQ(uneven.padding(), 2);
  ASSERT_EQ(uneven.pieces(2).size(), 1u);
  EXPECT_EQ(uneven.pieces(2)[0].tensor, 2u);
  EXPECT_EQ(uneven.pieces(2)[0].length, 2);

  for (int world = 1; world <= 3; ++world) {
    expect_pieces_cover_each_tensor_once(FlatShardLayout(numels, world));
    expect_pieces_cover_each_tensor_once(FlatShardLayout({7, 1, 2}, world));
    expect_pieces_cover_each_tensor_once(FlatShardLayout({1}, world));
  }
}

TEST(ZeroLayout, AnEmptyGroupStillHasOneElementPerRankAndBadInputIsRefused) {
  const FlatShardLayout empty({}, 3);
  EXPECT_EQ(empty.shard(), 1);
  EXPECT_TRUE(empty.pieces(2).empty());
  EXPECT_THROW(FlatShardLayout({1}, 0), c10::Error);
  EXPECT_THROW(FlatShardLayout({-1}, 2), c10::Error);
  EXPECT_THROW(FlatShardLayout({4}, 2).pieces(2), c10::Error);
}

// ---- training on CPU ranks --------------------------------------------------------------------

constexpr double kTolerance = 1e-5;  // relative, per tensor
constexpr int64_t kBatchPerRank = 3;
constexpr int kSteps = 3;  // one warm-up step and two timed iterations of one step
const std::vector<std::string> kOptions = {"--strategies=zero", "--batch=3",       "--image=16",     "--seq=16",
                                           "--repetitions=1",  "--iterations=2",  "--steps=1",      "--warmup=1",
                                           "--allreduce=off",  "--dist-timeout=30"};

struct RankedWeights {
  RankedRun run;
  std::vector<std::vector<torch::Tensor>> ranks;  // per rank: parameters, then their gradients
};

std::vector<std::string> zero_arguments(const std::string& stage, const std::string& model, const std::string& optimizer) {
  auto arguments = kOptions;
  arguments.push_back("--zero-stages=" + stage);
  arguments.push_back("--models=" + model);
  arguments.push_back("--optimizer=" + optimizer);
  return arguments;
}

RankedWeights run_ranks(std::vector<std::string> arguments, int ranks) {
  TemporaryDirectory weights("parbench-zero-test");
  const auto run = launch_case(PARBENCH_BINARY, arguments, only_train_case(arguments, ranks), ranks, /*timeout_s=*/60,
                               {{"PARBENCH_TEST_SAVE_WEIGHTS", weights.path()}});
  EXPECT_EQ(run.world_size, ranks);
  return {run, saved_rank_weights(weights.path(), ranks)};
}

// Single-device training on every rank's batch concatenated, from the seeded initial weights.
std::vector<torch::Tensor> run_single(int ranks, const std::string& model, OptimizerKind optimizer) {
  RunConfig config;
  config.optimizer = optimizer;
  config.model = model;
  config.image_size = 16;
  config.seq_len = 16;
  return single_on_rank_batches(config, ranks, kBatchPerRank, kSteps);
}

void expect_matches_single(const RankedWeights& zero, int ranks, const std::string& model, OptimizerKind optimizer,
                           const std::string& what) {
  for (int rank = 1; rank < ranks; ++rank) {
    ASSERT_EQ(zero.ranks[rank].size(), zero.ranks[0].size()) << what;
    for (size_t i = 0; i < zero.ranks[0].size(); ++i) {
      EXPECT_TRUE(torch::equal(zero.ranks[rank][i], zero.ranks[0][i])) << what << ": rank " << rank << " tensor " << i;
    }
  }
  const auto single = run_single(ranks, model, optimizer);
  ASSERT_EQ(zero.ranks[0].size(), single.size()) << what;
  for (size_t i = 0; i < single.size(); ++i) {
    EXPECT_EQ(zero.ranks[0][i].sizes(), single[i].sizes()) << what << " tensor " << i;
    EXPECT_LT(relative_difference(zero.ranks[0][i], single[i]), kTolerance)
        << what << ": " << (i < single.size() / 2 ? "weight " : "gradient ") << i % (single.size() / 2);
  }
}

class ZeroStage : public ::testing::TestWithParam<std::string> {};

TEST_P(ZeroStage, TwoRanksMatchSingleDeviceWithSgdAndAdamw) {
  const GpusHiddenFromRanks gpus_hidden;
  const auto stage = GetParam();
  for (const auto& [optimizer, kind] :
       std::vector<std::pair<std::string, OptimizerKind>>{{"sgd", OptimizerKind::kSgd}, {"adamw", OptimizerKind::kAdamW}}) {
    const auto zero = run_ranks(zero_arguments(stage, "tinycnn", optimizer), 2);
    EXPECT_EQ(zero.run.facts.at("backend"), "store");
    EXPECT_EQ(zero.run.facts.at("zero"), stage == "3" ? "ZeRO-3 (FSDP)" : "ZeRO-" + stage);
    // tinycnn's units: stem, block1, block2, head; none keeps its whole parameters' memory.
    EXPECT_EQ(zero.run.facts.at("units"), "4") << "stage " << stage;
    if (stage == "3") EXPECT_EQ(zero.run.facts.at("whole_units_held"), "0");
    expect_matches_single(zero, 2, "tinycnn", kind, "stage " + stage + " " + optimizer);
  }
}

// The same options for ddp.
std::vector<std::string> ddp_arguments_like(std::vector<std::string> arguments) {
  arguments.front() = "--strategies=ddp";
  arguments.erase(std::remove_if(arguments.begin(), arguments.end(),
                                 [](const std::string& argument) { return argument.rfind("--zero-stages=", 0) == 0; }),
                  arguments.end());
  return arguments;
}

// Three ranks: tinycnn's groups do not divide by 3, so shards end in padding; the transformer's
// units are its embedding, each block and its head. With SGD against single; with AdamW against
// ddp on the same ranks' batches, within 1e-4: attention's key bias (in c_attn.bias) has a gradient
// of exactly 0 in exact arithmetic, so AdamW turns its rounding noise into updates of +-lr, and the
// noise differs with the order of any sum (3 ranks' means against the whole batch's: up to 1.8e-4
// against single, stage 1 as ddp; stage 3's unit-by-unit backward against ddp's: 1.7e-5). A wrong shard
// or a sum for the mean would be off by O(1).
constexpr double kAdamwNoiseTolerance = 1e-4;

TEST_P(ZeroStage, ThreeRanksOnATransformerMatchSingleDeviceAndDdp) {
  const GpusHiddenFromRanks gpus_hidden;
  const auto stage = GetParam();
  for (const std::string model : {"tinygpt", "tinyllama"}) {
    const auto sgd = run_ranks(zero_arguments(stage, model, "sgd"), 3);
    expect_matches_single(sgd, 3, model, OptimizerKind::kSgd, "stage " + stage + " " + model + " sgd");

    const auto arguments = zero_arguments(stage, model, "adamw");
    const auto adamw = run_ranks(arguments, 3);
    const auto ddp = run_ranks(ddp_arguments_like(arguments), 3);
    ASSERT_EQ(adamw.ranks[0].size(), ddp.ranks[0].size());
    for (size_t i = 0; i < ddp.ranks[0].size(); ++i) {
      for (int rank = 0; rank < 3; ++rank) {
        EXPECT_LT(relative_difference(adamw.ranks[rank][i], ddp.ranks[rank][i]), kAdamwNoiseTolerance)
            << "stage " << stage << " " << model << " adamw against ddp: rank " << rank << " tensor " << i;
      }
    }
  }
}

// On GPUs (NCCL): each stage trains tinygpt as ddp does on the same ranks' batches, within 1e-5
// (both run the same kernels; only the order of NCCL's sums may differ), and stages 1 and 2
// replayed from a CUDA graph train as their eager steps do.
TEST_P(ZeroStage, TwoGpusOnNcclTrainAsDdpEagerAndGraphed) {
  const int gpus = visible_gpu_count();
  if (gpus < 2) GTEST_SKIP() << "needs 2 GPUs, " << gpus << " visible";
  const auto stage = GetParam();
  const auto with_warmup = [](std::vector<std::string> arguments, int warmup) {
    std::replace(arguments.begin(), arguments.end(), std::string("--warmup=1"), "--warmup=" + std::to_string(warmup));
    return arguments;
  };
  // With a graph, kGraphWarmupSteps of the warm-up run on a side stream before the capture: the
  // eager runs take that many more warm-up steps, so that every run trains the same steps.
  const auto arguments = with_warmup(zero_arguments(stage, "tinygpt", "sgd"), 1 + kGraphWarmupSteps);
  const auto zero = run_ranks(arguments, 2);
  EXPECT_EQ(zero.run.facts.at("backend"), "nccl");
  const auto ddp = run_ranks(ddp_arguments_like(arguments), 2);
  const auto expect_close = [](const RankedWeights& value, const RankedWeights& reference, const std::string& what) {
    for (int rank = 0; rank < 2; ++rank) {
      ASSERT_EQ(value.ranks[rank].size(), reference.ranks[rank].size()) << what;
      for (size_t i = 0; i < reference.ranks[rank].size(); ++i) {
        EXPECT_LT(relative_difference(value.ranks[rank][i], reference.ranks[rank][i]), kTolerance)
            << what << ": rank " << rank << " tensor " << i;
      }
    }
  };
  expect_close(zero, ddp, "stage " + stage + " against ddp");
  if (stage == "3") return;  // not captured (GraphedStageThreeIsSkippedWithAReasonAndNamesCarryTheStage)
  auto graphed_arguments = zero_arguments(stage, "tinygpt", "sgd");
  graphed_arguments.push_back("--cuda-graph=on");
  expect_close(run_ranks(graphed_arguments, 2), zero, "stage " + stage + " graphed against eager");
}

// On GPUs, eager: how long each rank's compute stream waited on the gathers and the reductions,
// and their sum as the exposed communication (CUDA events around each wait); and the collectives'
// own durations per kind (CUDA events around each on the lane's side stream).
TEST_P(ZeroStage, TwoGpusOnNcclReportTheirWaitsOnEachCollectiveKind) {
  const int gpus = visible_gpu_count();
  if (gpus < 2) GTEST_SKIP() << "needs 2 GPUs, " << gpus << " visible";
  auto arguments = zero_arguments(GetParam(), "tinygpt", "sgd");
  // The durations are timed on the third step: a warm-up step, as by default.
  std::replace(arguments.begin(), arguments.end(), std::string("--warmup=1"), std::string("--warmup=3"));
  const auto counters = launch_case(PARBENCH_BINARY, arguments, only_train_case(arguments, 2), 2, 120).counters;
  // Each rank reports its own waits (the counters are per rank: `_rank<r>`).
  for (const std::string rank : {"rank0", "rank1"}) {
    const double gathers = counters.at("zero_gather_wait_ms_" + rank), reductions = counters.at("zero_reduce_wait_ms_" + rank);
    EXPECT_GE(gathers, 0.0) << rank;
    EXPECT_GE(reductions, 0.0) << rank;
    EXPECT_DOUBLE_EQ(counters.at("zero_exposed_comm_ms_" + rank), gathers + reductions) << rank;
    // Every step waits on a reduction at least: a CUDA event pair costs a few microseconds.
    EXPECT_GT(gathers + reductions, 0.0) << rank;

    // A value every rank shares is reported once, under the counter's own name.
    const auto of_rank = [&](const std::string& name) {
      const auto own = counters.find(name + "_" + rank);
      return own != counters.end() ? own->second : counters.at(name);
    };
    const double gathering = of_rank("zero_gather_ms"), reducing = of_rank("zero_reduce_ms");
    EXPECT_GT(gathering, 0.0) << rank;
    EXPECT_GT(reducing, 0.0) << rank;
    // The compute stream waits only while one of the step's collectives runs, and they run one
    // after another: a step's exposed part is at most their summed durations, plus a late peer's
    // lateness. The waits are the last step's and the durations the third's, alike steps: twice
    // the durations, and 5 ms for the peer's lateness in that step (tinygpt's collectives take
    // microseconds; on 2 H200s rank 1 once waited 2.4 ms against 0.57 ms of durations).
    EXPECT_LE(gathers + reductions, 2 * (gathering + reducing) + 5.0) << rank;
    // No link moves more than 1 TB/s: durations too short for the bytes sent mean a broken clock.
    const double sent = of_rank("comm_bytes_per_step");
    EXPECT_GT(sent, 0.0) << rank;
    EXPECT_LT(sent / ((gathering + reducing) * 1e-3), 1e12) << rank << ": " << sent << " bytes in "
                                                            << gathering + reducing << " ms";
  }
}

INSTANTIATE_TEST_SUITE_P(Zero, ZeroStage, ::testing::Values("1", "2", "3"),
                         [](const auto& info) { return "Stage" + info.param; });

// The memory breakdown per rank against ddp's: the optimizer state is halved from stage 1, the
// gradients from stage 2, the parameters at stage 3 (up to the padding: a few elements a group).
TEST(Zero, ModelStatesPerRankAreDdpsOverTheWorldForWhatEachStageShards) {
  const GpusHiddenFromRanks gpus_hidden;
  const auto ddp_arguments = ddp_arguments_like(zero_arguments("1", "tinycnn", "adamw"));
  const auto ddp = launch_case(PARBENCH_BINARY, ddp_arguments, only_train_case(ddp_arguments, 2), 2, 60).counters;
  const auto expect_share = [](double value, double ddps, double share, const std::string& what) {
    EXPECT_GT(ddps, 0) << what;
    EXPECT_NEAR(value / ddps, share, 0.01) << what << ": " << value << " GiB against ddp's " << ddps;
  };
  for (const std::string stage : {"1", "2", "3"}) {
    auto arguments = zero_arguments(stage, "tinycnn", "adamw");
    const auto zero = launch_case(PARBENCH_BINARY, arguments, only_train_case(arguments, 2), 2, 60).counters;
    // The waits are timed on GPUs only (the store backend's collectives run on the host).
    EXPECT_EQ(zero.count("zero_exposed_comm_ms"), 0u) << "stage " << stage;
    EXPECT_EQ(zero.count("zero_gather_ms"), 0u) << "stage " << stage;
    EXPECT_EQ(zero.count("zero_reduce_ms"), 0u) << "stage " << stage;
    for (const std::string device : {"dev0", "dev1"}) {
      const auto what = "stage " + stage + " " + device;
      expect_share(zero.at("optim_mem_gib_" + device), ddp.at("optim_mem_gib_" + device), 0.5, what + " optimizer state");
      expect_share(zero.at("grad_mem_gib_" + device), ddp.at("grad_mem_gib_" + device), stage == "1" ? 1.0 : 0.5,
                   what + " gradients");
      expect_share(zero.at("param_mem_gib_" + device), ddp.at("param_mem_gib_" + device), stage == "3" ? 0.5 : 1.0,
                   what + " parameters");
    }
    // Ring counts of the padded groups: stage 1 sends 3 (w-1)/w of the parameters' bytes, stage 2
    // twice that, stage 3 a little under 3 (the last unit is not gathered again for its backward).
    const double parameter_bytes = ddp.at("param_mem_gib_dev0") * 1024 * 1024 * 1024;
    const double sent = zero.at("comm_bytes_per_step");
    const double expected = stage == "1" ? 1.5 : stage == "2" ? 1.0 : 1.5;
    if (stage == "3") {
      EXPECT_LT(sent, 1.5 * parameter_bytes * 1.001);
      EXPECT_GT(sent, 1.0 * parameter_bytes);
    } else {
      EXPECT_NEAR(sent / parameter_bytes, expected, 0.001) << "stage " << stage;
    }
  }
}

// ---- --advise --------------------------------------------------------------------------------

// ddp's rank profile the predictor tests share: a step of 100 ms whose backward (70 ms) readies
// two buckets at 10 and 40 ms, each all-reducing in 40 ms.
RankProfile ddp_rank_profile() {
  RankProfile rank;
  rank.rank_step_ms = 100;
  rank.backward_ms = 70;
  rank.bucket_ready_ms = {10, 40};
  rank.bucket_allreduce_ms = {40, 40};
  return rank;
}

// An --advise profile holding ddp_rank_profile() where a case of `config` asks for it.
AdviseProfile ddp_profile_for(const RunConfig& config) {
  AdviseProfile profile;
  profile.ranks[{ddp_options(config).bucket_mib, config.batch_size}] = ddp_rank_profile();
  return profile;
}

// The predictor from ddp's profile: a step of 100 ms whose backward (70 ms) readies two buckets at
// 10 and 40 ms, each all-reducing in 40 ms. ddp: the second all-reduce ends 20 ms after backward.
// Every stage gathers all of the parameters (half of 80 ms) behind the 30 ms forward: 10 ms show.
// Stage 1: that, plus ddp's 20 ms. Stage 2: reduce-scatters of 20 ms each, hidden. Stage 3: a
// second gather and the reduce-scatters (80 ms) behind the 70 ms backward: 10 ms more.
TEST(Zero, PredictsEachStageFromDdpsProfileByTheRingRelation) {
  RunConfig config;
  config.batch_size = 8;
  auto profile = ddp_profile_for(config);
  const auto predicted = [&](const std::string& strategy, const std::string& stage) {
    auto case_config = config;
    if (!stage.empty()) case_config.options["stage"] = stage;
    const CaseConditions conditions{case_config, case_config.batch_size, 2};
    const auto& predictor = StrategyRegistry::instance().get(strategy).predictor();
    ProfileRequest request;
    predictor.request(conditions, request);
    EXPECT_EQ(request.ranks, (std::vector<std::pair<double, int64_t>>{{ddp_options(config).bucket_mib, config.batch_size}}));
    EXPECT_TRUE(predictor.needs_gpu_per_device);
    return predictor.predict(profile, conditions).step_ms;
  };
  EXPECT_DOUBLE_EQ(predicted("ddp", ""), 120);
  EXPECT_DOUBLE_EQ(predicted("zero", "1"), 130);
  EXPECT_DOUBLE_EQ(predicted("zero", "2"), 110);
  EXPECT_DOUBLE_EQ(predicted("zero", "3"), 120);
  // What is hidden costs 0.1 ms a millisecond: ddp hides 60 of its 80 ms of all-reduce; stage 1
  // 30 of the 40 ms gather and those 60; stage 2 30 and its 40 ms of reduce-scatters; stage 3 30,
  // and 70 of the 80 ms behind the backward.
  profile.ranks.begin()->second.step_lost_per_comm_ms = 0.1;
  EXPECT_DOUBLE_EQ(predicted("ddp", ""), 126);
  EXPECT_DOUBLE_EQ(predicted("zero", "1"), 139);
  EXPECT_DOUBLE_EQ(predicted("zero", "2"), 117);
  EXPECT_DOUBLE_EQ(predicted("zero", "3"), 130);
}

// Stage 3's first unit: gathered before any compute, reduce-scattered after the whole backward,
// so both show whole; its last unit is kept from its forward to its backward, not gathered
// again. The profile above, with two units of equal size: each unit's gather or reduce-scatter
// takes 20 ms. The forward hides the second unit's gather (20 of its 30 ms), the backward the
// first unit's second gather and the second unit's reduce-scatter (40 of its 70 ms): 40 ms
// show. Stages 1 and 2 gather behind the step's start and reduce in ddp's buckets: as before.
TEST(Zero, PredictsStageThreesFirstUnitGatherAndLastReduceScatterAsExposed) {
  RunConfig config;
  config.batch_size = 8;
  auto profile = ddp_profile_for(config);
  const auto meta = torch::TensorOptions().dtype(torch::kFloat32).device(torch::kMeta);
  profile.memory.parameters = {torch::empty({40}, meta), torch::empty({30}, meta), torch::empty({10}, meta)};
  profile.memory.parameter_names = {"a.weight", "b.weight", "b.bias"};
  profile.memory.parameter_stage = {0, 1, 1};
  profile.memory.stage_names = {"a", "b"};
  const auto predicted = [&](const std::string& stage) {
    auto case_config = config;
    case_config.options["stage"] = stage;
    const CaseConditions conditions{case_config, case_config.batch_size, 2};
    return StrategyRegistry::instance().get("zero").predictor().predict(profile, conditions).step_ms;
  };
  EXPECT_DOUBLE_EQ(predicted("1"), 130);
  EXPECT_DOUBLE_EQ(predicted("2"), 110);
  EXPECT_DOUBLE_EQ(predicted("3"), 140);
  // Hidden: 100 ms of collectives (the 40 ms gather, 20 ms of second gather, 40 ms of
  // reduce-scatters) less the 40 that show, at 0.1 ms a millisecond.
  profile.ranks.begin()->second.step_lost_per_comm_ms = 0.1;
  EXPECT_DOUBLE_EQ(predicted("3"), 146);
  // A first unit of a quarter (a last of three quarters): 10 ms each way; the forward hides the
  // other 30 of the gather, the backward the other 40 (10 ms of second gather, 30 of
  // reduce-scatter): 20 ms show.
  profile.memory.parameters[0] = torch::empty({20}, meta);
  profile.memory.parameters[1] = torch::empty({50}, meta);
  profile.ranks.begin()->second.step_lost_per_comm_ms = 0;
  EXPECT_DOUBLE_EQ(predicted("3"), 120);
  // The units in the stages' order, whatever order the parameters are registered in: the second
  // stage's parameters listed first change nothing (taken as the first unit, its 30 ms each way
  // would show: 160).
  auto reordered = profile;
  reordered.memory.parameters = {profile.memory.parameters[1], profile.memory.parameters[2],
                                 profile.memory.parameters[0]};
  reordered.memory.parameter_names = {"b.weight", "b.bias", "a.weight"};
  reordered.memory.parameter_stage = {1, 1, 0};
  {
    auto case_config = config;
    case_config.options["stage"] = "3";
    const CaseConditions conditions{case_config, case_config.batch_size, 2};
    EXPECT_DOUBLE_EQ(StrategyRegistry::instance().get("zero").predictor().predict(reordered, conditions).step_ms, 120);
  }
}

// --advise's profile of a zero case: its rank 0 rehearsed alone on one device (its collectives
// sent nowhere), in every stage; the prediction adds the collectives to the rehearsed step in
// place of single's, which steps the whole optimizer where zero steps a shard.
TEST(Zero, ARehearsedRankRunsAloneAndItsStepReplacesSinglesInThePrediction) {
  for (const std::string stage : {"1", "2", "3"}) {
    auto specs = build_cases(parsed_options({"--strategies=zero", "--models=tinygpt", "--gpus=2", "--batch=4",
                                             "--seq=16", "--optimizer=adamw", "--zero-stages=" + stage},
                                            /*has_gpu=*/false),
                             /*visible_gpus=*/2);
    ASSERT_EQ(specs.size(), 1u);
    const auto& spec = specs.front();
    const CaseConditions conditions{spec.config, spec.global_batch, 2};
    const auto& predictor = spec.strategy->predictor();
    ProfileRequest request;
    predictor.request(conditions, request);
    ASSERT_EQ(request.rehearsals.size(), 1u) << "stage " << stage;
    const auto& [key, asked] = *request.rehearsals.begin();
    EXPECT_TRUE(asked.time_only);
    EXPECT_EQ(asked.config.batch_size, spec.config.batch_size);
    const auto rehearsal = rehearse(asked, torch::kCPU, /*graphed=*/false);
    EXPECT_GT(rehearsal.step_ms, 0.0) << "stage " << stage;
    auto alone = asked.create();
    alone->setup([&spec](torch::Device) { return make_case_model(spec.config); }, {torch::kCPU}, spec.config);
    EXPECT_EQ(alone->describe().at("backend"), "rehearsal");
    if (stage == "3") {
      // It keeps every unit's whole parameters (real values, not leftover bytes) through its steps.
      alone->train_step(make_random_batch(spec.config, spec.config.batch_size, torch::kCPU, torch::kCPU));
      EXPECT_EQ(alone->describe().at("whole_units_held"), alone->describe().at("units"));
    }

    auto profile = ddp_profile_for(spec.config);
    const double from_single = predictor.predict(profile, conditions).step_ms;
    profile.rehearsals[key] = Rehearsal{90, 0, {}};
    const auto from_rehearsal = predictor.predict(profile, conditions);
    EXPECT_DOUBLE_EQ(from_rehearsal.step_ms, from_single - 10) << "stage " << stage;
    EXPECT_EQ(from_rehearsal.profile, "rehearsal");
  }
}

// ---- faults, as ddp's (tests/launcher_test.cpp, tests/fault_test.cpp) --------------------------

std::string zero_failure(const std::map<std::string, std::string>& hooks) {
  auto arguments = zero_arguments("3", "tinycnn", "sgd");
  try {
    launch_case(PARBENCH_BINARY, arguments, only_train_case(arguments, 2), 2, /*timeout_s=*/3, hooks);
  } catch (const std::runtime_error& error) {
    return error.what();
  }
  return "";
}

TEST(Zero, ARankThatDiesOrNeverJoinsIsNamed) {
  const GpusHiddenFromRanks gpus_hidden;
  const auto died = zero_failure({{"PARBENCH_TEST_FAIL_RANK", "1"}});
  EXPECT_NE(died.find("rank 1 exited with code 3"), std::string::npos) << died;
  const auto absent = zero_failure({{"PARBENCH_TEST_ABSENT_RANK", "1"}});
  EXPECT_NE(absent.find("rank 0: rank 1 did not join the rendezvous"), std::string::npos) << absent;
}

// A CUDA graph would replay stage 3's host-side release and gathering at captured addresses: its
// graphed case is skipped with that reason, or left out where its eager twin runs.
TEST(Zero, GraphedStageThreeIsSkippedWithAReasonAndNamesCarryTheStage) {
  const auto stage_of = [](const CaseSpec& spec) { return spec.name.substr(spec.name.find("/stage:") + 7, 1); };
  const auto graphed_only = parsed_options({"--strategies=zero", "--models=tinycnn", "--cuda-graph=on", "--gpus=2"},
                                           /*has_gpu=*/true);
  std::vector<std::string> stages;
  for (const auto& spec : build_cases(graphed_only, /*visible_gpus=*/2)) {
    stages.push_back(stage_of(spec));
    if (stage_of(spec) == "3") {
      EXPECT_NE(spec.skip_reason.find("CUDA graph"), std::string::npos) << spec.skip_reason;
    } else {
      EXPECT_EQ(spec.skip_reason, "") << spec.name;
    }
  }
  EXPECT_EQ(stages, (std::vector<std::string>{"1", "2", "3"}));

  const auto both = parsed_options({"--strategies=zero", "--models=tinycnn", "--cuda-graph=off,on", "--gpus=2"},
                                   /*has_gpu=*/true);
  std::vector<std::string> eager, graphed;
  for (const auto& spec : build_cases(both, /*visible_gpus=*/2)) {
    EXPECT_EQ(spec.skip_reason, "") << spec.name;
    (spec.cuda_graph ? graphed : eager).push_back(stage_of(spec));
  }
  EXPECT_EQ(eager, (std::vector<std::string>{"1", "2", "3"}));
  EXPECT_EQ(graphed, (std::vector<std::string>{"1", "2"}));
}

}  // namespace
}  // namespace parbench
