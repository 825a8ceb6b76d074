// The schedule simulator on hand-made stage timings whose step times are known.
#include "strategies/schedule_simulator.h"

#include <gtest/gtest.h>

#include <stdexcept>

namespace parbench {
namespace {

// `stages` stages whose forward and backward of every micro-batch take the given times, with
// instant copies and updates.
StageDurations per_stage(const std::vector<double>& forward, const std::vector<double>& backward,
                         size_t micro_batches) {
  StageDurations durations;
  for (size_t s = 0; s < forward.size(); ++s) {
    durations.forward_ms.emplace_back(micro_batches, forward[s]);
    durations.backward_ms.emplace_back(micro_batches, backward[s]);
    durations.update_ms.push_back(0);
  }
  durations.activation_copy_ms.assign(forward.size() - 1, std::vector<double>(micro_batches, 0));
  durations.gradient_copy_ms = durations.activation_copy_ms;
  return durations;
}

// S equal stages and M equal micro-batches: the step is (M+S-1)/M of one stage's work, for
// every schedule; GPipe holds all M micro-batches on the first stage, 1F1B at most S-s on stage s.
TEST(ScheduleSimulator, EqualStagesTakeMPlusSMinusOneOverMOfOneStagesWork) {
  constexpr size_t kStages = 4, kMicroBatches = 8;
  constexpr double kForward = 1.0, kBackward = 2.0;
  const auto durations = per_stage(std::vector<double>(kStages, kForward), std::vector<double>(kStages, kBackward),
                                   kMicroBatches);
  const double one_stage = kMicroBatches * (kForward + kBackward);
  for (const std::string schedule : {"tutorial", "gpipe", "1f1b"}) {  // zb-h1 splits the backward: below
    const auto step = simulate_step(make_schedule(schedule, kStages, kMicroBatches), durations);
    EXPECT_DOUBLE_EQ(step.step_ms / one_stage, (kMicroBatches + kStages - 1.0) / kMicroBatches) << schedule;
    for (size_t s = 0; s < kStages; ++s) {
      EXPECT_DOUBLE_EQ(step.busy_ms[s], one_stage) << schedule;
      EXPECT_DOUBLE_EQ(step.bubble_fraction[s], (kStages - 1.0) / (kMicroBatches + kStages - 1.0)) << schedule;
    }
  }
  const auto gpipe = simulate_step(make_schedule("gpipe", kStages, kMicroBatches), durations);
  const auto one_f_one_b = simulate_step(make_schedule("1f1b", kStages, kMicroBatches), durations);
  EXPECT_EQ(gpipe.peak_micro_batches, std::vector<int64_t>(kStages, kMicroBatches));
  EXPECT_EQ(one_f_one_b.peak_micro_batches, (std::vector<int64_t>{4, 3, 2, 1}));
}

// Stage 1 three times as slow as stage 0: the step is stage 1's work plus stage 0's share of one
// micro-batch before and after it (worked out by hand: 24 + 1 + 1).
TEST(ScheduleSimulator, AnUnbalancedCutIsBoundByItsSlowestStage) {
  constexpr size_t kMicroBatches = 4;
  const auto durations = per_stage({1.0, 3.0}, {1.0, 3.0}, kMicroBatches);
  for (const std::string schedule : {"gpipe", "1f1b", "tutorial"}) {
    const auto step = simulate_step(make_schedule(schedule, 2, kMicroBatches), durations);
    EXPECT_DOUBLE_EQ(step.step_ms, 26.0) << schedule;
    EXPECT_DOUBLE_EQ(step.busy_ms[1], 24.0) << schedule;
  }
}

// One micro-batch (model_parallel): everything in sequence, copies and the last update included.
TEST(ScheduleSimulator, OneMicroBatchRunsEveryPartInSequence) {
  auto durations = per_stage({1.0, 2.0}, {2.0, 4.0}, 1);
  durations.activation_copy_ms = {{0.5}};
  durations.gradient_copy_ms = {{0.25}};
  durations.update_ms = {0.125, 0.375};
  const auto step = simulate_step(make_schedule("gpipe", 2, 1), durations);
  EXPECT_DOUBLE_EQ(step.step_ms, 1.0 + 0.5 + 2.0 + 4.0 + 0.25 + 2.0 + 0.125);
  EXPECT_DOUBLE_EQ(step.busy_ms[0], 3.125);
  EXPECT_DOUBLE_EQ(step.busy_ms[1], 6.375);
}

// Copies share the source's send stream: with copies as long as the compute, GPipe's forwards
// are paced by the link, not by the stages.
TEST(ScheduleSimulator, CopiesQueueOnTheLink) {
  constexpr size_t kMicroBatches = 4;
  auto durations = per_stage({1.0, 1.0}, {1.0, 1.0}, kMicroBatches);
  durations.activation_copy_ms = {std::vector<double>(kMicroBatches, 2.0)};
  const auto step = simulate_step(make_schedule("gpipe", 2, kMicroBatches), durations);
  // Activations arrive at 3, 5, 7, 9; stage 1 forwards end at 10, its backwards at 14; stage 0's
  // backward of micro-batch 0, the last, ends at 15.
  EXPECT_DOUBLE_EQ(step.step_ms, 15.0);
}

// Interleaved 1F1B over D devices holding v chunks of 1/v of a stage's work each: the step is
// (M + (D-1)/v) of one micro-batch's forward and backward, Megatron-LM's bubble shrunk v-fold,
// (D-1)/(vM+D-1) of the step on every device.
TEST(ScheduleSimulator, InterleavingShrinksTheBubbleByTheChunksPerDevice) {
  constexpr double kForward = 1.0, kBackward = 2.0;
  for (size_t devices : {2, 3, 4}) {
    for (size_t chunks : {2, 3}) {
      for (size_t micro_batches : {devices, 2 * devices, 3 * devices}) {
        const size_t stages = devices * chunks;
        const auto durations = per_stage(std::vector<double>(stages, kForward / chunks),
                                         std::vector<double>(stages, kBackward / chunks), micro_batches);
        const auto step = simulate_step(make_schedule("interleaved-1f1b", devices, micro_batches, chunks), durations);
        const auto what = std::to_string(devices) + " devices, " + std::to_string(chunks) + " chunks, " +
                          std::to_string(micro_batches) + " micro-batches";
        const double bubbles = (devices - 1.0) / chunks;
        EXPECT_NEAR(step.step_ms, (micro_batches + bubbles) * (kForward + kBackward), 1e-9) << what;
        for (double bubble : step.bubble_fraction) {
          EXPECT_NEAR(bubble, (devices - 1.0) / (chunks * micro_batches + devices - 1.0), 1e-9) << what;
        }
      }
    }
  }
  // Beside 1F1B on the same work cut into D stages: a smaller bubble, at the cost of activations.
  const auto plain = simulate_step(make_schedule("1f1b", 2, 4), per_stage({1, 1}, {2, 2}, 4));
  const auto interleaved =
      simulate_step(make_schedule("interleaved-1f1b", 2, 4, 2), per_stage({0.5, 0.5, 0.5, 0.5}, {1, 1, 1, 1}, 4));
  EXPECT_LT(interleaved.step_ms, plain.step_ms);
  EXPECT_GT(interleaved.peak_micro_batches.front(), plain.peak_micro_batches.front());
}

// ZB-H1 with forward, B and W equally long: the bubble falls from 1F1B's (S-1)(F+B+W) to
// Qi et al.'s (S-1)(F+B-W).
TEST(ScheduleSimulator, ZeroBubbleH1CutsTheBubbleToFPlusBMinusW) {
  constexpr double kPass = 1.0;  // F = B = W
  for (size_t stages : {2, 3, 4}) {
    for (size_t micro_batches : {stages, 2 * stages, size_t{8}}) {
      auto durations = per_stage(std::vector<double>(stages, kPass), std::vector<double>(stages, 2 * kPass),
                                 micro_batches);
      durations.input_gradient_ms.assign(stages, std::vector<double>(micro_batches, kPass));
      durations.weight_gradient_ms = durations.input_gradient_ms;
      const auto what = std::to_string(stages) + " stages, " + std::to_string(micro_batches) + " micro-batches";
      const auto zero_bubble = simulate_step(make_schedule("zb-h1", stages, micro_batches), durations);
      const auto one_f_one_b = simulate_step(make_schedule("1f1b", stages, micro_batches), durations);
      EXPECT_DOUBLE_EQ(zero_bubble.step_ms, micro_batches * 3 * kPass + (stages - 1.0) * kPass) << what;
      EXPECT_DOUBLE_EQ(one_f_one_b.step_ms, (micro_batches + stages - 1.0) * 3 * kPass) << what;
      for (auto peak : zero_bubble.peak_micro_batches) EXPECT_LE(peak, static_cast<int64_t>(stages)) << what;
    }
  }
}

// The shapes advise feeds the simulator: zb-h1 needs B and W rows for every stage, as many as
// its forwards'; interleaved-1f1b needs a row per chunk (D x v stages), each on device s mod D.
TEST(ScheduleSimulator, SplitAndChunkedSchedulesTakeTheirOwnDurationShapes) {
  constexpr size_t kMicroBatches = 4;
  auto split = per_stage({1, 1}, {2, 2}, kMicroBatches);
  const auto zero_bubble = make_schedule("zb-h1", 2, kMicroBatches);
  EXPECT_THROW(simulate_step(zero_bubble, split), std::invalid_argument);  // no B and W rows
  split.input_gradient_ms.assign(2, std::vector<double>(kMicroBatches, 1));
  split.weight_gradient_ms.assign(1, std::vector<double>(kMicroBatches, 1));
  EXPECT_THROW(simulate_step(zero_bubble, split), std::invalid_argument);  // W for one stage of two
  split.weight_gradient_ms.assign(2, std::vector<double>(kMicroBatches - 1, 1));
  EXPECT_THROW(simulate_step(zero_bubble, split), std::invalid_argument);  // W for too few micro-batches
  split.weight_gradient_ms.assign(2, std::vector<double>(kMicroBatches, 1));
  // The whole backward's rows are there too (their shape is checked) but unused: B and W time it.
  split.backward_ms.assign(2, std::vector<double>(kMicroBatches, 100));
  const auto step = simulate_step(zero_bubble, split);
  EXPECT_DOUBLE_EQ(step.busy_ms[0], kMicroBatches * 3.0);

  const auto interleaved = make_schedule("interleaved-1f1b", 2, kMicroBatches, 2);
  EXPECT_THROW(simulate_step(interleaved, per_stage({1, 1}, {2, 2}, kMicroBatches)), std::invalid_argument);
  // Four chunks of distinct cost: device 0 holds stages 0 and 2, device 1 stages 1 and 3.
  const auto chunked = simulate_step(interleaved, per_stage({1, 2, 3, 4}, {1, 2, 3, 4}, kMicroBatches));
  EXPECT_DOUBLE_EQ(chunked.busy_ms[0], kMicroBatches * 2 * (1.0 + 3.0));
  EXPECT_DOUBLE_EQ(chunked.busy_ms[1], kMicroBatches * 2 * (2.0 + 4.0));
  for (const auto& placed : chunked.actions) EXPECT_EQ(placed.device, placed.action.stage % 2);
}

TEST(ScheduleSimulator, RefusesADeadlockAndMismatchedDurations) {
  const std::vector<StageProgram> waits_for_itself = {
      {{StageOp::kBackward, 0, 0}, {StageOp::kForward, 0, 0}},
      {{StageOp::kForward, 0, 1}, {StageOp::kBackward, 0, 1}},
  };
  EXPECT_THROW(simulate_step(waits_for_itself, per_stage({1, 1}, {1, 1}, 1)), std::logic_error);
  EXPECT_THROW(simulate_step(make_schedule("gpipe", 3, 2), per_stage({1, 1}, {1, 1}, 2)), std::invalid_argument);
  EXPECT_THROW(simulate_step(make_schedule("gpipe", 2, 3), per_stage({1, 1}, {1, 1}, 2)), std::invalid_argument);
}

// ddp's exposed all-reduce, worked by hand: three buckets ready at 2, 5 and 10 ms of a 10 ms
// backward.
TEST(ExposedAllreduce, OverlapHidesAllButWhatFollowsTheLastGradient) {
  // Short all-reduces: each done before the next bucket is ready; only the last one's 1 ms shows.
  EXPECT_DOUBLE_EQ(exposed_allreduce_ms({2, 5, 10}, {1, 1, 1}, 10, /*overlap=*/true), 1.0);
  // Long ones queue on the one stream: 2-6, 6-10, 10-14.
  EXPECT_DOUBLE_EQ(exposed_allreduce_ms({2, 5, 10}, {4, 4, 4}, 10, true), 4.0);
  // Longer than backward itself: 2-9, 9-16, 16-23.
  EXPECT_DOUBLE_EQ(exposed_allreduce_ms({2, 5, 10}, {7, 7, 7}, 10, true), 13.0);
  // Without overlap every all-reduce follows backward.
  EXPECT_DOUBLE_EQ(exposed_allreduce_ms({2, 5, 10}, {1, 1, 1}, 10, /*overlap=*/false), 3.0);
  EXPECT_DOUBLE_EQ(exposed_allreduce_ms({}, {}, 10, true), 0.0);
  EXPECT_THROW(exposed_allreduce_ms({2, 5}, {1}, 10, true), std::invalid_argument);
}

}  // namespace
}  // namespace parbench
