#include "strategies/optimizer.h"

#include "strategies/training.h"

#include <ATen/ops/_fused_adamw.h>

namespace parbench {

std::string to_string(OptimizerKind kind) { return kind == OptimizerKind::kAdamW ? "adamw" : "sgd"; }

Optimizer::Optimizer(std::vector<torch::Tensor> parameters, OptimizerKind kind, double learning_rate,
                     SgdKernels sgd_kernels, AdamWSettings adamw)
    : parameters_(std::move(parameters)),
      kind_(kind),
      learning_rate_(learning_rate),
      sgd_kernels_(sgd_kernels),
      adamw_(adamw) {
  if (kind_ != OptimizerKind::kAdamW) return;
  torch::NoGradGuard no_grad;
  for (const auto& parameter : parameters_) {
    TORCH_CHECK(parameter.scalar_type() == torch::kFloat || parameter.scalar_type() == torch::kDouble,
                "adamw keeps its state in the parameters' floating type, fp32 or fp64; got ", parameter.scalar_type());
    // zeros_like keeps the parameter's layout (channels-last weights stay so), as the fused
    // kernel, which walks parameter, gradient and state element by element, needs.
    exp_avgs_.push_back(torch::zeros_like(parameter));
    exp_avg_sqs_.push_back(torch::zeros_like(parameter));
    steps_.push_back(torch::zeros({}, parameter.options().dtype(torch::kFloat)));
  }
}

void Optimizer::zero_grad() {
  for (auto& parameter : parameters_) parameter.mutable_grad().reset();
}

void Optimizer::step() {
  torch::NoGradGuard no_grad;
  if (kind_ == OptimizerKind::kSgd) {
    if (sgd_kernels_ == SgdKernels::kMultiTensor) return sgd_update(parameters_, learning_rate_);
    // torch::optim::SGD without momentum or weight decay: p -= lr * grad, one kernel per parameter.
    for (auto& parameter : parameters_) {
      if (parameter.grad().defined()) parameter.add_(parameter.grad(), -learning_rate_);
    }
    return;
  }
  std::vector<torch::Tensor> parameters, gradients, exp_avgs, exp_avg_sqs, steps;
  for (size_t i = 0; i < parameters_.size(); ++i) {
    if (!parameters_[i].grad().defined()) continue;
    parameters.push_back(parameters_[i]);
    gradients.push_back(parameters_[i].grad());
    exp_avgs.push_back(exp_avgs_[i]);
    exp_avg_sqs.push_back(exp_avg_sqs_[i]);
    steps.push_back(steps_[i]);
  }
  if (parameters.empty()) return;
  // As torch.optim.AdamW(fused=True): the counts first, on their device, then one fused update
  // that reads them there for the bias corrections.
  torch::_foreach_add_(steps, 1);
  at::_fused_adamw_(parameters, gradients, exp_avgs, exp_avg_sqs, /*max_exp_avg_sqs=*/{}, steps, learning_rate_,
                    adamw_.beta1, adamw_.beta2, adamw_.weight_decay, adamw_.eps, /*amsgrad=*/false,
                    /*maximize=*/false);
}

std::vector<torch::Tensor> Optimizer::state() const {
  std::vector<torch::Tensor> state = exp_avgs_;
  state.insert(state.end(), exp_avg_sqs_.begin(), exp_avg_sqs_.end());
  state.insert(state.end(), steps_.begin(), steps_.end());
  return state;
}

std::unique_ptr<Optimizer> make_optimizer(StagedModel& model, const RunConfig& config,
                                          Optimizer::SgdKernels sgd_kernels) {
  return std::make_unique<Optimizer>(model.module().parameters(), config.optimizer, config.learning_rate, sgd_kernels);
}

int64_t tensor_bytes(const torch::Tensor& tensor) {
  return tensor.defined() ? tensor.numel() * static_cast<int64_t>(tensor.element_size()) : 0;
}

}  // namespace parbench
