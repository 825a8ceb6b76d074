#include "benchmarks/run/batch_source.h"

#include "strategies/training.h"

namespace parbench {

BatchSource::BatchSource(const RunConfig& config, int64_t batch_size, DataMode mode, torch::Device input_device,
                         torch::Device target_device)
    : config_(config), batch_size_(batch_size), mode_(mode), input_device_(input_device), target_device_(target_device) {
  const torch::Device cpu(torch::kCPU);
  if (mode_ == DataMode::kDevice) {
    held_ = make_random_batch(config_, batch_size_, input_device_, target_device_);
  } else if (mode_ == DataMode::kPinned) {
    held_ = make_random_batch(config_, batch_size_, cpu, cpu);
    if (input_device_.is_cuda()) held_.inputs = held_.inputs.pin_memory();
    if (target_device_.is_cuda()) held_.targets = held_.targets.pin_memory();
  }
}

Batch BatchSource::next() {
  switch (mode_) {
    case DataMode::kDevice:
      return held_;
    case DataMode::kPinned:
      return {held_.inputs.to(input_device_, /*non_blocking=*/true),
              held_.targets.to(target_device_, /*non_blocking=*/true)};
    case DataMode::kHost:
    default:
      return make_random_batch(config_, batch_size_, input_device_, target_device_);
  }
}

double BatchSource::held_bytes_on(torch::Device device) const {
  double bytes = 0;
  for (const auto* tensor : {&held_.inputs, &held_.targets}) {
    if (tensor->defined() && tensor->device() == device) bytes += static_cast<double>(tensor->nbytes());
  }
  return bytes;
}

}  // namespace parbench
