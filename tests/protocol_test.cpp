// One case protocol for every child process (docs/DISTRIBUTED.md): a rank of a train case, a
// rank of an all-reduce case and the profile companion each get their case as its fields and
// build it from them alone, even where their own options would sweep other cases; and what the
// ranks hand back carries every counter their strategy reported.
#include "benchmarks/cases/cases.h"
#include "benchmarks/launch/launcher.h"
#include "benchmarks/launch/rank_results.h"
#include "benchmarks/launch/temporary_directory.h"
#include "benchmarks/run/allreduce.h"
#include "benchmarks/run/case_runner.h"
#include "tests/launched_case.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>

namespace parbench {
namespace {

std::string read_file(const std::string& path) {
  std::ifstream file(path);
  std::stringstream text;
  text << file.rdbuf();
  return text.str();
}

// Options under which the ranks' own matrix has no all-reduce case: no distributed strategy.
const std::vector<std::string> kNoAllreduce = {"--strategies=single", "--models=tinycnn", "--warmup=0",
                                               "--repetitions=1",     "--iterations=2"};

// nccl-tests' bus bandwidth: each rank of a ring sends and receives 2(n-1)/n of the buffer.
TEST(CaseProtocol, AllreducesBusBandwidthIsTheRingsShare) {
  EXPECT_DOUBLE_EQ(bus_bandwidth_gbps(10.0, 2), 10.0);
  EXPECT_DOUBLE_EQ(bus_bandwidth_gbps(10.0, 4), 15.0);
  EXPECT_DOUBLE_EQ(bus_bandwidth_gbps(10.0, 8), 17.5);
  EXPECT_DOUBLE_EQ(bus_bandwidth_gbps(10.0, 1), 0.0);
}

TEST(CaseProtocol, AllreduceFieldsDescribeTheCaseAndBuildItBack) {
  const auto allreduce = allreduce_case(4096, 3);
  EXPECT_EQ(allreduce.name, "comm/allreduce/bytes:4096/ranks:3");
  const auto fields = allreduce_fields(allreduce);
  EXPECT_EQ(fields.dump(), R"({"collective":"allreduce","bytes":4096,"ranks":3})");
  ASSERT_TRUE(is_allreduce_fields(nlohmann::json::parse(fields.dump())));
  const auto back = allreduce_case_from_fields(nlohmann::json::parse(fields.dump()));
  EXPECT_EQ(back.name, allreduce.name);
  EXPECT_EQ(back.bytes, 4096);
  EXPECT_EQ(back.ranks, 3);
  EXPECT_TRUE(back.skip_reason.empty());
  // The sweep names its cases the same way.
  auto options = parsed_options({"--strategies=ddp"}, /*has_gpu=*/true);
  for (const auto& swept : build_allreduce_cases(options, /*gpus=*/2)) {
    EXPECT_EQ(allreduce_case_from_fields(nlohmann::json::parse(allreduce_fields(swept).dump())).name, swept.name);
  }
  // A train case's fields are not an all-reduce's; broken ones are named.
  EXPECT_FALSE(is_allreduce_fields(nlohmann::json::parse(only_train_case(kNoAllreduce, 1).fields)));
  EXPECT_THROW(allreduce_case_from_fields(nlohmann::json::parse(R"({"collective":"broadcast","bytes":4,"ranks":2})")),
               std::invalid_argument);
  EXPECT_THROW(allreduce_case_from_fields(nlohmann::json::parse(R"({"collective":"allreduce","bytes":6,"ranks":2})")),
               std::invalid_argument);
  EXPECT_THROW(allreduce_case_from_fields(nlohmann::json::parse(R"({"collective":"allreduce","ranks":2})")),
               std::invalid_argument);
}

// The ranks of an all-reduce case used to rebuild the sweep from their options and look the
// case up by name: under these options the sweep is empty, and the case was "no case named".
TEST(CaseProtocol, AllreduceRanksBuildTheirCaseFromItsFieldsNotFromTheirOptions) {
  const GpusHiddenFromRanks gpus_hidden;
  auto options = parsed_options(kNoAllreduce, /*has_gpu=*/false);
  ASSERT_TRUE(build_allreduce_cases(options, 2).empty());
  const auto allreduce = allreduce_case(1024, 2);
  const auto run = launch_case(PARBENCH_BINARY, kNoAllreduce, {allreduce.name, allreduce_fields(allreduce).dump()}, 2,
                               /*timeout_s=*/30);
  EXPECT_EQ(run.world_size, 2);
  EXPECT_EQ(run.facts.at("all_reduces_per_iteration"), "100");
  ASSERT_EQ(run.repetitions.size(), 1u);
  EXPECT_EQ(run.repetitions[0].seconds.size(), 2u);
}

// A train case's ranks build the case its fields describe: here a ddp case at batch 3, while
// their own options sweep single at batch 2 only.
TEST(CaseProtocol, TrainRanksBuildTheirCaseFromItsFieldsNotFromTheirOptions) {
  const GpusHiddenFromRanks gpus_hidden;
  const std::vector<std::string> ddp = {"--strategies=ddp", "--models=tinycnn", "--batch=3", "--image=16",
                                        "--warmup=0",       "--repetitions=1",  "--iterations=1", "--allreduce=off"};
  const auto launched = only_train_case(ddp, 2);
  ASSERT_NE(launched.name.find("train/ddp/tinycnn/batch:3/"), std::string::npos) << launched.name;
  auto others = kNoAllreduce;
  others.insert(others.end(), {"--batch=2", "--image=16"});
  const auto run = launch_case(PARBENCH_BINARY, others, launched, 2, /*timeout_s=*/30);
  EXPECT_EQ(run.world_size, 2);
  EXPECT_EQ(run.facts.at("scaling"), "weak");  // ddp's own fact: the ranks ran ddp
}

TEST(CaseProtocol, ACaseWithoutFieldsIsNotLaunched) {
  EXPECT_THROW(launch_case(PARBENCH_BINARY, kNoAllreduce, {"comm/allreduce/bytes:1024/ranks:2", ""}, 2, 30),
               std::invalid_argument);
}

// The profile companion is given a case's fields on its input, one case a line. Its options sweep
// tinycnn at batch 2 only; the case it is asked for is at batch 3, which it builds and traces.
TEST(CaseProtocol, TheProfileCompanionBuildsItsCaseFromItsFieldsNotFromItsOptions) {
  const GpusHiddenFromRanks gpus_hidden;
  TemporaryDirectory dir("parbench-protocol-test");
  std::vector<std::string> asked = {"--strategies=single", "--models=tinycnn", "--batch=3", "--image=16",
                                    "--warmup=0"};
  const auto launched = only_train_case(asked, 1);
  ASSERT_NE(launched.name.find("/batch:3/"), std::string::npos) << launched.name;
  std::ofstream(dir.file("requests")) << launched.fields << "\n" << R"({"strategy":"no_such_strategy"})" << "\n";
  const std::string command = std::string(PARBENCH_BINARY) +
                              " --strategies=single --models=tinycnn --batch=2 --image=16 --warmup=0 --trace=" +
                              dir.path() + " --parbench-profile-companion < " + dir.file("requests") + " 2> " +
                              dir.file("stderr");
  FILE* companion = popen(command.c_str(), "r");
  ASSERT_NE(companion, nullptr);
  std::string answers;
  char buffer[4096];
  while (std::fgets(buffer, sizeof buffer, companion) != nullptr) answers += buffer;
  ASSERT_EQ(pclose(companion), 0) << read_file(dir.file("stderr"));
  std::istringstream lines(answers);
  std::string line;
  ASSERT_TRUE(std::getline(lines, line)) << read_file(dir.file("stderr"));
  const auto answer = nlohmann::json::parse(line);
  ASSERT_FALSE(answer.contains("error")) << answer.dump();
  EXPECT_EQ(answer.at("case"), launched.name);
  EXPECT_EQ(answer.at("trace"), trace_path(dir.path(), launched.name));
  EXPECT_TRUE(std::ifstream(answer.at("trace").get<std::string>()).good()) << answer.dump();
  // Fields that name no case get an error, and the companion goes on.
  ASSERT_TRUE(std::getline(lines, line));
  const auto refused = nlohmann::json::parse(line);
  ASSERT_TRUE(refused.contains("error")) << refused.dump();
  EXPECT_NE(refused.at("error").get<std::string>().find("no_such_strategy"), std::string::npos) << refused.dump();
}

// ---- What the ranks hand back ------------------------------------------------------------------

TEST(CaseProtocol, ACounterEveryRankReportsAlikeArrivesUnderItsOwnNameAndOneThatDiffersPerRank) {
  RankMeasurements zero, one;
  zero.seconds = one.seconds = {{1.0}};
  zero.counters = {{"allreduces_per_step", 4}, {"allreduce_ms", 2}, {"param_mem_gib_dev0", 1}, {"only_rank0", 5}};
  one.counters = {{"allreduces_per_step", 4}, {"allreduce_ms", 3}, {"param_mem_gib_dev0", 1}};
  const auto combined = combine_ranks({zero, one}, RankedRun{});
  EXPECT_EQ(combined.counters, (std::map<std::string, double>{{"allreduces_per_step", 4},
                                                              {"allreduce_ms_rank0", 2},
                                                              {"allreduce_ms_rank1", 3},
                                                              // per device, though alike
                                                              {"param_mem_gib_dev0", 1},
                                                              {"param_mem_gib_dev1", 1},
                                                              // one rank's only
                                                              {"only_rank0_rank0", 5}}));
  EXPECT_EQ(ranked_run_from(to_json_value(combined)).counters, combined.counters);
}

}  // namespace
}  // namespace parbench
