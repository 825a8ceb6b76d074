// Pipeline schedules as data: for each device, the order in which its host thread runs the
// forwards and backwards of its stages' micro-batches. The executor (strategies/stage_executor.h)
// issues these programs, one host thread per device, and anything that models a schedule (the
// simulator, strategies/schedule_simulator.h) reads the same programs.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace parbench {

enum class StageOp {
  kForward,      // the stage's forward of one micro-batch
  kBackward,     // the stage's backward of one micro-batch
  kBackwardAll,  // the last stage only: one loss over all micro-batches' outputs, one backward
  // zb-h1's halves of kBackward:
  kBackwardInput,   // B: the gradient of the stage's input only, sent on at once
  kBackwardWeight,  // W: the gradients of the stage's weights, from the graph B kept
};

struct StageAction {
  StageOp op;
  int64_t micro_batch;  // -1 for kBackwardAll
  size_t stage;         // which stage (model chunk) of the model runs it
};

// One device's actions, in order. With one stage per device, program d holds stage d's actions;
// with `chunks` stages per device (interleaved-1f1b), device d holds stages d, d+D, d+2D, ...
using StageProgram = std::vector<StageAction>;

// The schedules a pipeline can run, in listing order:
//   tutorial  forwards as a wavefront, then one loss over the concatenated outputs and one
//             backward (PyTorch's model-parallel tutorial); earlier stages run their backwards
//             as the input gradients arrive, last micro-batch first.
//   gpipe     all forwards, then one backward per micro-batch, last first.
//   1f1b      stage s runs min(S-1-s, M) warm-up forwards, then one forward and one backward in
//             turn, then the remaining backwards (PipeDream-flush): at most S-s micro-batches
//             hold activations on stage s.
//   interleaved-1f1b
//             Megatron-LM's interleaved schedule (Narayanan et al., SC'21): each of D devices
//             holds v = `chunks` non-contiguous stages (device d: stages d, d+D, ...); device d
//             runs min((D-1-d)*2 + (v-1)*D, M*v) warm-up forwards, then one forward and one
//             backward in turn. Its k-th forward runs micro-batch (k / Dv)*D + k % D on its chunk
//             (k % Dv) / D, its k-th backward the same micro-batch on chunk v-1-(k % Dv) / D. The
//             micro-batches must be a multiple of D; with v = 1 it is 1f1b.
//   zb-h1     Qi et al.'s ZB-H1 ("Zero Bubble Pipeline Parallelism", ICLR 2024): 1f1b's order
//             with each backward split into B (input gradient, on the critical path) and W
//             (weight gradients); stage s runs a W only once more than s of them are pending,
//             so later stages defer theirs into what would be the cooldown's bubbles. Every
//             stage holds at most S micro-batches' activations (1f1b's first stage's).
// The schedules, as data: options, --help, the case builder, --print-schedule, the executor and
// advise (which predicts any program of F, B, B/W halves and chunks) read this table, and the equivalence tests take every entry, so a new schedule is its
// generator and one entry here (docs/EXTENDING.md).
struct ScheduleInfo {
  std::string name;
  std::string summary;  // for --help
  bool uses_chunks = false;  // takes --chunks stages per device
  std::function<std::vector<StageProgram>(size_t devices, size_t micro_batches, size_t chunks)> programs;
  // The ideal bubble (docs/METRICS.md, "The pipeline's ideal bubble"): (S-1)/(wM+S-1) with w
  // this many equal actions per micro-batch and stage on a device's critical path (zb-h1's F, B
  // and W: 3), times the chunks where the schedule uses them.
  int ideal_work_per_micro_batch = 1;
  // Its backward is split into B (input gradients) and W (weight gradients): activation
  // checkpointing, which recomputes a block's whole backward at once, cannot run under it.
  bool splits_backward = false;
};
const std::vector<ScheduleInfo>& schedule_table();

// The ideal bubble of `info` over `devices` devices, `micro_batches` equal micro-batches and
// `chunks` stages per device, and its formula as the report prints it: "(S-1)/(M+S-1)",
// "(S-1)/(vM+S-1)", "(S-1)/(3M+S-1)".
double ideal_bubble_fraction(const ScheduleInfo& info, size_t devices, size_t micro_batches, size_t chunks = 1);
std::string ideal_bubble_formula(const ScheduleInfo& info);

// An action's letter in traces, timelines and --print-schedule: F, B (a whole backward, the
// tutorial's backward over every micro-batch, or zb-h1's input gradient) or W; and what it means.
const char* op_letter(StageOp op);
const char* op_meaning(StageOp op);

// The kinds of action `info`'s programs run, in StageOp's order (its programs at 2 devices and
// 4 micro-batches, 2 chunks where it uses them).
std::vector<StageOp> schedule_ops(const ScheduleInfo& info);

// Every schedule's facts as JSON text, the context's `schedule_facts` (docs/JSON.md): an array,
// in the table's order, of {"name", "ideal_bubble", "ideal_work_per_micro_batch",
// "work_times_chunks", "ops": [{"letter", "means"}]}, so readers need no schedule's name.
std::string schedule_facts_json();

// The entry of `schedule`; throws std::invalid_argument naming the allowed ones.
const ScheduleInfo& schedule_info(const std::string& schedule);

// "tutorial, gpipe, ...", in the table's order.
std::string schedule_names();

// How many micro-batches of `split_size` images a batch of `batch` makes: the last may be smaller.
int64_t micro_batch_count(int64_t batch, int64_t split_size);

// How many micro-batches `programs` run: one more than the highest micro-batch they name.
int64_t program_micro_batches(const std::vector<StageProgram>& programs);

// One program per device for `micro_batches` micro-batches over `devices` devices holding
// `chunks` stages each (more than one for interleaved-1f1b only). Throws std::invalid_argument
// for an unknown schedule (naming the allowed ones) or counts the schedule cannot run.
std::vector<StageProgram> make_schedule(const std::string& schedule, size_t devices, size_t micro_batches,
                                        size_t chunks = 1);

}  // namespace parbench
