// The optimizers a case trains with (--optimizer): plain SGD, as the tutorial, or AdamW through
// PyTorch's fused kernel. Each strategy keeps one Optimizer per set of parameters it updates in
// one place (single: the model; model_parallel and pipeline: each stage; data_parallel: replica
// 0's; ddp: its rank's), on the parameters' device.
#pragma once

#include "strategies/strategy.h"

#include <torch/torch.h>

#include <string>
#include <vector>

namespace parbench {

std::string to_string(OptimizerKind kind);

// AdamW's hyper-parameters besides the learning rate: PyTorch's defaults (torch.optim.AdamW).
struct AdamWSettings {
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 1e-2;
};

class Optimizer {
 public:
  // How SGD issues its update: one add per parameter (torch::optim::SGD's kernels, which single,
  // ddp and data_parallel's clone variant ran before there was a choice), or one multi-tensor
  // update (the stage executor's and data_parallel's).
  enum class SgdKernels { kPerParameter, kMultiTensor };

  // AdamW's state (exp_avg, exp_avg_sq, and the step count, one fp32 scalar per parameter) is
  // made here, zeros beside each parameter, so that it exists before a CUDA graph captures a
  // step and the memory breakdown sees it from the start. The step counts live on the
  // parameters' device and are incremented there: a captured step counts every replay.
  Optimizer(std::vector<torch::Tensor> parameters, OptimizerKind kind, double learning_rate,
            SgdKernels sgd_kernels = SgdKernels::kMultiTensor, AdamWSettings adamw = {});

  // Every parameter's gradient to none (torch::optim::Optimizer::zero_grad's default).
  void zero_grad();
  // One update of the parameters that have a gradient; the others are left alone.
  void step();

  OptimizerKind kind() const { return kind_; }
  const std::vector<torch::Tensor>& parameters() const { return parameters_; }
  // Its state tensors (AdamW: exp_avg, exp_avg_sq and step of each parameter); none for SGD.
  std::vector<torch::Tensor> state() const;

 private:
  std::vector<torch::Tensor> parameters_;
  OptimizerKind kind_;
  double learning_rate_;
  SgdKernels sgd_kernels_;
  AdamWSettings adamw_;
  std::vector<torch::Tensor> exp_avgs_, exp_avg_sqs_, steps_;  // AdamW, per parameter
};

// An Optimizer over all of `model`'s parameters, with `config`'s kind and learning rate.
std::unique_ptr<Optimizer> make_optimizer(StagedModel& model, const RunConfig& config,
                                          Optimizer::SgdKernels sgd_kernels = Optimizer::SgdKernels::kMultiTensor);

// Bytes a tensor's elements take (numel x element size).
int64_t tensor_bytes(const torch::Tensor& tensor);

}  // namespace parbench
