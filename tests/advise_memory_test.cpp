// --advise's memory prediction (docs/METRICS.md, "Predicted peak memory"): the in-flight rule read
// from the schedules' programs, the activation profile measured on the CPU through the counting
// allocator, each strategy's model states by formula against what its model_states() holds after a
// step (in this process for the one-process strategies, on CPU ranks for the distributed ones), and
// advise's flag and ranking of a case predicted not to fit.
#include "benchmarks/advise/advise.h"
#include "benchmarks/advise/advise_memory.h"
#include "benchmarks/config/options.h"
#include "benchmarks/launch/launcher.h"
#include "benchmarks/measure/memory.h"
#include "core/device_timer.h"
#include "strategies/prediction.h"
#include "strategies/training.h"
#include "tests/advise_output.h"
#include "tests/launched_case.h"
#include "tests/option_parsing.h"

#include <cstdlib>

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>

namespace parbench {
namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
constexpr double kModelStateTolerance = 0.02;  // relative

// ---- the in-flight rule, from the programs ------------------------------------------------------

// Four stages, eight micro-batches: gpipe holds all of them on every device, 1f1b S - d on device d,
// zb-h1 S everywhere (its W frees what B kept), the tutorial all of them (one loss over every
// micro-batch), and interleaved-1f1b with two chunks its warm-up forwards plus one, per chunk.
TEST(AdviseMemory, InFlightMicroBatchesFollowEachSchedulesProgram) {
  constexpr size_t kStages = 4, kMicroBatches = 8, kChunks = 2;
  const auto in_flight = [&](const std::string& schedule, size_t chunks = 1) {
    return in_flight_micro_batches(make_schedule(schedule, kStages, kMicroBatches, chunks));
  };
  const auto all = std::vector<int64_t>(kStages, kMicroBatches);
  EXPECT_EQ(in_flight("gpipe"), all);
  EXPECT_EQ(in_flight("tutorial"), all);
  EXPECT_EQ(in_flight("1f1b"), (std::vector<int64_t>{4, 3, 2, 1}));
  EXPECT_EQ(in_flight("zb-h1"), std::vector<int64_t>(kStages, kStages));
  std::vector<int64_t> interleaved;
  for (int64_t d = 0; d < static_cast<int64_t>(kStages); ++d) {
    const int64_t warmup = (kStages - 1 - d) * 2 + (kChunks - 1) * kStages;
    interleaved.push_back(std::min<int64_t>(warmup + 1, kMicroBatches * kChunks));
  }
  EXPECT_EQ(in_flight("interleaved-1f1b", kChunks), interleaved);
  // Fewer micro-batches than stages: 1f1b min(M, S - d).
  EXPECT_EQ(in_flight_micro_batches(make_schedule("1f1b", kStages, 2)), (std::vector<int64_t>{2, 2, 2, 1}));
}

// Bytes, not counts: each (stage, micro-batch) weighs what its forward keeps, and a backward adds
// its transient on top of what is held at that moment.
TEST(AdviseMemory, PeakAddsTheBackwardsTransientToWhatIsHeld) {
  const auto programs = make_schedule("gpipe", /*devices=*/2, /*micro_batches=*/3);
  const auto kept = [](size_t stage, int64_t micro_batch) { return 10.0 * static_cast<double>(stage + 1) + static_cast<double>(micro_batch); };
  const auto transient = [](size_t stage, int64_t) { return stage == 0 ? 100.0 : 1.0; };
  const auto peaks = peak_activation_bytes(programs, kept, transient);
  // Device 0 holds 10 + 11 + 12 when its first backward (micro-batch 2) adds 100.
  EXPECT_DOUBLE_EQ(peaks[0], 33 + 100);
  // Device 1 holds 20 + 21 + 22, its backwards add 1.
  EXPECT_DOUBLE_EQ(peaks[1], 63 + 1);
}

// ---- the activation profile ---------------------------------------------------------------------

RunConfig tiny_config(const std::string& model, Checkpointing checkpoint = Checkpointing::kOff) {
  RunConfig config;
  config.model = model;
  config.image_size = 16;
  config.seq_len = 16;
  config.num_classes = 10;
  config.checkpoint = checkpoint;
  fit_config_to_model(config);
  if (checkpoint == Checkpointing::kBlocks && is_language_model(model)) config.loss = LossKind::kTokenCrossEntropyChunked;
  return config;
}

// The counter sees what the CPU allocator hands out and takes back while it is installed.
TEST(AdviseMemory, CountsCpuAllocations) {
  AllocationCounter counter(torch::kCPU);
  const double before = counter.current();
  auto tensor = torch::empty({1024}, torch::kFloat);
  EXPECT_DOUBLE_EQ(counter.current() - before, 4096);
  counter.reset_peak();
  { auto transient = torch::empty({2048}, torch::kFloat); }
  EXPECT_DOUBLE_EQ(counter.current() - before, 4096);
  EXPECT_DOUBLE_EQ(counter.peak() - before, 4096 + 8192);
}

// Checkpointed blocks keep only their input: tinygpt's blocks keep less, and their backwards
// (which run the forward again) allocate more, than uncheckpointed; both grow with the batch.
TEST(AdviseMemory, CheckpointedBlocksKeepLessThanUncheckpointed) {
  const auto memory = profile_memory({tiny_config("tinygpt"), tiny_config("tinygpt", Checkpointing::kBlocks)}, torch::kCPU);
  const auto& off = memory.stages_for(Checkpointing::kOff);
  const auto& on = memory.stages_for(Checkpointing::kBlocks);
  ASSERT_EQ(off.size(), memory.stage_names.size());
  ASSERT_EQ(on.size(), off.size());
  const auto model = make_model("tinygpt", 10);
  const auto stages = model->stages();
  double kept_off = 0, kept_on = 0;
  for (size_t s = 0; s < stages.size(); ++s) {
    EXPECT_GT(off[s].kept.at(8), off[s].kept.at(4)) << stages[s].name;
    if (!stages[s].block) continue;
    kept_off += off[s].kept.at(8);
    kept_on += on[s].kept.at(8);
    EXPECT_GT(on[s].backward.at(8), off[s].backward.at(8)) << stages[s].name;
  }
  EXPECT_GT(kept_on, 0);
  EXPECT_LT(kept_on, 0.5 * kept_off);
  EXPECT_GT(memory.inputs.at(4), 0);
  EXPECT_EQ(memory.device_bytes, 0);  // CPU stand-ins: no capacity
  EXPECT_THROW(profile_memory({tiny_config("tinygpt")}, torch::kCPU).stages_for(Checkpointing::kBlocks),
               std::invalid_argument);
}

// Exact where measured, linear between two sizes, along the nearest two beyond them, never below 0.
TEST(AdviseMemory, SampledBytesAreExactWhereMeasuredAndLinearAroundThem) {
  SampledBytes bytes{{2, 4, 20}, {100, 140, 300}};
  EXPECT_DOUBLE_EQ(bytes.at(4), 140);
  EXPECT_DOUBLE_EQ(bytes.at(20), 300);
  EXPECT_DOUBLE_EQ(bytes.at(3), 120);
  EXPECT_DOUBLE_EQ(bytes.at(12), 220);   // 140 + 8 * 10
  EXPECT_DOUBLE_EQ(bytes.at(36), 460);   // beyond 20 along (4, 20): 10 a sample
  EXPECT_DOUBLE_EQ(bytes.at(1), 80);     // below 2 along (2, 4): 20 a sample
  EXPECT_DOUBLE_EQ((SampledBytes{{2, 4}, {100, 20}}.at(8)), 0);
  EXPECT_DOUBLE_EQ((SampledBytes{{6}, {50}}.at(100)), 50);
  EXPECT_DOUBLE_EQ(SampledBytes{}.at(3), 0);
}

// The profile measures every stage at the sizes its cases run, beside 2 and 4, and the last
// stage again without its loss, and the loss alone: its output's bytes are the logits'.
TEST(AdviseMemory, MeasuresEachStageAtTheCasesOwnSizesAndTheLossApart) {
  const auto config = tiny_config("tinygpt");
  const auto memory = profile_memory({config}, torch::kCPU, {6, 3, 0});
  const std::vector<int64_t> expected = {2, 3, 4, 6};
  for (const auto& stage : memory.stages_for(Checkpointing::kOff)) {
    EXPECT_EQ(stage.kept.sizes, expected);
    EXPECT_EQ(stage.backward.values.size(), expected.size());
  }
  const auto& apart = memory.loss_apart_for(Checkpointing::kOff);
  EXPECT_EQ(apart.last_stage.kept.sizes, expected);
  EXPECT_EQ(apart.loss.kept.sizes, expected);
  // tinygpt's logits: fp32 on the CPU, a sample's seq_len x vocabulary.
  const double logits = 6.0 * static_cast<double>(config.seq_len) * static_cast<double>(config.num_classes) * 4;
  EXPECT_DOUBLE_EQ(apart.last_stage.output.at(6), logits);
  EXPECT_GE(apart.last_stage.kept.at(6), logits) << "the output is kept for the backward";
  EXPECT_GT(apart.loss.backward.at(6), logits) << "the outputs' gradient is the loss's backward's";
  EXPECT_THROW(memory.loss_apart_for(Checkpointing::kBlocks), std::invalid_argument);
}

// data_parallel takes its loss on device 0 over every replica's output: what the loss holds
// counts on device 0 alone, and a replica's own device holds its output and its gradient.
TEST(AdviseMemory, DataParallelsLossIsDeviceZerosAlone) {
  auto config = tiny_config("tinygpt");
  config.batch_size = 8;
  AdviseProfile profile;
  profile.memory = profile_memory({config}, torch::kCPU, {4, 8});
  const auto& predictor = StrategyRegistry::instance().get("data_parallel").predictor();
  const auto before = predictor.memory(profile, CaseConditions{config, 8, 2});
  ASSERT_EQ(before.devices.size(), 2u);
  const double more = 1e9;  // far above the rest: the loss's phase is device 0's peak
  for (auto& value : profile.memory.loss_apart[Checkpointing::kOff].loss.kept.values) value += more;
  const auto after = predictor.memory(profile, CaseConditions{config, 8, 2});
  EXPECT_DOUBLE_EQ(after.devices[1].peak(), before.devices[1].peak());
  // Device 0's peak is then the loss's: replica 0's forwards at its shard of 4, the other
  // replica's output gathered, and the loss over all 8 with its backward.
  const auto& apart = profile.memory.loss_apart_for(Checkpointing::kOff);
  auto stages = profile.memory.stages_for(Checkpointing::kOff);
  stages.back() = apart.last_stage;
  double forwards_kept = 0;
  for (const auto& stage : stages) forwards_kept += stage.kept.at(4);
  EXPECT_DOUBLE_EQ(after.devices[0].activations, forwards_kept + apart.last_stage.output.at(8) -
                                                     apart.last_stage.output.at(4) + apart.loss.kept.at(8) +
                                                     apart.loss.backward.at(8));
  EXPECT_GT(after.devices[0].peak(), before.devices[0].peak() + 0.99 * more);
  // Replica 1 holds the model at its shard of 4 with its output, without the loss.
  const auto replica = whole_model_memory(profile.memory, stages, config, 4, /*holds_batch=*/false, true);
  EXPECT_DOUBLE_EQ(after.devices[1].activations, replica.activations);
  EXPECT_LT(after.devices[1].activations, whole_model_memory(profile.memory, config, 4, false).activations)
      << "the loss is not the replica's";
}

// ---- model states: one-process strategies, set up in this process --------------------------------

std::vector<CaseSpec> cases_of(const std::vector<std::string>& arguments) {
  auto specs = build_cases(parsed_options(arguments, /*has_gpu=*/false), /*visible_gpus=*/0);
  specs.erase(std::remove_if(specs.begin(), specs.end(), [](const CaseSpec& spec) { return !spec.skip_reason.empty(); }),
              specs.end());
  return specs;
}

void expect_states_match(const DeviceMemory& predicted, const ModelStateBytes& measured, const std::string& what) {
  const auto near = [&](double prediction, double value, const char* part) {
    if (value == 0) {
      EXPECT_EQ(prediction, 0) << what << " " << part;
    } else {
      EXPECT_NEAR(prediction / value, 1.0, kModelStateTolerance) << what << " " << part << ": predicted " << prediction
                                                                 << " B, measured " << value << " B";
    }
  };
  near(predicted.parameters, measured.parameters, "parameters");
  near(predicted.gradients, measured.gradients, "gradients");
  near(predicted.optimizer_state, measured.optimizer_state, "optimizer state");
}

// A staged case's last stage holds its output from its forward to its backward, and takes its
// loss only at its backward: the output's bytes count once per micro-batch in flight on the last
// device (gpipe: all 4; 1f1b: one), the loss's once.
TEST(AdviseMemory, StagedLastStageHoldsItsOutputPerMicroBatchAndItsLossOnce) {
  const auto specs = cases_of({"--preset=cpu", "--models=tinygpt", "--batch=8", "--seq=16", "--strategies=pipeline",
                               "--split-sizes=2", "--schedules=gpipe,1f1b"});
  ASSERT_EQ(specs.size(), 2u);
  AdviseProfile profile;
  profile.memory = profile_memory({specs.front().config}, torch::kCPU, {2, 8});
  const auto last_device = [&](const CaseSpec& spec) {
    const auto predicted =
        spec.strategy->predictor().memory(profile, CaseConditions{spec.config, spec.global_batch, spec.gpus});
    return predicted.devices.back().peak();
  };
  const double more = 1e9;  // far above the rest: the last device's peak is at a backward of the last stage
  for (const auto& spec : specs) {
    const bool gpipe = spec.name.find("gpipe") != std::string::npos;
    auto& apart = profile.memory.loss_apart[Checkpointing::kOff];
    const double before = last_device(spec);
    for (auto& value : apart.loss.kept.values) value += more;
    const double with_more_loss = last_device(spec);
    for (auto& value : apart.loss.kept.values) value -= more;
    EXPECT_NEAR(with_more_loss - before, more, 1e-3 * more) << spec.name << ": the loss is taken once, at a backward";
    for (auto& value : apart.last_stage.kept.values) value += more;
    const double with_more_output = last_device(spec);
    for (auto& value : apart.last_stage.kept.values) value -= more;
    EXPECT_NEAR(with_more_output - before, (gpipe ? 4 : 1) * more, 1e-3 * more)
        << spec.name << ": what the last stage keeps, once per micro-batch in flight";
  }
}

// Every one-process strategy and schedule on two CPU stand-ins, tinycnn and tinygpt, SGD and AdamW,
// checkpointing off and on: after one step, each device's parameters, gradients and optimizer state
// as model_states() holds them against the formula, from the cut the case made (as the time
// profile reports it). And the predicted peak is the whole model's on one device for single.
TEST(AdviseMemory, ModelStatesByFormulaMatchEachOneProcessStrategy) {
  for (const std::string model : {"tinycnn", "tinygpt"}) {
    for (const std::string optimizer : {"sgd", "adamw"}) {
      for (const std::string checkpoint : {"off", "blocks"}) {
        const auto specs = cases_of({"--preset=cpu", "--models=" + model, "--batch=4", "--image=16", "--seq=16",
                                     "--strategies=single,model_parallel,pipeline,data_parallel", "--split-sizes=2",
                                     "--schedules=gpipe,1f1b,interleaved-1f1b,zb-h1", "--chunks=2",
                                     "--optimizer=" + optimizer, "--checkpoint=" + checkpoint});
        ASSERT_GE(specs.size(), checkpoint == "off" ? 7u : 6u) << model;  // zb-h1 refuses checkpointing
        AdviseProfile profile;
        profile.memory = profile_memory({specs.front().config}, torch::kCPU);
        for (const auto& spec : specs) {
          auto strategy = spec.strategy->create();
          const auto config = spec.config;
          strategy->setup([&config](torch::Device) { return make_case_model(config); }, case_devices(spec), config);
          const auto batch = make_random_batch(config, config.batch_size, strategy->input_device(), strategy->target_device());
          strategy->train_step(batch);
          const auto facts = strategy->describe();
          const CaseConditions conditions{config, spec.global_batch, spec.gpus};
          if (const auto cut = facts.find("cut"); cut != facts.end()) {
            // The cut the case runs, where its predictor asks for it (ProfileRequest::cuts).
            ProfileRequest request;
            if (spec.strategy->predictor().request) spec.strategy->predictor().request(conditions, request);
            profile.parts.cut = cut->second;
            for (const auto& asked : request.cuts) profile.cuts[asked.first].cut = cut->second;
          }
          const auto predicted = spec.strategy->predictor().memory(profile, conditions);
          const auto measured = model_state_bytes(*strategy);
          ASSERT_EQ(predicted.devices.size(), measured.size()) << spec.name;
          for (size_t d = 0; d < measured.size(); ++d) {
            expect_states_match(predicted.devices[d], measured[d], spec.name + " device " + std::to_string(d));
            EXPECT_GT(predicted.devices[d].activations, 0) << spec.name << " device " << d;
          }
          EXPECT_GT(predicted.devices.front().batch, 0) << spec.name;
        }
      }
    }
  }
}

// The whole prediction against the counting allocator: single's peak over a step on the CPU, from
// before its set-up. tinygpt's is within 2% (it was within 0.1% when written); tinycnn's within
// 15%: its second convolution's backward measured alone allocates more than within the whole
// backward on the CPU's kernels (its prediction is 9% high). The GPU's target, 5%, is for GPU runs.
TEST(AdviseMemory, SinglesPredictedPeakIsWhatTheCpuAllocatorSees) {
  for (const auto& [model, tolerance] : std::vector<std::pair<std::string, double>>{{"tinycnn", 0.15}, {"tinygpt", 0.02}}) {
    const auto specs = cases_of({"--preset=cpu", "--models=" + model, "--batch=8", "--image=32", "--seq=32",
                                 "--strategies=single", "--optimizer=adamw"});
    ASSERT_EQ(specs.size(), 1u);
    const auto& spec = specs.front();
    AdviseProfile profile;
    profile.memory = profile_memory({spec.config}, torch::kCPU, {spec.config.batch_size});
    const auto predicted = spec.strategy->predictor().memory(profile, CaseConditions{spec.config, spec.global_batch, 1});
    double measured = 0;
    {
      const auto config = spec.config;
      auto strategy = spec.strategy->create();
      AllocationCounter counter(torch::kCPU);
      const double before = counter.current();
      strategy->setup([&config](torch::Device) { return make_case_model(config); }, {torch::kCPU}, config);
      const auto batch = make_random_batch(config, config.batch_size, torch::kCPU, torch::kCPU);
      strategy->train_step(batch);
      counter.reset_peak();
      strategy->train_step(batch);
      measured = counter.peak() - before;
    }
    const auto& device = predicted.devices.front();
    EXPECT_NEAR(predicted.fullest() / measured, 1.0, tolerance)
        << model << ": predicted " << predicted.fullest() << " B (parameters " << device.parameters << ", gradients "
        << device.gradients << ", optimizer state " << device.optimizer_state << ", batch " << device.batch
        << ", activations " << device.activations << "), measured " << measured << " B";
  }
}

// ---- model states: distributed strategies, on two CPU ranks ---------------------------------------

// The case's ranks launched as the benchmark process launches them; each rank's param_, grad_ and
// optim_mem_gib against the formula.
void expect_rank_states_match(const std::vector<std::string>& base_arguments) {
  const GpusHiddenFromRanks gpus_hidden;  // CPU ranks even on a machine with GPUs
  auto arguments = base_arguments;
  for (const std::string extra : {"--repetitions=1", "--iterations=1", "--steps=1", "--warmup=1", "--allreduce=off",
                                  "--dist-timeout=30", "--image=16", "--seq=16", "--batch=4"}) {
    arguments.push_back(extra);
  }
  auto with_ranks = arguments;
  with_ranks.push_back("--gpus=2");
  auto specs = build_cases(parsed_options(with_ranks, /*has_gpu=*/false), /*visible_gpus=*/2);
  specs.erase(std::remove_if(specs.begin(), specs.end(), [](const CaseSpec& spec) { return !spec.skip_reason.empty(); }),
              specs.end());
  ASSERT_EQ(specs.size(), 1u);
  const auto& spec = specs.front();
  AdviseProfile profile;
  profile.memory = profile_memory({spec.config}, torch::kCPU);
  const auto predicted = spec.strategy->predictor().memory(profile, CaseConditions{spec.config, spec.global_batch, 2});
  const auto counters = launch_case(PARBENCH_BINARY, arguments, only_train_case(arguments, 2), 2, 60).counters;
  ASSERT_EQ(predicted.devices.size(), 2u);
  for (size_t d = 0; d < 2; ++d) {
    const auto suffix = "_dev" + std::to_string(d);
    ModelStateBytes measured;
    measured.parameters = counters.at("param_mem_gib" + suffix) * kGiB;
    measured.gradients = counters.at("grad_mem_gib" + suffix) * kGiB;
    measured.optimizer_state = counters.at("optim_mem_gib" + suffix) * kGiB;
    expect_states_match(predicted.devices[d], measured, spec.name + " rank " + std::to_string(d));
  }
}

TEST(AdviseMemory, ModelStatesByFormulaMatchDdpOnCpuRanks) {
  expect_rank_states_match({"--strategies=ddp", "--models=tinycnn", "--optimizer=adamw"});
}

TEST(AdviseMemory, ModelStatesByFormulaMatchEachZeroStageOnCpuRanks) {
  for (const std::string stage : {"1", "2", "3"}) {
    for (const std::string model : {"tinycnn", "tinygpt"}) {
      expect_rank_states_match({"--strategies=zero", "--zero-stages=" + stage, "--models=" + model, "--optimizer=adamw"});
    }
  }
  expect_rank_states_match({"--strategies=zero", "--zero-stages=3", "--models=tinygpt", "--optimizer=sgd"});
}

// zero stage 3 makes each unit's whole gradients just before the unit's backward: they are counted
// as they grow while the activations are freed (as a step's fresh gradients are), not all of them
// on top of the activations' peak. What it holds beyond its shards and the activations is then
// the two gathered units (tinygpt's units are its stages; each padded by at most one element).
TEST(AdviseMemory, ZeroStageThreeCountsEachUnitsWholeGradientsFromItsBackwardOn) {
  auto specs = build_cases(parsed_options({"--strategies=zero", "--zero-stages=3", "--models=tinygpt", "--gpus=2",
                                           "--seq=16", "--batch=4", "--optimizer=adamw"},
                                          /*has_gpu=*/false),
                           /*visible_gpus=*/2);
  ASSERT_EQ(specs.size(), 1u);
  const auto& spec = specs.front();
  AdviseProfile profile;
  profile.memory = profile_memory({spec.config}, torch::kCPU);
  const auto rank = spec.strategy->predictor().memory(profile, CaseConditions{spec.config, spec.global_batch, 2}).devices.front();
  const auto& memory = profile.memory;
  ASSERT_TRUE(memory.stage_groups.empty());
  std::vector<double> unit_bytes(memory.stage_names.size(), 0.0);
  for (size_t i = 0; i < memory.parameters.size(); ++i) {
    unit_bytes[memory.parameter_stage[i]] +=
        static_cast<double>(memory.parameters[i].numel() * static_cast<int64_t>(memory.parameters[i].element_size()));
  }
  const double largest_unit = *std::max_element(unit_bytes.begin(), unit_bytes.end());
  EXPECT_NEAR(rank.strategy, 2 * largest_unit, 2 * 4.0);
  const auto without_gradients = whole_model_memory(memory, spec.config, spec.config.batch_size, /*holds_batch=*/true,
                                                    /*fresh_gradients=*/false);
  EXPECT_GE(rank.activations, without_gradients.activations);
  EXPECT_FALSE(rank.fresh_gradients);  // its shards' gradients are kept, and count in its peak
}

// Without its rehearsal, a tensor_parallel rank's activations are the whole model's at the whole
// batch scaled as Megatron-LM's per-layer count: (10 + 24 / t) / 34 of them, or 1 / t with
// sequence parallelism.
TEST(AdviseMemory, TensorParallelWithoutItsRehearsalScalesTheWholeModelsActivations) {
  size_t checked = 0;
  for (const std::string degree : {"2", "4"}) {
    auto specs = build_cases(parsed_options({"--strategies=tensor_parallel", "--models=tinygpt", "--gpus=" + degree,
                                             "--seq=16", "--batch=4", "--sequence-parallel=off,on"},
                                            /*has_gpu=*/false),
                             /*visible_gpus=*/4);
    specs.erase(std::remove_if(specs.begin(), specs.end(), [](const CaseSpec& spec) { return !spec.skip_reason.empty(); }),
                specs.end());
    for (const auto& spec : specs) {
      ++checked;
      AdviseProfile profile;  // no rehearsal: the fallback
      profile.memory = profile_memory({spec.config}, torch::kCPU);
      const auto whole = whole_model_memory(profile.memory, spec.config, spec.global_batch, /*holds_batch=*/true,
                                            /*fresh_gradients=*/false);
      const auto predicted =
          spec.strategy->predictor().memory(profile, CaseConditions{spec.config, spec.global_batch, spec.gpus});
      ASSERT_EQ(predicted.devices.size(), static_cast<size_t>(spec.gpus)) << spec.name;
      const double t = spec.gpus;
      const bool sequence_parallel = option_choice(spec.config, "sp", "off") == "on";
      const double split = sequence_parallel ? 1.0 / t : (10.0 + 24.0 / t) / 34.0;
      for (const auto& device : predicted.devices) {
        EXPECT_NEAR(device.activations, whole.activations * split, 1e-9 * whole.activations) << spec.name;
      }
    }
  }
  EXPECT_GE(checked, 2u) << "tensor_parallel on 2 devices, sequence parallelism off and on";
}

TEST(AdviseMemory, ModelStatesByFormulaMatchTensorParallelOnCpuRanks) {
  for (const std::string optimizer : {"sgd", "adamw"}) {
    expect_rank_states_match({"--strategies=tensor_parallel", "--models=tinygpt", "--optimizer=" + optimizer});
  }
}

// ---- advise: printed, flagged, ranked -----------------------------------------------------------

struct ScopedEnvironment {
  ScopedEnvironment(const char* name, const std::string& value) : name(name) { setenv(name, value.c_str(), 1); }
  ~ScopedEnvironment() { unsetenv(name); }
  const char* name;
};

// Every case gets its predicted peak per device; with a capacity between the smallest and the
// largest fullest device (PARBENCH_TEST_DEVICE_GIB), those above it are flagged, ranked after every
// case that fits, and still run. A checkpointed case has its time predicted too, from a profile
// of its own: not its uncheckpointed twin's time.
TEST(Advise, FlagsCasesPredictedNotToFitAndRanksThemLast) {
  const auto cases = cases_of({"--preset=cpu", "--models=tinygpt", "--batch=8", "--seq=32",
                               "--strategies=single,model_parallel,pipeline", "--split-sizes=2",
                               "--schedules=gpipe,1f1b", "--checkpoint=off,blocks", "--advise=all"});
  const auto options = parsed_options({"--advise=all"}, /*has_gpu=*/false);
  testing::internal::CaptureStdout();
  auto unflagged = advise(cases, options);
  testing::internal::GetCapturedStdout();
  ASSERT_EQ(unflagged.size(), cases.size());
  double least = 1e30, most = 0;
  for (const auto& spec : unflagged) {
    ASSERT_FALSE(spec.predicted_peak_bytes.empty()) << spec.name;
    const double fullest = *std::max_element(spec.predicted_peak_bytes.begin(), spec.predicted_peak_bytes.end());
    least = std::min(least, fullest);
    most = std::max(most, fullest);
    EXPECT_TRUE(spec.predicted_step_ms.has_value()) << spec.name;
  }
  std::map<std::string, double> uncheckpointed_ms;
  for (const auto& spec : unflagged) {
    if (spec.config.checkpoint == Checkpointing::kOff) uncheckpointed_ms[spec.name] = spec.predicted_step_ms.value_or(0);
  }
  size_t checkpointed = 0;
  const std::string part = "/checkpoint:blocks";
  for (const auto& spec : unflagged) {
    if (spec.config.checkpoint == Checkpointing::kOff) continue;
    ++checkpointed;
    auto twin = spec.name;
    twin.erase(twin.find(part), part.size());
    ASSERT_EQ(uncheckpointed_ms.count(twin), 1u) << twin;
    EXPECT_NE(spec.predicted_step_ms.value_or(0), uncheckpointed_ms.at(twin)) << spec.name;
  }
  EXPECT_GT(checkpointed, 0u);
  ASSERT_LT(least, most);
  const double capacity = (least + most) / 2;
  std::vector<CaseSpec> flagged;
  std::string table;
  {
    char gib[64];
    std::snprintf(gib, sizeof gib, "%.17g", capacity / kGiB);
    ScopedEnvironment hook("PARBENCH_TEST_DEVICE_GIB", gib);
    testing::internal::CaptureStdout();
    flagged = advise(cases, options);
    table = testing::internal::GetCapturedStdout();
  }
  ASSERT_EQ(flagged.size(), cases.size()) << table;  // those that do not fit still run
  int last_fitting = 0, first_not = 1 << 30;
  size_t not_fitting = 0;
  for (const auto& spec : flagged) {
    const double fullest = *std::max_element(spec.predicted_peak_bytes.begin(), spec.predicted_peak_bytes.end());
    if (fullest > capacity * (1 + 1e-6)) {
      ++not_fitting;
      first_not = std::min(first_not, spec.predicted_rank);
      const auto line = table.find(spec.name + "  (does not fit");  // not a longer name it begins
      ASSERT_NE(line, std::string::npos) << spec.name << "\n" << table;
      EXPECT_NE(table.substr(line, table.find('\n', line) - line).find("does not fit: predicted"), std::string::npos)
          << table;
    } else if (fullest < capacity * (1 - 1e-6)) {
      last_fitting = std::max(last_fitting, spec.predicted_rank);
    }
  }
  EXPECT_GT(not_fitting, 0u) << table;
  EXPECT_LT(last_fitting, first_not) << table;
  EXPECT_NE(table.find("peak GiB"), std::string::npos) << table;
}

// A set-up whose time profile fails (here the reference step runs out of memory, by the test hook
// PARBENCH_TEST_OOM_ABOVE_BATCH, as a model too large for one device does) still has its memory
// predicted: every case is listed with its peak and time "-", and runs.
TEST(Advise, PredictsMemoryWhereTheTimeProfileFails) {
  auto cases = cases_of({"--preset=cpu", "--models=tinycnn", "--batch=4", "--image=16",
                         "--strategies=single,model_parallel"});
  ASSERT_EQ(cases.size(), 2u);
  const auto options = parsed_options({"--advise=all"}, /*has_gpu=*/false);
  ::setenv("PARBENCH_TEST_OOM_ABOVE_BATCH", "2", 1);
  const auto [to_run, table, errors] = advise_capturing(cases, options);
  ::unsetenv("PARBENCH_TEST_OOM_ABOVE_BATCH");
  EXPECT_NE(errors.find("the time profile failed"), std::string::npos) << errors;
  ASSERT_EQ(to_run.size(), 2u) << table << errors;
  for (const auto& spec : to_run) {
    EXPECT_FALSE(spec.predicted_step_ms.has_value()) << spec.name;
    EXPECT_FALSE(spec.predicted_peak_bytes.empty()) << spec.name;
    const auto line = table.find(spec.name);
    ASSERT_NE(line, std::string::npos) << table;
    const auto row = table.substr(table.rfind('\n', line) + 1, line - table.rfind('\n', line) - 1);
    EXPECT_NE(row.find(" - "), std::string::npos) << row;
  }
}

// A set-up whose reference step (the whole model at its batch on one device, where the time
// profile starts) is predicted not to fit is not time-profiled at all: a model too large for one
// GPU would take minutes to build only to run out of memory. Its cases still have their memory
// predicted, and run.
TEST(Advise, SkipsTheTimeProfileWhereItsReferenceStepIsPredictedNotToFit) {
  auto cases = cases_of({"--preset=cpu", "--models=tinycnn", "--batch=4", "--image=16",
                         "--strategies=single,model_parallel"});
  ASSERT_EQ(cases.size(), 2u);
  const auto options = parsed_options({"--advise=all"}, /*has_gpu=*/false);
  // A kibibyte: less than any case's predicted peak.
  ScopedEnvironment hook("PARBENCH_TEST_DEVICE_GIB", "0.000001");
  const auto [to_run, table, errors] = advise_capturing(cases, options);
  EXPECT_NE(errors.find("the time profile was skipped: its reference step (the whole model at batch 4 on one "
                        "device) is predicted to need"),
            std::string::npos)
      << errors;
  EXPECT_EQ(errors.find("the time profile failed"), std::string::npos) << errors;
  ASSERT_EQ(to_run.size(), 2u) << table << errors;
  for (const auto& spec : to_run) {
    EXPECT_FALSE(spec.predicted_step_ms.has_value()) << spec.name;
    EXPECT_FALSE(spec.predicted_peak_bytes.empty()) << spec.name;
  }
}

}  // namespace
}  // namespace parbench
