// A strategy's training step captured once in a CUDA graph and replayed in its place.
#pragma once

#include "strategies/strategy.h"

#include <memory>

namespace parbench {

// Capture follows PyTorch's recipe for whole-network capture: warm-up steps on a side stream,
// then one step captured there with the autocast cache off (every replay must redo the casts
// of the weights it updated). A replay reruns the captured kernels on the same memory: the
// input batch, the gradients, and the activations in the graph's private pool. The host only
// launches the graph, so a step takes the device's time and not the host's dispatch time.
// ddp's bucketed all-reduces are captured with the rest (NCCL supports capture); every rank
// captures the same collectives in the same order, and replays them together.
class GraphedStep {
 public:
  // `example` becomes the graph's input: the batches given to run() are copied into it.
  // Throws if the strategy does not run on GPUs.
  GraphedStep(Strategy& strategy, Batch example);
  ~GraphedStep();
  GraphedStep(const GraphedStep&) = delete;
  GraphedStep& operator=(const GraphedStep&) = delete;

  // Copies `batch` into the graph's input (unless it is that input) and replays the step.
  // Returns the loss, which the next replay overwrites.
  torch::Tensor run(const Batch& batch);

 private:
  struct Captured;  // the graph and its tensors, in CUDA builds
  std::unique_ptr<Captured> captured_;
};

// Side-stream steps before the capture (PyTorch's recipe uses 3).
inline constexpr int kGraphWarmupSteps = 3;

// One training step on `batch`: a replay of `graphed` when there is one, else the strategy's own.
inline void train_step(Strategy& strategy, GraphedStep* graphed, const Batch& batch) {
  if (graphed) {
    graphed->run(batch);
  } else {
    strategy.train_step(batch);
  }
}

}  // namespace parbench
