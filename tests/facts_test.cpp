// Facts as data in the JSON (docs/JSON.md, 1.8.0): the counter table and the schedules' facts,
// as declared in C++ and as a run writes them into its context.
#include "benchmarks/launch/temporary_directory.h"
#include "core/counter_table.h"
#include "strategies/pipeline_schedule.h"
#include "strategies/strategy.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <fstream>
#include <set>
#include <string>

namespace parbench {
namespace {

TEST(CounterTable, FindsEachWrittenKeyByItsScope) {
  const auto& table = CounterTable::instance();
  ASSERT_NE(table.find("step_ms"), nullptr);
  EXPECT_EQ(table.find("step_ms")->better, Better::kLower);
  EXPECT_EQ(table.find("step_ms")->unit, "ms");
  EXPECT_EQ(table.find("items_per_second")->better, Better::kHigher);
  ASSERT_NE(table.find("peak_mem_gib_dev3"), nullptr);
  EXPECT_EQ(table.find("peak_mem_gib_dev3")->name, "peak_mem_gib");
  EXPECT_EQ(table.find("peak_mem_gib_dev3")->per, CounterScope::kDevice);
  // A stage's host time and data_parallel's own, one stem in two scopes.
  ASSERT_NE(table.find("host_forward_ms_stage1"), nullptr);
  EXPECT_EQ(table.find("host_forward_ms_stage1")->per, CounterScope::kStage);
  ASSERT_NE(table.find("host_forward_ms"), nullptr);
  EXPECT_EQ(table.find("host_forward_ms")->per, CounterScope::kCase);
  // A distributed strategy's per-case counter as rank 1 reported it.
  ASSERT_NE(table.find("reduce_ms_rank1"), nullptr);
  EXPECT_EQ(table.find("reduce_ms_rank1")->name, "reduce_ms");
  EXPECT_EQ(table.find("no_such_counter"), nullptr);
  EXPECT_EQ(table.find("peak_mem_gib_devx"), nullptr);
  EXPECT_EQ(table.find("peak_mem_gib"), nullptr);  // a per-device counter is written with its device
}

TEST(CounterTable, RefusesOneCounterDeclaredWithOtherFacts) {
  auto& table = CounterTable::instance();
  EXPECT_TRUE(table.declare(Counter("step_ms").unit("ms").lower_is_better().means("milliseconds per training step")));
  EXPECT_THROW(table.declare(Counter("step_ms").unit("s").lower_is_better()), std::logic_error);
  EXPECT_THROW(table.declare(Counter("")), std::logic_error);
}

TEST(CounterTable, DeclaresEveryStrategyOptionsCounter) {
  for (const auto* info : StrategyRegistry::instance().all()) {
    for (const auto& option : info->options()) {
      if (option.counter().empty()) continue;
      EXPECT_NE(CounterTable::instance().find(option.counter()), nullptr)
          << info->name() << "'s option " << option.field() << " reports " << option.counter() << ", declared nowhere";
    }
  }
}

TEST(CounterTable, JsonListsEveryDeclarationWithItsKey) {
  const auto table = nlohmann::json::parse(CounterTable::instance().json());
  ASSERT_EQ(table.size(), CounterTable::instance().all().size());
  std::set<std::string> keys;
  for (const auto& entry : table) {
    for (const char* field : {"name", "key", "unit", "better", "per", "meaning"}) EXPECT_TRUE(entry.contains(field)) << entry;
    keys.insert(entry["key"].get<std::string>());
  }
  for (const char* key : {"step_ms", "batch", "peak_mem_gib_dev<i>", "host_wait_ms_stage<s>", "broadcast_ms", "split_size"}) {
    EXPECT_EQ(keys.count(key), 1u) << key;
  }
  EXPECT_EQ(table[0]["name"], "items_per_second");
  EXPECT_EQ(table[0]["better"], "higher");
}

TEST(ScheduleFacts, IdealBubbleAndFormulaPerSchedule) {
  EXPECT_EQ(ideal_bubble_formula(schedule_info("gpipe")), "(S-1)/(M+S-1)");
  EXPECT_EQ(ideal_bubble_formula(schedule_info("interleaved-1f1b")), "(S-1)/(vM+S-1)");
  EXPECT_EQ(ideal_bubble_formula(schedule_info("zb-h1")), "(S-1)/(3M+S-1)");
  EXPECT_DOUBLE_EQ(ideal_bubble_fraction(schedule_info("1f1b"), 2, 6), 1.0 / 7);
  EXPECT_DOUBLE_EQ(ideal_bubble_fraction(schedule_info("interleaved-1f1b"), 2, 6, 2), 1.0 / 13);
  EXPECT_DOUBLE_EQ(ideal_bubble_fraction(schedule_info("zb-h1"), 2, 6), 1.0 / 19);
  EXPECT_DOUBLE_EQ(ideal_bubble_fraction(schedule_info("gpipe"), 4, 6, 3), 3.0 / 9);  // chunks only where used
}

TEST(ScheduleFacts, OpsAreWhatTheProgramsRun) {
  EXPECT_EQ(schedule_ops(schedule_info("gpipe")), (std::vector<StageOp>{StageOp::kForward, StageOp::kBackward}));
  // The tutorial's last stage takes one backward over every micro-batch's loss; earlier stages
  // one backward per micro-batch as its input gradients arrive.
  EXPECT_EQ(schedule_ops(schedule_info("tutorial")),
            (std::vector<StageOp>{StageOp::kForward, StageOp::kBackward, StageOp::kBackwardAll}));
  EXPECT_EQ(schedule_ops(schedule_info("zb-h1")),
            (std::vector<StageOp>{StageOp::kForward, StageOp::kBackwardInput, StageOp::kBackwardWeight}));
  const auto facts = nlohmann::json::parse(schedule_facts_json());
  ASSERT_EQ(facts.size(), schedule_table().size());
  const auto& zb = facts.back();
  EXPECT_EQ(zb["name"], "zb-h1");
  EXPECT_EQ(zb["ideal_bubble"], "(S-1)/(3M+S-1)");
  EXPECT_EQ(zb["ideal_work_per_micro_batch"], 3);
  EXPECT_EQ(zb["work_times_chunks"], false);
  EXPECT_EQ(zb["ops"], nlohmann::json::parse(R"([{"letter":"F","means":"forward"},{"letter":"B","means":"input gradient"},)"
                                             R"({"letter":"W","means":"weight gradients"}])"));
}

std::string run_parbench(const std::string& arguments, int& exit_code) {
  std::string output;
  std::array<char, 4096> buffer{};
  FILE* pipe = popen((std::string(PARBENCH_BINARY) + " " + arguments + " 2>&1").c_str(), "r");
  while (fgets(buffer.data(), buffer.size(), pipe)) output += buffer.data();
  const int status = pclose(pipe);
  exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return output;
}

// Every counter a run writes, of every strategy, is in the table its context carries.
TEST(ContextFacts, EveryWrittenCounterIsInTheContextsTable) {
  TemporaryDirectory dir("parbench-facts-test");
  const auto out = dir.file("run.json");
  int exit_code = -1;
  const auto output = run_parbench(
      "--preset=cpu --models=tinycnn --batch=4 --image=16 --warmup=1 --repetitions=2 --iterations=1"
      " --strategies=single,model_parallel,pipeline,data_parallel,ddp --split-sizes=2 --schedules=gpipe,zb-h1"
      " --benchmark_out=" + out + " --benchmark_out_format=json",
      exit_code);
  ASSERT_EQ(exit_code, 0) << output;
  const auto json = nlohmann::json::parse(std::ifstream(out));
  const auto& context = json.at("context");
  const auto table = nlohmann::json::parse(context.at("counters").get<std::string>());
  EXPECT_EQ(table, nlohmann::json::parse(CounterTable::instance().json()));
  EXPECT_EQ(nlohmann::json::parse(context.at("schedule_facts").get<std::string>()),
            nlohmann::json::parse(schedule_facts_json()));
  // Google Benchmark's own keys of an entry; the rest are counters.
  const std::set<std::string> not_counters = {
      "name", "family_index", "per_family_instance_index", "run_name", "run_type", "repetitions", "repetition_index",
      "threads", "iterations", "real_time", "cpu_time", "time_unit", "label", "fields", "noise", "error_occurred",
      "error_message", "aggregate_name", "aggregate_unit"};
  std::set<std::string> seen;
  for (const auto& entry : json.at("benchmarks")) {
    if (entry.value("error_occurred", false)) continue;
    for (const auto& [key, value] : entry.items()) {
      if (not_counters.count(key) || !value.is_number()) continue;
      seen.insert(key);
      EXPECT_NE(CounterTable::instance().find(key), nullptr) << entry["name"] << ": counter " << key << " is not declared";
    }
  }
  for (const char* key : {"step_ms", "batch", "split_size", "host_forward_ms_stage0", "broadcast_ms", "world_size"}) {
    EXPECT_EQ(seen.count(key), 1u) << key << " was not written at all";
  }
}

}  // namespace
}  // namespace parbench
