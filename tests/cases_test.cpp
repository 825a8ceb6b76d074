// The case matrix: names, placements and skips decided before anything runs.
#include "benchmarks/cases/cases.h"
#include "core/text.h"
#include "strategies/ddp_options.h"
#include "strategies/staged_options.h"
#include "tests/option_parsing.h"

#include <gtest/gtest.h>

#include <map>
#include <set>

namespace parbench {
namespace {

std::map<std::string, const CaseSpec*> by_strategy(const std::vector<CaseSpec>& cases) {
  std::map<std::string, const CaseSpec*> first;
  for (const auto& spec : cases) first.emplace(spec.strategy->name(), &spec);
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

// Each strategy reads its options struct from what the case holds, under the fields its name
// writes; --cut reaches every case as the staged strategies' placement.
TEST(Cases, EachCaseReadsTheOptionsItsNameWrites) {
  auto options = parsed_options({"--strategies=model_parallel,pipeline,data_parallel,ddp", "--models=tinycnn",
                                 "--batch=8", "--schedules=gpipe,interleaved-1f1b", "--split-sizes=2,4",
                                 "--chunks=2", "--stage-lanes=1,2", "--bucket-mib=1.5,25", "--overlap=on,off",
                                 "--dp-replicate=broadcast,clone", "--cut=balanced"},
                                /*has_gpu=*/false);
  const auto cases = build_cases(options, /*visible_gpus=*/0);
  std::map<std::string, int> seen;
  for (const auto& spec : cases) {
    std::map<std::string, std::string> fields;
    for (const auto& field : spec.fields) fields[field.key] = field.text;
    const auto& strategy = spec.strategy->name();
    ++seen[strategy];
    EXPECT_EQ(staged_options(spec.config).cut, "balanced") << spec.name;
    const auto pipeline = pipeline_options(spec.config);
    if (strategy == "pipeline") {
      EXPECT_EQ(std::to_string(pipeline.split_size), fields.at("split")) << spec.name;
      EXPECT_EQ(pipeline.schedule, fields.at("schedule")) << spec.name;
      EXPECT_EQ(std::to_string(pipeline.lanes), fields.at("lanes")) << spec.name;
      if (pipeline.schedule == "interleaved-1f1b") EXPECT_EQ(std::to_string(pipeline.chunks), fields.at("chunks"));
    } else {
      EXPECT_EQ(pipeline.split_size, 0) << spec.name << ": not pipelined";
    }
    if (strategy == "ddp") {
      const auto ddp = ddp_options(spec.config);
      EXPECT_EQ(format_number(ddp.bucket_mib), fields.at("bucket_mib")) << spec.name;
      EXPECT_EQ(ddp.overlap ? "on" : "off", fields.at("overlap")) << spec.name;
    }
    // data_parallel's struct is its file's own: its skip rule (clone needs GPUs) reads it.
    if (strategy == "data_parallel") {
      EXPECT_EQ(spec.skip_reason.empty(), fields.at("replicate") == "broadcast") << spec.name << ": " << spec.skip_reason;
    }
  }
  EXPECT_EQ(seen, (std::map<std::string, int>{{"data_parallel", 2}, {"ddp", 4}, {"model_parallel", 1}, {"pipeline", 8}}));
}

// --checkpoint=blocks: named after the optimizer's place, its field round-trips, the default
// leaves names as they were, and zb-h1 (a split backward) is skipped saying why.
TEST(Cases, CheckpointedCasesAreNamedAndZeroBubbleSaysWhyItCannot) {
  auto options = parsed_options({"--strategies=single,pipeline", "--schedules=1f1b,zb-h1", "--split-sizes=20",
                                 "--optimizer=adamw", "--checkpoint=off,blocks"},
                                /*has_gpu=*/true);
  std::map<std::string, const CaseSpec*> named;
  const auto cases = build_cases(options, /*visible_gpus=*/2);
  for (const auto& spec : cases) named[spec.name] = &spec;
  const std::string single = "train/single/resnet50/batch:120/image:128/precision:fp32/data:device/optimizer:adamw";
  ASSERT_TRUE(named.count(single)) << "the default, off, is not named";
  ASSERT_TRUE(named.count(single + "/checkpoint:blocks"));
  EXPECT_EQ(named.at(single + "/checkpoint:blocks")->config.checkpoint, Checkpointing::kBlocks);
  EXPECT_EQ(named.at(single)->config.checkpoint, Checkpointing::kOff);
  const std::string pipeline = "train/pipeline/resnet50/batch:120/image:128/precision:fp32/data:device/optimizer:adamw/"
                               "checkpoint:blocks/gpus:2/split:20/schedule:";
  ASSERT_TRUE(named.count(pipeline + "1f1b") && named.count(pipeline + "zb-h1"));
  EXPECT_EQ(named.at(pipeline + "1f1b")->skip_reason, "");
  EXPECT_NE(named.at(pipeline + "zb-h1")->skip_reason.find("zb-h1 splits each backward"), std::string::npos)
      << named.at(pipeline + "zb-h1")->skip_reason;
  EXPECT_EQ(named.at(pipeline.substr(0, pipeline.find("checkpoint:")) + "gpus:2/split:20/schedule:zb-h1")->skip_reason, "");

  // A rank that gets the case as fields builds the same case.
  const auto& checkpointed = *named.at(pipeline + "1f1b");
  const auto rebuilt = case_from_fields(nlohmann::json::parse(fields_json(checkpointed.fields).dump()), options, /*visible_gpus=*/2);
  EXPECT_EQ(rebuilt.name, checkpointed.name);
  EXPECT_EQ(rebuilt.config.checkpoint, Checkpointing::kBlocks);

  EXPECT_THROW(parsed_options({"--checkpoint=layers"}, /*has_gpu=*/false), UsageError);
}

// The opt-in strategies (zero, tensor_parallel) run where --strategies names them, not by default.
TEST(Cases, OptInStrategiesRunOnlyWhereNamed) {
  std::set<std::string> by_default, named;
  for (const auto& spec : build_cases(parsed_options({}, /*has_gpu=*/true), /*visible_gpus=*/2)) {
    by_default.insert(spec.strategy->name());
  }
  EXPECT_EQ(by_default, (std::set<std::string>{"single", "model_parallel", "pipeline", "data_parallel", "ddp"}));
  for (const auto& spec : build_cases(parsed_options({"--strategies=zero,tensor_parallel", "--models=gpt2-medium"},
                                                     /*has_gpu=*/true),
                                      /*visible_gpus=*/2)) {
    named.insert(spec.strategy->name());
  }
  EXPECT_EQ(named, (std::set<std::string>{"zero", "tensor_parallel"}));
  for (const auto* info : StrategyRegistry::instance().all()) {
    EXPECT_EQ(info->is_opt_in(), info->name() == "zero" || info->name() == "tensor_parallel") << info->name();
  }
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

std::vector<std::string> names(const std::vector<CaseSpec>& cases) {
  std::vector<std::string> listed;
  for (const auto& spec : cases) listed.push_back(spec.name);
  return listed;
}

TEST(Cases, GpusTakesACountOrAnAscendingListOfDistinctCounts) {
  const auto one = parsed_options({"--gpus=2"}, /*has_gpu=*/false);
  EXPECT_EQ(one.gpus, 2);
  EXPECT_TRUE(one.gpu_counts.empty());
  const auto list = parsed_options({"--gpus=4,1,2"}, /*has_gpu=*/false);
  EXPECT_EQ(list.gpus, 0);
  EXPECT_EQ(list.gpu_counts, (std::vector<int>{1, 2, 4}));
  // A count given twice runs once, as a repeat in any list does.
  EXPECT_EQ(parsed_options({"--gpus=2,1,2,02"}, /*has_gpu=*/false).gpu_counts, (std::vector<int>{1, 2}));
  EXPECT_EQ(parsed_options({"--gpus=2,2"}, /*has_gpu=*/false).gpus, 2);
  for (const auto& [arguments, expected] : std::vector<std::pair<std::vector<std::string>, std::string>>{
           {{"--gpus=0,2"}, "--gpus=0 must be at least 1"},
           {{"--gpus=1,two"}, "--gpus=two is not a whole number"},
           {{"--gpus=1,5000"}, "--gpus=5000 must be at most 4096"},
           {{"--gpus=,"}, "--gpus=, has an empty item"},
           {{"--gpus="}, "--gpus needs at least one value"},
           {{"--gpus=1,2", "--devices=0,1"}, "--gpus=1,2 and --devices cannot be combined"},
           {{"--gpus=2,4", "--cut=stem,layer1,layer2|layer3,layer4,head"}, "--gpus=2,4 and --cut=stem,layer1"},
           {{"--gpus=2,4", "--print-schedule=gpipe"}, "--gpus=2,4 and --print-schedule cannot be combined"}}) {
    try {
      parsed_options(arguments, /*has_gpu=*/false);
      ADD_FAILURE() << arguments.front() << " accepted";
    } catch (const UsageError& error) {
      EXPECT_EQ(std::string(error.what()).find(expected), 0u) << error.what();
    }
  }
}

// --gpus=1,2,4: by strategy and set-up as before, then by count, then by the strategy's options;
// single once (the 1-GPU point), each strategy at each count of at least its min_devices.
TEST(Cases, AListOfCountsRunsEachMultiDeviceStrategyAtEachCount) {
  auto options = parsed_options({"--strategies=single,model_parallel,pipeline,ddp", "--gpus=1,2,4", "--split-sizes=20",
                                 "--schedules=gpipe", "--scaling=weak,strong", "--bucket-mib=25", "--overlap=on"},
                                /*has_gpu=*/true);
  const auto cases = build_cases(options, /*visible_gpus=*/2);
  const std::string setup = "/resnet50/batch:120/image:128/precision:fp32/data:device";
  const auto ddp = [&](int gpus, const std::string& scaling) {
    return "train/ddp" + setup + "/gpus:" + std::to_string(gpus) + "/bucket_mib:25/overlap:on/scaling:" + scaling;
  };
  EXPECT_EQ(names(cases), (std::vector<std::string>{
                              "train/single" + setup,
                              "train/model_parallel" + setup + "/gpus:2",
                              "train/model_parallel" + setup + "/gpus:4",
                              "train/pipeline" + setup + "/gpus:2/split:20/schedule:gpipe",
                              "train/pipeline" + setup + "/gpus:4/split:20/schedule:gpipe",
                              ddp(1, "weak"), ddp(1, "strong"), ddp(2, "weak"), ddp(2, "strong"), ddp(4, "weak"),
                              ddp(4, "strong")}));
  for (const auto& spec : cases) {
    const bool four = spec.gpus == 4;
    EXPECT_EQ(spec.skip_reason, four ? "needs 4 GPUs, 2 visible" : "") << spec.name;
    EXPECT_EQ(spec.wants_more_gpus, four) << spec.name;
    EXPECT_EQ(fields_json(spec.fields).value("gpus", 1), spec.gpus) << spec.name;
    // A rank builds its case from the fields alone (ddp's ranks; the world's size as the GPUs).
    EXPECT_EQ(case_from_fields(nlohmann::json::parse(fields_json(spec.fields).dump()), options, 2).name, spec.name);
  }
  EXPECT_EQ(cases[5].global_batch, 120);   // ddp weak at 1 rank
  EXPECT_EQ(cases[8].global_batch, 120);   // ddp strong at 2 ranks: 60 each
  EXPECT_EQ(cases[9].global_batch, 480);   // ddp weak at 4 ranks
  EXPECT_EQ(multi_device_count(options, 2), 4);  // the comm/allreduce sweep's ranks: the largest count
  // Without GPUs each count runs on as many CPU devices: nothing is skipped.
  for (const auto& spec : build_cases(options, /*visible_gpus=*/0)) EXPECT_EQ(spec.skip_reason, "") << spec.name;
}

TEST(Cases, OneCountInAListKeepsTodaysCases) {
  auto options = parsed_options({"--gpus=2"}, /*has_gpu=*/true);
  Options plain;
  plain.gpus = 2;
  EXPECT_EQ(names(build_cases(options, 2)), names(build_cases(plain, 2)));
}

TEST(Cases, AListOfCountsNeedsOneThatTheVisibleGpusCanRun) {
  Options options;
  options.gpu_counts = {4, 8};
  try {
    check_devices(options, /*visible_gpus=*/2);
    FAIL() << "--gpus=4,8 accepted on 2 GPUs";
  } catch (const UsageError& error) {
    EXPECT_EQ(std::string(error.what()),
              "--gpus=4,8 asks for more GPUs than the 2 visible at every count (a count above them is skipped; give "
              "at least one of 1 to 2)");
  }
  options.gpu_counts = {2, 8};
  EXPECT_NO_THROW(check_devices(options, 2));
  EXPECT_NO_THROW(check_devices(options, /*visible_gpus=*/0));  // CPU stand-ins
}

// A value given twice in any list runs once, at its first place: as written or as read (8 and
// 08, 25 and 25.0), in parbench's own lists and the strategies' alike. Swept twice, a ddp or
// zero option made two cases of one name, which failed and wrote JSON the gate refuses.
TEST(Cases, ARepeatedValueInAnyListRunsOnce) {
  const auto options =
      parsed_options({"--models=tinycnn,tinycnn", "--strategies=ddp,zero,ddp", "--batch=8,4,08", "--image=16,16",
                      "--precision=fp32,bf16,fp32", "--data=device,device", "--optimizer=sgd,sgd", "--checkpoint=off,off",
                      "--cuda-graph=off,off", "--bucket-mib=25,25.0,50,25", "--overlap=on,on", "--scaling=weak,weak",
                      "--zero-stages=1,1,2"},
                     /*has_gpu=*/false);
  EXPECT_EQ(options.models, std::vector<std::string>{"tinycnn"});
  EXPECT_EQ(options.strategies, (std::vector<std::string>{"ddp", "zero"}));
  EXPECT_EQ(options.batch_sizes, (std::vector<int64_t>{8, 4}));
  EXPECT_EQ(options.image_sizes, std::vector<int64_t>{16});
  EXPECT_EQ(options.precisions, (std::vector<Precision>{Precision::kFloat32, Precision::kBFloat16}));
  EXPECT_EQ(options.cuda_graphs, std::vector<bool>{false});
  EXPECT_EQ(options.strategy_options.at("bucket_mib"), (std::vector<std::string>{"25", "50"}));
  EXPECT_EQ(options.strategy_options.at("overlap"), std::vector<std::string>{"on"});
  EXPECT_EQ(options.strategy_options.at("stage"), (std::vector<std::string>{"1", "2"}));
  const auto cases = build_cases(options, /*visible_gpus=*/0);
  std::set<std::string> names;
  for (const auto& spec : cases) EXPECT_TRUE(names.insert(spec.name).second) << spec.name << " is built twice";
  EXPECT_FALSE(cases.empty());
  // --devices is a placement, not a sweep: a repeat puts two devices on one GPU.
  EXPECT_EQ(parsed_options({"--devices=0,0"}, /*has_gpu=*/true).devices, (std::vector<int>{0, 0}));
}

// An empty item is refused wherever a list is read, with the list as given; so is an empty list.
TEST(Cases, AnEmptyItemInAnyListIsRefused) {
  for (const auto& argument : {"--batch=4,,8", "--batch=4,", "--batch=,4", "--models=tinycnn,,resnet18",
                               "--strategies=single,", "--precision=fp32,,bf16", "--gpus=1,,2", "--devices=0,,1",
                               "--bucket-mib=25,,50", "--schedules=gpipe,,1f1b", "--split-sizes=2,,4"}) {
    const std::string given = argument;
    try {
      parsed_options({given}, /*has_gpu=*/true);
      ADD_FAILURE() << given << " accepted";
    } catch (const UsageError& error) {
      EXPECT_EQ(std::string(error.what()), given + " has an empty item (separate the values with single commas, e.g. " +
                                               given.substr(0, given.find('=')) + "=A,B)");
    }
  }
  for (const auto& argument : {"--batch=", "--models=", "--bucket-mib=", "--schedules="}) {
    try {
      parsed_options({argument}, /*has_gpu=*/true);
      ADD_FAILURE() << argument << " accepted";
    } catch (const UsageError& error) {
      EXPECT_NE(std::string(error.what()).find("needs at least one value"), std::string::npos) << error.what();
    }
  }
}

}  // namespace
}  // namespace parbench
