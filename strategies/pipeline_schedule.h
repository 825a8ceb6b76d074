// Pipeline schedules as data: for each stage, the order in which it runs its micro-batches'
// forwards and backwards. The executor (strategies/stage_executor.h) issues these programs, one
// host thread per stage, and anything that models a schedule can read the same programs.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace parbench {

enum class StageOp {
  kForward,      // the stage's forward of one micro-batch
  kBackward,     // the stage's backward of one micro-batch
  kBackwardAll,  // the last stage only: one loss over all micro-batches' outputs, one backward
};

struct StageAction {
  StageOp op;
  int64_t micro_batch;  // -1 for kBackwardAll
};

using StageProgram = std::vector<StageAction>;

// The schedules a pipeline can run, in listing order:
//   tutorial  forwards as a wavefront, then one loss over the concatenated outputs and one
//             backward (PyTorch's model-parallel tutorial); earlier stages run their backwards
//             as the input gradients arrive, last micro-batch first.
//   gpipe     all forwards, then one backward per micro-batch, last first.
//   1f1b      stage s runs min(S-1-s, M) warm-up forwards, then one forward and one backward in
//             turn, then the remaining backwards (PipeDream-flush): at most S-s micro-batches
//             hold activations on stage s.
const std::vector<std::string>& pipeline_schedules();

// One program per stage for `micro_batches` micro-batches over `stages` stages. Throws
// std::invalid_argument naming the allowed schedules.
std::vector<StageProgram> make_schedule(const std::string& schedule, size_t stages, size_t micro_batches);

}  // namespace parbench
