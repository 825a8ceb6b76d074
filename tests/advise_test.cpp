// --advise's profile and predictions (benchmarks/advise/advise.h) on two devices: CPU stand-ins, or
// both stages on GPU 0 where there is a GPU (case_devices places cases on GPUs whenever one is
// visible). Every pipeline schedule predicted, zb-h1 from its backwards' halves and
// interleaved-1f1b from its chunked cut. (graph_test.cpp profiles the same pieces graphed.)
#include "benchmarks/advise/advise.h"
#include "benchmarks/config/options.h"
#include "core/device_timer.h"
#include "models/model_zoo.h"
#include "strategies/staged_options.h"
#include "tests/advise_output.h"
#include "tests/case_options.h"
#include "tests/option_parsing.h"

#include <gtest/gtest.h>

#include <algorithm>

namespace parbench {
namespace {

Options parse(const std::vector<std::string>& arguments) { return parsed_options(arguments, /*has_gpu=*/false); }


// tinycnn's four stages, batch 4 in micro-batches of 2, every schedule on two devices.
std::vector<CaseSpec> every_schedule(const std::string& lanes = "1") {
  std::string schedules;
  for (const auto& info : schedule_table()) schedules += (schedules.empty() ? "" : ",") + info.name;
  std::vector<std::string> arguments = {"--preset=cpu", "--models=tinycnn", "--batch=4", "--image=16",
                                        "--strategies=single,pipeline", "--split-sizes=2", "--schedules=" + schedules,
                                        "--chunks=2", "--stage-lanes=" + lanes, "--advise=all"};
  if (visible_gpu_count() > 0) arguments.push_back("--devices=0,0");
  return build_cases(parse(arguments), visible_gpu_count());
}

const CaseSpec& case_of(const std::vector<CaseSpec>& cases, const std::string& schedule) {
  const auto found = std::find_if(cases.begin(), cases.end(), [&](const CaseSpec& spec) {
    return spec.strategy->name() == "pipeline" && pipeline_options(spec.config).schedule == schedule;
  });
  if (found == cases.end()) throw std::logic_error("no " + schedule + " case");
  return *found;
}

// zb-h1's B and W as the executor runs them.
// --advise=N|all|off: how many of the best predicted cases run; off (the default) none.
TEST(Advise, TakesACountAllOrOff) {
  EXPECT_EQ(parsed_options({}, /*has_gpu=*/false).advise_validate, 0);
  EXPECT_EQ(parsed_options({"--advise=off"}, false).advise_validate, 0);
  EXPECT_EQ(parsed_options({"--advise=3"}, false).advise_validate, 3);
  EXPECT_EQ(parsed_options({"--advise=all"}, false).advise_validate, kValidateAll);
}

TEST(AdviseProfile, SplitsBackwardsAsTheExecutor) {
  auto spec = case_of(every_schedule(), "zb-h1");
  spec.config.image_size = 64;  // big enough that a backward stands out of a loaded CPU's noise
  spec.config.batch_size = 8;
  set_cut(spec.config, "stem,block1|block2,head");  // a convolution on each part, whatever the timings
  ProfileRequest request;
  request.parts = true;
  request.backward_halves = true;
  request.cuts[CutKey{4, 8}] = {2};  // a cut of four parts, which the two-part --cut does not make
  request.sizes = {2, 3};
  const auto profile = profile_setup(spec, case_devices(spec), /*graphed=*/false, request);
  // The cases' sizes, the batch and its shards over the two devices.
  EXPECT_EQ(profile.sizes, (std::vector<int64_t>{2, 3, 4, 8}));
  EXPECT_EQ(profile.parts.cut, staged_options(spec.config).cut);
  EXPECT_TRUE(profile.cuts.empty());
  ASSERT_EQ(profile.parts.input_gradient_ms.size(), 2u);
  ASSERT_EQ(profile.parts.weight_gradient_ms.size(), 2u);
  for (size_t part = 0; part < 2; ++part) {
    const auto& weights = profile.parts.weight_gradient_ms[part];
    ASSERT_EQ(profile.parts.input_gradient_ms[part].size(), profile.sizes.size());
    ASSERT_EQ(weights.size(), profile.sizes.size());
    // Each W is a difference of two timings: on a loaded CPU the smaller ones may round to 0.
    EXPECT_GT(*std::max_element(weights.begin(), weights.end()), 0.0) << "part " << part;
  }
  // The first part has no input gradient to send: its B computes nothing and W is its backward.
  EXPECT_EQ(profile.parts.input_gradient_ms[0], std::vector<double>(profile.sizes.size(), 0.0));
}

// interleaved-1f1b's parts, cut as the executor cuts them and placed round-robin, for each chunk
// count the model can be cut into, at the sizes asked for.
TEST(AdviseProfile, ProfilesChunkedCuts) {
  const auto spec = case_of(every_schedule(), "interleaved-1f1b");
  ProfileRequest request;
  // tinycnn has four stages: no cut of three chunks on two devices
  request.cuts[CutKey{4, spec.config.batch_size}] = {2};
  request.cuts[CutKey{6, spec.config.batch_size}] = {2};
  const auto profile = profile_setup(spec, case_devices(spec), /*graphed=*/false, request);
  EXPECT_TRUE(profile.parts.cut.empty());  // not asked for
  ASSERT_EQ(profile.cuts.count(CutKey{4, spec.config.batch_size}), 1u);
  EXPECT_EQ(profile.cuts.count(CutKey{6, spec.config.batch_size}), 0u);
  const auto& chunked = profile.cuts.at(CutKey{4, spec.config.batch_size});
  EXPECT_EQ(chunked.cut, "stem|block1|block2|head");
  ASSERT_EQ(chunked.forward_ms.size(), 4u);
  ASSERT_EQ(chunked.copy_ms.size(), 3u);
  ASSERT_EQ(chunked.update_ms.size(), 4u);
  EXPECT_TRUE(chunked.input_gradient_ms.empty());  // interleaved-1f1b runs whole backwards
  EXPECT_EQ(chunked.sizes, (std::vector<int64_t>{2}));
  for (const auto& part : chunked.forward_ms) EXPECT_EQ(part.size(), 1u);
}

// Each staged case is predicted from the cut it runs: its key (parts, the batch its balanced cut
// is timed at) asked for with its micro-batch sizes, that cut chosen as the case's own set-up
// chooses it, and profiled at exactly those sizes.
TEST(AdviseProfile, PredictsEachStagedCaseFromTheCutItRuns) {
  const auto cases = every_schedule();
  auto spec = case_of(cases, "interleaved-1f1b");
  set_cut(spec.config, "balanced");
  ProfileRequest request;
  const auto& predictor = spec.strategy->predictor();
  predictor.request(CaseConditions{spec.config, spec.global_batch, spec.gpus}, request);
  ASSERT_EQ(request.cuts.size(), 1u);
  const auto key = request.cuts.begin()->first;
  EXPECT_EQ(key.parts, 4u);  // 2 devices x 2 chunks
  EXPECT_EQ(key.measure_batch, 2);  // the micro-batch
  EXPECT_EQ(request.cuts.begin()->second, (std::set<int64_t>{2}));
  const auto devices = case_devices(spec);
  const auto profile = profile_setup(spec, devices, /*graphed=*/false, request);
  ASSERT_EQ(profile.cuts.count(key), 1u);
  EXPECT_EQ(profile.cuts.at(key).sizes, (std::vector<int64_t>{2}));
  ASSERT_EQ(profile.cuts.at(key).forward_ms.size(), 4u);
  // The strategy, set up for the case, runs the cut the prediction was made from.
  auto strategy = spec.strategy->create();
  const auto config = spec.config;
  strategy->setup([&config](torch::Device) { return make_model(config.model, config.num_classes); }, devices, config);
  const auto prediction = predictor.predict(profile, CaseConditions{spec.config, spec.global_batch, spec.gpus});
  EXPECT_EQ(prediction.profile, strategy->describe().at("cut"));
  EXPECT_EQ(prediction.profile, profile.cuts.at(key).cut);
}

// Every schedule's case on one lane is predicted, with every action of its programs placed:
// zb-h1's B and W apart (the first stage's B taking no time), interleaved-1f1b's four stages.
// (A backward's time is a difference of two timings, which may round to 0 on a loaded CPU.)
// Two lanes are not modelled.
TEST(Advise, PredictsEveryScheduleOnOneLane) {
  const auto cases = every_schedule();
  for (const auto& info : schedule_table()) {
    const auto& spec = case_of(cases, info.name);
    const auto step = simulate_case(spec);
    ASSERT_TRUE(step.has_value()) << info.name;
    EXPECT_GT(step->step_ms, 0.0) << info.name;
    const size_t stages = info.uses_chunks ? 4 : 2, micro_batches = 2;
    const size_t passes = info.name == "zb-h1" ? 3 : 2;  // F and B, or F, B and W
    EXPECT_EQ(step->actions.size(), stages * micro_batches * passes) << info.name;
    EXPECT_EQ(step->bubble_fraction.size(), 2u) << info.name;
    for (const auto& placed : step->actions) {
      EXPECT_EQ(placed.device, placed.action.stage % 2) << info.name;
      if (placed.action.op == StageOp::kForward) {
        EXPECT_GT(placed.end_ms, placed.start_ms) << info.name;
      } else if (placed.action.op == StageOp::kBackwardInput && placed.action.stage == 0) {
        EXPECT_EQ(placed.end_ms, placed.start_ms) << info.name;
      } else {
        EXPECT_GE(placed.end_ms, placed.start_ms) << info.name;
      }
    }
  }
  const auto two_lanes = every_schedule("2");
  EXPECT_FALSE(simulate_case(case_of(two_lanes, "1f1b")).has_value());
}

// advise() ranks every schedule's case beside single's, each with its prediction.
TEST(Advise, RanksEveryScheduleBesideSingle) {
  const auto cases = every_schedule();
  const auto options = parse({"--advise=all"});
  testing::internal::CaptureStdout();
  const auto to_run = advise(cases, options);
  const auto table = testing::internal::GetCapturedStdout();
  ASSERT_EQ(to_run.size(), cases.size()) << table;
  for (const auto& spec : to_run) {
    ASSERT_TRUE(spec.predicted_step_ms.has_value()) << spec.name;
    EXPECT_GT(*spec.predicted_step_ms, 0.0) << spec.name;
  }
  // The heading lists every cut profiled: interleaved-1f1b's four parts beside the others' two.
  EXPECT_NE(table.find("; stem|block1|block2|head;"), std::string::npos) << table;
}

// A case whose schedule cannot be built where advise models it (make_schedule refuses it; here a
// name the table lacks) is reported and runs unpredicted; it does not end the run, and its
// set-up's other cases are still predicted.
TEST(Advise, ReportsAScheduleItCannotBuildAndPredictsTheRest) {
  auto cases = every_schedule();
  const auto broken_name = case_of(cases, "1f1b").name;
  for (auto& spec : cases) {
    if (spec.name == broken_name) set_option(spec.config, "schedule", "no-such-schedule");
  }
  const auto [to_run, table, errors] = advise_capturing(cases, parse({"--advise=all"}));
  EXPECT_NE(errors.find(broken_name + ": cannot be predicted (unknown pipeline schedule 'no-such-schedule'"), std::string::npos)
      << errors;
  ASSERT_EQ(to_run.size(), cases.size()) << table << errors;
  for (const auto& spec : to_run) {
    EXPECT_EQ(spec.predicted_step_ms.has_value(), spec.name != broken_name) << spec.name;
  }
  EXPECT_EQ(table.find(broken_name), std::string::npos) << table;  // not ranked
  EXPECT_NE(table.find(case_of(cases, "gpipe").name), std::string::npos) << table;
}

// Each strategy's predictor, declared in its own file, from a profile made by hand: the models of
// docs/METRICS.md ("Predicted step time"), as advise.cpp computed them before they moved there.
TEST(Predictors, EachStrategysModelFromAProfile) {
  AdviseProfile profile;
  profile.single_step_ms = 10;
  profile.sizes = {1, 2, 4};
  profile.parts.cut = "stem,block1|block2,head";
  profile.parts.forward_ms = {{1, 2, 4}, {2, 3, 5}};
  profile.parts.backward_ms = {{2, 4, 8}, {3, 5, 9}};
  profile.parts.copy_ms = {{0.5, 0.5, 0.5}};
  profile.parts.update_ms = {0.25, 0.75};
  profile.set_up_counters = {{"broadcast_ms", 1.5}, {"reduce_ms", 2.5}};
  profile.ranks[{25.0, 2}] = RankProfile{/*rank_step_ms=*/6, /*backward_ms=*/4, /*bucket_ready_ms=*/{1, 4},
                                         /*bucket_allreduce_ms=*/{2, 1}};
  RunConfig config;
  config.batch_size = 4;
  const auto predict = [&](const std::string& strategy, const RunConfig& case_config, int devices) {
    const auto& predictor = StrategyRegistry::instance().get(strategy).predictor();
    return predictor.predict(profile, CaseConditions{case_config, case_config.batch_size, devices});
  };
  EXPECT_EQ(predict("single", config, 1).step_ms, 10.0);
  EXPECT_EQ(predict("single", config, 1).profile, profile.parts.cut);
  // Shards of 2: forwards 2 + 3, backwards 4 + 5, the updates 1, the broadcast and the reduction.
  EXPECT_DOUBLE_EQ(predict("data_parallel", config, 2).step_ms, 1.5 + 5 + 9 + 2.5 + 1);
  // The buckets' all-reduces end 1 ms after backward overlapped, 3 ms after it not.
  auto rank = config;
  rank.batch_size = 2;
  set_option(rank, "bucket_mib", "25");
  EXPECT_DOUBLE_EQ(predict("ddp", rank, 2).step_ms, 6 + 1);
  set_option(rank, "overlap", "off");
  EXPECT_DOUBLE_EQ(predict("ddp", rank, 2).step_ms, 6 + 3);
  // Stages: the simulator over the cut, one micro-batch of 4 for model_parallel, 2 of 2 for gpipe.
  EXPECT_DOUBLE_EQ(predict("model_parallel", config, 2).step_ms,
                   simulate_cut(profile.parts, profile.sizes, 4, 4, "gpipe", 1).step_ms);
  auto pipeline = config;
  set_option(pipeline, "split", 2);
  set_option(pipeline, "schedule", "gpipe");
  EXPECT_DOUBLE_EQ(predict("pipeline", pipeline, 2).step_ms,
                   simulate_cut(profile.parts, profile.sizes, 4, 2, "gpipe", 1).step_ms);
  EXPECT_LT(predict("pipeline", pipeline, 2).step_ms, predict("model_parallel", config, 2).step_ms);
  EXPECT_EQ(predict("pipeline", pipeline, 2).profile, profile.parts.cut);
  // A chunked case whose cut was not profiled cannot be predicted from this profile.
  set_option(pipeline, "schedule", "interleaved-1f1b");
  set_option(pipeline, "chunks", 2);
  EXPECT_THROW(predict("pipeline", pipeline, 2), std::invalid_argument);
}

// A scaling run (--gpus=2,3): each count profiled on its own devices and ranked apart, single in
// both rankings but run once.
TEST(Advise, ProfilesAndRanksEachCountOfAScalingRunApart) {
  const auto options = parse({"--preset=cpu", "--models=tinycnn", "--batch=4", "--image=16",
                              "--strategies=single,model_parallel,pipeline", "--split-sizes=2", "--schedules=gpipe",
                              "--gpus=2,3", "--advise=all"});
  const auto cases = build_cases(options, visible_gpu_count());
  testing::internal::CaptureStdout();
  const auto to_run = advise(cases, options);
  const auto table = testing::internal::GetCapturedStdout();
  const std::string setup = "parbench advise: tinycnn/batch:4/image:16/precision:fp32/data:device";
  // One part per device: the cut for 2 devices has one '|', the cut for 3 two.
  for (const int count : {2, 3}) {
    const auto heading = setup + "/gpus:" + std::to_string(count) + " (cut ";
    const auto at = table.find(heading);
    ASSERT_NE(at, std::string::npos) << table;
    const auto cut = table.substr(at + heading.size(), table.find(';', at) - at - heading.size());
    EXPECT_EQ(std::count(cut.begin(), cut.end(), '|'), count - 1) << cut;
  }
  const std::string single = "train/single/tinycnn/batch:4/image:16/precision:fp32/data:device";
  size_t rankings = 0;
  for (auto at = table.find(single); at != std::string::npos; at = table.find(single, at + 1)) ++rankings;
  EXPECT_EQ(rankings, 2u) << table;
  EXPECT_EQ(std::count_if(to_run.begin(), to_run.end(), [&](const CaseSpec& spec) { return spec.name == single; }), 1);
  for (const auto& spec : to_run) EXPECT_TRUE(spec.predicted_step_ms.has_value()) << spec.name;
  if (visible_gpu_count() == 0) EXPECT_EQ(to_run.size(), cases.size()) << table;
}

}  // namespace
}  // namespace parbench
