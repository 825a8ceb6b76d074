// Where a step's batch comes from, per data mode.
#pragma once

#include "benchmarks/config/options.h"

namespace parbench {

// device: one random batch made on the devices at set-up and reused (no input cost);
// pinned: one random batch in pinned host memory, copied asynchronously every step;
// host:   a new random batch made on the CPU every step and copied from pageable memory,
//         as the tutorial did.
class BatchSource {
 public:
  BatchSource(const RunConfig& config, int64_t batch_size, DataMode mode, torch::Device input_device,
              torch::Device target_device);
  Batch next();
  // Bytes of the batch it holds between steps on `device` (device data; none for the others).
  double held_bytes_on(torch::Device device) const;

 private:
  RunConfig config_;
  int64_t batch_size_;
  DataMode mode_;
  torch::Device input_device_, target_device_;
  Batch held_;  // device: on the devices; pinned: in pinned host memory
};

}  // namespace parbench
