// Runs one training step over a model cut into stages (strategies/partition.h), in the order a
// pipeline schedule gives (strategies/pipeline_schedule.h). Shared by model_parallel (one
// micro-batch) and pipeline.
//
// - Each stage owns its backward: a stage's input is a leaf that requires grad, the stage runs
//   its own backward from the gradient of its output, and the gradient of its input travels
//   back to the previous stage. No autograd graph spans two devices.
// - Each device has its own host thread, which issues the device's program (its stage's, or its
//   stages' with interleaved-1f1b's chunks) on the device's streams; stages hand activations and
//   gradients to each other through mailboxes, so the host dispatch of one device overlaps that
//   of its neighbours.
// - On CUDA each device computes on its own stream, or on two "lanes" that take micro-batches
//   in turn (a device's stages share them), so one micro-batch's forward can overlap another's backward on the device (the
//   forwards stay in order, as do the backwards); a tensor travels on a send stream of the
//   source and a receive stream of the destination, ordered with events, so copies overlap
//   the neighbours' compute. Every stream starts behind the caller's current streams and the
//   caller's current streams end behind every stream, with no host synchronisation: the step
//   can be captured in one multi-device CUDA graph (benchmarks/measure/graphed_step.h).
// - Each stage updates its own parameters (its own Optimizer: SGD's one multi-tensor update, or
//   fused AdamW with its state on the stage's device) at the end of its program.
#pragma once

#include "strategies/partition.h"
#include "strategies/pipeline_schedule.h"

#include <memory>

namespace parbench {

class StageExecutor {
 public:
  // `lanes`: compute streams per device on CUDA, 1 or 2 (PipelineOptions::lanes). `devices`:
  // how many host threads, device d running partitions d, d+devices, ... (which must be on one
  // device); 0 for one per partition.
  StageExecutor(std::vector<Partition> partitions, LossKind loss, OptimizerKind optimizer, double learning_rate,
                std::optional<c10::ScalarType> autocast_dtype, int lanes = 1, size_t devices = 0);
  ~StageExecutor();
  StageExecutor(const StageExecutor&) = delete;
  StageExecutor& operator=(const StageExecutor&) = delete;

  // One step: zero grads, `programs` (make_schedule's, one per device, built once at set-up)
  // over micro-batches of `split_size` (the last one may be smaller), each stage's optimizer step. The mean loss over the
  // batch, on the last stage's device, not waited for. Throws where the batch splits into a
  // number of micro-batches other than the programs'.
  torch::Tensor train_step(const Batch& batch, int64_t split_size, const std::vector<StageProgram>& programs);

  // Per stage, the host milliseconds per step spent issuing forwards (host_forward_ms_stageN)
  // and backwards (host_backward_ms_stageN) and waiting for a neighbour (host_wait_ms_stageN),
  // averaged over every step run so far (docs/METRICS.md).
  std::map<std::string, double> host_counters() const;
  // Per device (host thread): its stages' parameters and optimizer state.
  std::vector<DeviceModelStates> model_states() const;

  torch::Device input_device() const;
  torch::Device target_device() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// What model_parallel and pipeline share: the model cut into stages over the devices and run by
// a StageExecutor, which also answers where batches go and the host-time counters.
class StagedStrategy : public Strategy {
 public:
  std::map<std::string, double> counters() const override { return executor_->host_counters(); }
  std::vector<DeviceModelStates> model_states() const override { return executor_->model_states(); }
  torch::Device input_device() const override { return executor_->input_device(); }
  torch::Device target_device() const override { return executor_->target_device(); }

 protected:
  // Makes the model, cuts it for micro-batches of `micro_batch` images (--cut) into `chunks`
  // parts per device (part c on device c % D) and builds the executor with `lanes` compute
  // streams per device.
  void set_up_stages(const ModelFactory& make_model, const std::vector<torch::Device>& devices,
                     const RunConfig& config, int64_t micro_batch, int lanes, size_t chunks = 1);
  // The cut used, as the label writes it: a part holding a whole group of stages names the group.
  std::string cut_text() const;

  RunConfig config_;
  Cut cut_;
  std::unique_ptr<StageExecutor> executor_;
  std::vector<StageProgram> programs_;  // one per device, built at set-up
};

}  // namespace parbench
