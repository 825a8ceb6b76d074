// The test-only model (tests/test_only_model.cpp), found by its registered name: parbench reads
// its declaration where it needs facts (options, --cut, the case matrix, --help) and builds it
// only in the processes that train it, and it trains as single does under every strategy on
// CPU devices, ddp's ranks included.
#include "benchmarks/cases/cases.h"
#include "benchmarks/launch/launcher.h"
#include "benchmarks/launch/rank_results.h"
#include "benchmarks/launch/temporary_directory.h"
#include "models/model_zoo.h"
#include "strategies/strategy.h"
#include "strategies/training.h"
#include "tests/launched_case.h"
#include "tests/option_parsing.h"
#include "tests/split_equivalence.h"
#include "tests/tensor_compare.h"
#include "tests/test_only_model.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <set>

namespace parbench {
namespace {

using test_only_model::kName;

const std::string kModel = kName;

TEST(TestOnlyModel, IsRegisteredWithItsDeclaredFacts) {
  const auto& info = ModelRegistry::instance().get(kModel);
  EXPECT_FALSE(info.language_model());
  EXPECT_EQ(info.sample.channels, 1);
  EXPECT_EQ(info.fp32_engine, Fp32Engine::kCublasMatmul);
  const auto names = model_names();
  EXPECT_NE(std::find(names.begin(), names.end(), kModel), names.end());
}

// Options are checked from the declaration: its stage names and groups for --cut, its smallest
// side for --image. Neither they nor the case matrix build the model.
TEST(TestOnlyModel, OptionParsingAndTheCaseMatrixDoNotBuildIt) {
  const int before = test_only_model::builds();
  const auto options =
      parsed_options({"--models=" + kModel, "--image=8", "--cut=input,hidden|output", "--strategies=model_parallel",
                      "--gpus=2"},
                     /*has_gpu=*/false);
  EXPECT_EQ(options.models, std::vector<std::string>{kModel});
  const auto cases = build_cases(options, /*visible_gpus=*/0);
  EXPECT_FALSE(cases.empty());
  EXPECT_EQ(test_only_model::builds(), before);

  // A stage it does not have, and an image smaller than it accepts, are refused by name.
  try {
    parsed_options({"--models=" + kModel, "--cut=input|stem"}, false);
    ADD_FAILURE() << "a cut naming a stage the model lacks was accepted";
  } catch (const UsageError& error) {
    // Refused for the stage, and answered with the stages the model declares.
    EXPECT_NE(std::string(error.what()).find("unknown stage 'stem'"), std::string::npos) << error.what();
    EXPECT_NE(std::string(error.what()).find("input, hidden"), std::string::npos) << error.what();
  }
  try {
    parsed_options({"--models=" + kModel, "--image=3"}, false);
    ADD_FAILURE() << "an image smaller than the model accepts was accepted";
  } catch (const UsageError& error) {
    EXPECT_EQ(std::string(error.what()), "--image=3 is smaller than " + kModel + " accepts (at least 4)");
  }
  EXPECT_EQ(test_only_model::builds(), before);

  // The counter counts: building it once shows.
  make_model(kModel, /*num_classes=*/10);
  EXPECT_EQ(test_only_model::builds(), before + 1);
}

// Single, model_parallel, pipeline under every schedule, data_parallel; SGD and AdamW.
INSTANTIATE_TEST_SUITE_P(TestOnlyModel, SplitEquivalence,
                         ::testing::Values(EquivalenceCase{kName, 6, 8, /*eval_mode=*/false, /*devices=*/2, {1, 3, 4, 6, 9}},
                                           EquivalenceCase{kName, 8, 8, /*eval_mode=*/false, /*devices=*/4, {2, 3}}),
                         [](const auto& info) { return "test_only_model_" + std::to_string(info.param.devices) + "devices"; });

#ifndef PARBENCH_WITH_TEST_MODEL
#error "PARBENCH_WITH_TEST_MODEL names parbench built with the test-only model (tests/CMakeLists.txt)"
#endif

// ddp on 2 CPU ranks, started as parbench starts them: both ranks end bitwise equal, and equal to
// single's training on both ranks' batches concatenated.
TEST(TestOnlyModel, DdpRanksOnCpuTrainItAsSingleDoes) {
  const GpusHiddenFromRanks gpus_hidden;
  constexpr int kRanks = 2, kBatchPerRank = 3, kSteps = 3;  // one warm-up step, two timed
  TemporaryDirectory weights("parbench-test-model-ddp");
  const std::vector<std::string> arguments = {"--strategies=ddp", "--models=" + kModel, "--batch=3", "--image=8",
                                              "--repetitions=1",  "--iterations=2",     "--steps=1", "--warmup=1",
                                              "--allreduce=off",  "--dist-timeout=30"};
  const auto run = launch_case(PARBENCH_WITH_TEST_MODEL, arguments, only_train_case(arguments, kRanks), kRanks,
                               /*timeout_s=*/60, {{"PARBENCH_TEST_SAVE_WEIGHTS", weights.path()}});
  ASSERT_EQ(run.world_size, kRanks);
  std::vector<std::vector<torch::Tensor>> ranks(kRanks);
  for (int rank = 0; rank < kRanks; ++rank) torch::load(ranks[rank], weights.file("rank" + std::to_string(rank) + ".pt"));

  RunConfig config;
  config.model = kModel;
  config.batch_size = kBatchPerRank * kRanks;
  config.image_size = 8;
  fit_config_to_model(config);
  std::vector<torch::Tensor> inputs, targets;
  for (int rank = 0; rank < kRanks; ++rank) {
    torch::manual_seed(kRankDataSeed + static_cast<uint64_t>(rank));
    const auto batch = make_random_batch(config, kBatchPerRank, torch::kCPU, torch::kCPU);
    inputs.push_back(batch.inputs);
    targets.push_back(batch.targets);
  }
  auto single = StrategyRegistry::instance().get("single").create();
  single->setup(
      [&](torch::Device) {
        torch::manual_seed(kRankModelSeed);
        return make_model(config.model, config.num_classes);
      },
      {torch::kCPU}, config);
  for (int step = 0; step < kSteps; ++step) single->train_step({torch::cat(inputs), torch::cat(targets)});
  std::vector<torch::Tensor> expected;
  const auto parameters = single->model().module().parameters();
  for (const auto& parameter : parameters) expected.push_back(parameter.detach());
  for (const auto& parameter : parameters) expected.push_back(parameter.grad());

  ASSERT_EQ(ranks[0].size(), expected.size());
  for (size_t i = 0; i < expected.size(); ++i) {
    EXPECT_TRUE(torch::equal(ranks[1][i], ranks[0][i])) << "rank 1, tensor " << i;
    EXPECT_LT(relative_difference(ranks[0][i], expected[i]), 1e-5) << "tensor " << i;
  }
}

struct Finished {
  int status = -1;
  std::string out;
};

Finished run_plugin_binary(const std::string& arguments, const std::string& build_log) {
  const std::string command = std::string(test_only_model::kBuildLogVariable) + "=" + build_log + " " +
                              PARBENCH_WITH_TEST_MODEL + " " + arguments + " 2>&1";
  Finished finished;
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return finished;
  char buffer[4096];
  for (size_t read; (read = fread(buffer, 1, sizeof buffer, pipe)) > 0;) finished.out.append(buffer, read);
  finished.status = pclose(pipe);
  return finished;
}

std::vector<std::string> lines_of(const std::string& path) {
  std::ifstream file(path);
  std::vector<std::string> lines;
  for (std::string line; std::getline(file, line);) lines.push_back(line);
  return lines;
}

// Every process of a run that builds the model appends its id to the log: listing the cases
// builds it nowhere, and a ddp run builds it once in each rank and never in the parbench process
// that launched them.
TEST(TestOnlyModel, OnlyTheProcessesThatTrainItBuildIt) {
  const GpusHiddenFromRanks gpus_hidden;
  TemporaryDirectory dir("parbench-test-model-builds");
  const auto log = dir.file("builds");

  const auto help = run_plugin_binary("--help", log);
  EXPECT_EQ(help.status, 0) << help.out;
  EXPECT_NE(help.out.find(kModel), std::string::npos) << "--help does not list the model:\n" << help.out;

  const auto listed = run_plugin_binary("--models=" + kModel + " --image=8 --batch=4 --benchmark_list_tests", log);
  EXPECT_EQ(listed.status, 0) << listed.out;
  EXPECT_NE(listed.out.find("/" + kModel + "/"), std::string::npos) << listed.out;
  EXPECT_TRUE(lines_of(log).empty()) << "listing the cases built the model";

  const auto ddp = run_plugin_binary("--strategies=ddp --models=" + kModel +
                                         " --image=8 --batch=4 --repetitions=1 --iterations=1 --warmup=1 --allreduce=off"
                                         " --dist-timeout=30",
                                     log);
  ASSERT_EQ(ddp.status, 0) << ddp.out;
  const auto builders = lines_of(log);
  EXPECT_EQ(builders.size(), 2u) << ddp.out;
  EXPECT_EQ(std::set<std::string>(builders.begin(), builders.end()).size(), 2u) << "a rank built it twice";
}

}  // namespace
}  // namespace parbench
