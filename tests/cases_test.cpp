// The case matrix: names, placements and skips decided before anything runs.
#include "benchmarks/cases.h"

#include <gtest/gtest.h>

#include <map>

namespace parbench {
namespace {

std::map<std::string, const CaseSpec*> by_strategy(const std::vector<CaseSpec>& cases) {
  std::map<std::string, const CaseSpec*> first;
  for (const auto& spec : cases) first.emplace(spec.strategy->name, &spec);
  return first;
}

TEST(Cases, DevicesPutStagesAndReplicasOnTheNamedGpusAndSaySo) {
  Options options;
  options.devices = {0, 0};
  options.strategy_options = {{"split", {"20"}}, {"schedule", {"gpipe"}}};
  const auto cases = build_cases(options, /*visible_gpus=*/1);
  const auto first = by_strategy(cases);

  const auto& single = *first.at("single");
  EXPECT_EQ(single.name, "train/single/resnet50/batch:120/image:128/precision:fp32/data:device");
  EXPECT_EQ(shared_gpu_placement(single), "");

  const auto& pipeline = *first.at("pipeline");
  EXPECT_EQ(pipeline.name,
            "train/pipeline/resnet50/batch:120/image:128/precision:fp32/data:device/devices:0,0/gpus:2/split:20/"
            "schedule:gpipe");
  EXPECT_TRUE(pipeline.skip_reason.empty()) << pipeline.skip_reason;
  EXPECT_EQ(shared_gpu_placement(pipeline), "2 stages on 1 GPU");
  EXPECT_EQ(shared_gpu_placement(*first.at("model_parallel")), "2 stages on 1 GPU");
  EXPECT_EQ(shared_gpu_placement(*first.at("data_parallel")), "2 replicas on 1 GPU");
  EXPECT_NE(first.at("ddp")->skip_reason.find("cannot share a GPU"), std::string::npos);
}

TEST(Cases, DistinctDevicesInOrderKeepTodaysNames) {
  Options options;
  options.strategies = {"model_parallel"};
  const auto plain = build_cases(options, /*visible_gpus=*/2);
  options.devices = {0, 1};
  const auto named = build_cases(options, /*visible_gpus=*/2);
  ASSERT_EQ(plain.size(), named.size());
  EXPECT_EQ(plain.front().name, named.front().name);
  options.devices = {1, 0};
  EXPECT_NE(build_cases(options, 2).front().name.find("/devices:1,0/gpus:2"), std::string::npos);
}

TEST(Cases, DevicesAreCheckedAgainstTheGpusAndDdp) {
  Options options;
  options.devices = {0, 0};
  EXPECT_NO_THROW(check_devices(options, /*visible_gpus=*/1));
  EXPECT_THROW(check_devices(options, /*visible_gpus=*/0), UsageError);
  options.strategies = {"pipeline", "ddp"};
  try {
    check_devices(options, 1);
    FAIL() << "ddp accepted on a shared GPU";
  } catch (const UsageError& error) {
    EXPECT_NE(std::string(error.what()).find("ranks cannot share one"), std::string::npos) << error.what();
  }
  options.strategies = {"pipeline"};
  options.devices = {0, 2};
  EXPECT_THROW(check_devices(options, 2), UsageError);
  options.devices = {0, 1};
  options.gpus = 3;
  EXPECT_THROW(check_devices(options, 2), UsageError);
}

}  // namespace
}  // namespace parbench
