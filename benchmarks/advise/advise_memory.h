// --advise's memory profile (docs/METRICS.md, "Predicted peak memory"): the model's parameters
// without their memory, and each stage's activations measured one stage at a time on one device,
// so that a model no device holds whole (gpt-6.7b) is measured too. The strategies' predictors
// (StrategyPredictor::memory) turn it into each case's memory per device.
#pragma once

#include "strategies/prediction.h"

#include <set>
#include <vector>

namespace parbench {

// Bytes allocated on one device now and at the most since it was made (or reset_peak): the CUDA
// caching allocator's statistics on a GPU; on the CPU, a counting wrapper over the CPU allocator,
// installed while the counter lives (one CPU counter at a time), which counts what is allocated
// and freed meanwhile.
class AllocationCounter {
 public:
  explicit AllocationCounter(torch::Device device);
  ~AllocationCounter();
  AllocationCounter(const AllocationCounter&) = delete;
  AllocationCounter& operator=(const AllocationCounter&) = delete;

  double current() const;  // waits for the device first
  double peak() const;
  void reset_peak();

 private:
  torch::Device device_;
};

// The micro-batch sizes every stage is measured at, beside the sizes its set-up's cases run.
inline const std::vector<int64_t> kMemoryProfileSizes = {2, 4};

// The memory profile of one set-up: `configs` hold its model, classes, precision, loss and
// sample shape, one per checkpointing choice its cases take (each measured under its own). The
// model is built on the CPU; each stage in turn is placed on `device`, run forward (the last
// with its loss) and backward once untimed and unmeasured (its gradients and workspaces made),
// then measured: what its forward leaves allocated (its output included; its input, the previous
// stage's output, not), its output, and the most its backward allocates above that (the incoming
// gradient included), at each of kMemoryProfileSizes and `case_sizes` (the micro-batches,
// replicas' shards and ranks' batches its cases run; SampledBytes); then it goes back to the CPU.
// A size that runs out of memory, and every larger one, is left to the line through the two
// largest measured.
MemoryProfile profile_memory(const std::vector<RunConfig>& configs, torch::Device device,
                             const std::set<int64_t>& case_sizes = {});

// Each device's capacity for the prediction's "fits": a GPU's total memory; on CPU stand-ins 0
// (unknown: no case is flagged) unless PARBENCH_TEST_DEVICE_GIB sets one (benchmarks/config/test_hooks.h).
double device_capacity_bytes(torch::Device device);

}  // namespace parbench
