// A small CNN without batch-norm: per-sample independent, so splitting a batch into
// micro-batches or across ranks must not change its gradients. Used by the equivalence tests
// and the CPU smoke benchmark.
#pragma once

#include "models/staged_model.h"

namespace parbench {

class TinyCnnImpl : public StagedModule<TinyCnnImpl> {
 public:
  explicit TinyCnnImpl(int64_t num_classes);
  void reset() override;
  std::shared_ptr<TinyCnnImpl> same_architecture() const { return std::make_shared<TinyCnnImpl>(num_classes_); }

  std::string name() const override { return "tinycnn"; }
  std::vector<Stage> build_stages() override;

  torch::nn::Conv2d conv1{nullptr}, conv2{nullptr}, conv3{nullptr};
  torch::nn::Linear fc{nullptr};

 private:
  int64_t num_classes_;
};
TORCH_MODULE(TinyCnn);

}  // namespace parbench
