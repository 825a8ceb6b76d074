// Comparing tensors in tests.
#pragma once

#include <torch/torch.h>

namespace parbench {

// |value - reference| / |reference| (Frobenius norms, in double, so integer buffers compare
// too); the absolute difference where the reference is zero.
inline double relative_difference(const torch::Tensor& value, const torch::Tensor& reference) {
  const double scale = reference.to(torch::kDouble).norm().item<double>();
  return (value - reference).to(torch::kDouble).norm().item<double>() / (scale > 0 ? scale : 1.0);
}

}  // namespace parbench
