// Predicts a pipeline step from the durations of its parts, by replaying the schedule's
// per-stage programs (strategies/pipeline_schedule.h) as a dependency graph: `parbench --advise`
// feeds it profiled stage timings (benchmarks/advise/advise.h), and `--trace` draws its timeline beside
// the measured one.
//
// The model, as the executor (strategies/stage_executor.h) runs a step with one lane per device:
// - each device computes on one stream, its program's actions one after another (whichever of
//   its stages they belong to), each starting when the previous one ended and its input is there;
// - a stage's forward of micro-batch m needs the previous stage's output of m, copied on that
//   stage's send stream; its backward needs the next stage's input gradient of m, copied on the
//   next stage's send stream (the last stage's backward needs only its own forward);
// - a stage's send stream carries its copies one at a time, in the order its program makes them
//   (the receiving side's stream is not modelled: its order depends on host timing);
// - the tutorial's kBackwardAll is the last stage's backwards of every micro-batch, last first;
// - zb-h1's B sends the input gradient as a backward does; its W needs only its own B, earlier
//   in the same program, and frees the micro-batch's activations;
// - each stage's SGD update follows its last action; the step ends when every stage's has.
// Host dispatch is not modelled: the durations are the devices' (measured under CUDA graphs).
#pragma once

#include "strategies/pipeline_schedule.h"

#include <string>
#include <vector>

namespace parbench {

// Durations in milliseconds, indexed [stage][micro-batch]; a stage runs on the device whose
// program holds its actions.
struct StageDurations {
  std::vector<std::vector<double>> forward_ms, backward_ms;
  // [s][m]: copying micro-batch m's output of stage s to stage s+1 (S-1 rows), and its input
  // gradient of stage s+1 back to stage s (S-1 rows, row s for the boundary after stage s).
  std::vector<std::vector<double>> activation_copy_ms, gradient_copy_ms;
  std::vector<double> update_ms;  // [stage]
  // zb-h1's halves of a backward, B (input gradient) and W (weight gradients), [stage][micro-batch]:
  // needed only by programs that split their backwards.
  std::vector<std::vector<double>> input_gradient_ms, weight_gradient_ms;
};

// One action as the simulator placed it: on `device` (its program), from start_ms to end_ms
// after the step's start. The tutorial's kBackwardAll appears as its per-micro-batch backwards.
struct SimulatedAction {
  size_t device = 0;
  StageAction action;
  double start_ms = 0, end_ms = 0;
};

// Per device (program), in the programs' order.
struct SimulatedStep {
  std::vector<SimulatedAction> actions;    // every forward and backward, as placed
  double step_ms = 0;
  std::vector<double> busy_ms;             // forwards, backwards and updates of the device's stages
  std::vector<double> bubble_fraction;     // 1 - busy_ms / step_ms
  std::vector<int64_t> peak_micro_batches; // most (stage, micro-batch) activations held at once
};

// Throws std::invalid_argument for durations whose shape does not match `programs`, and
// std::logic_error for programs that wait on something that never comes (a deadlock).
SimulatedStep simulate_step(const std::vector<StageProgram>& programs, const StageDurations& durations);

// A schedule's action grid in unit time (every forward, backward and weight gradient one slot,
// copies free): one row per device, one column per slot, cells "F3" (micro-batch 3's forward),
// "B3", "W3" or "." (idle); with more than one chunk per device the stage follows ("F3s2").
// Throws std::invalid_argument as make_schedule does.
std::string format_schedule_grid(const std::string& schedule, size_t devices, size_t micro_batches, size_t chunks);

// ddp's all-reduce time that its backward does not hide (strategies/distributed/gradient_buckets.h):
// bucket b's all-reduce starts once its gradients are ready (`overlap`; at bucket_ready_ms[b] from
// backward's start) or once backward has ended (not), and after bucket b-1's, all on one
// communication stream; returns how long after backward's end the last one ends (0 where it
// ends before). Throws std::invalid_argument for mismatched lengths.
double exposed_allreduce_ms(const std::vector<double>& bucket_ready_ms, const std::vector<double>& allreduce_ms,
                            double backward_ms, bool overlap);

}  // namespace parbench
