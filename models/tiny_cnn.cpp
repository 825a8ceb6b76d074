#include "models/tiny_cnn.h"

#include "models/model_zoo.h"

namespace parbench {
namespace {

constexpr int64_t kWidth1 = 8, kWidth2 = 16, kWidth3 = 32;

torch::nn::Conv2d conv3x3(int64_t in, int64_t out, int64_t stride) {
  return torch::nn::Conv2d(torch::nn::Conv2dOptions(in, out, /*kernel_size=*/3).stride(stride).padding(1));
}

int64_t halve(int64_t side) { return (side - 1) / 2 + 1; }

}  // namespace

TinyCnnImpl::TinyCnnImpl(int64_t num_classes) : num_classes_(num_classes) {
  TORCH_CHECK(num_classes_ > 0, "num_classes must be positive, got ", num_classes_);
  reset();
}

void TinyCnnImpl::reset() {
  conv1 = register_module("conv1", conv3x3(3, kWidth1, /*stride=*/2));
  conv2 = register_module("conv2", conv3x3(kWidth1, kWidth2, /*stride=*/2));
  conv3 = register_module("conv3", conv3x3(kWidth2, kWidth3, /*stride=*/1));
  fc = register_module("fc", torch::nn::Linear(kWidth3, num_classes_));
}

std::vector<Stage> TinyCnnImpl::build_stages() {
  return {
      {"stem", {conv1.ptr()}, [this](const torch::Tensor& x) { return torch::relu(conv1(x)); }},
      {"block1", {conv2.ptr()}, [this](const torch::Tensor& x) { return torch::relu(conv2(x)); }, /*block=*/true},
      {"block2", {conv3.ptr()}, [this](const torch::Tensor& x) { return torch::relu(conv3(x)); }, /*block=*/true},
      {"head", {fc.ptr()},
       [this](const torch::Tensor& x) {
         return fc(torch::flatten(torch::adaptive_avg_pool2d(x, {1, 1}), /*start_dim=*/1));
       }},
  };
}

namespace {

// Convolutions and the classifier, 2 FLOPs per multiply-accumulate.
double forward_flops_per_sample(int64_t image_size, int64_t num_classes) {
  const double side1 = halve(image_size), side2 = halve(side1);
  const double macs = side1 * side1 * 3 * kWidth1 * 9 + side2 * side2 * kWidth1 * kWidth2 * 9 +
                      side2 * side2 * kWidth2 * kWidth3 * 9 + kWidth3 * num_classes;
  return 2.0 * macs;
}

PARBENCH_REGISTER_MODEL(ModelInfo::named("tinycnn")
                            .listed_at(20)
                            .takes_images(/*channels=*/3, /*min_side=*/8)
                            .with_stages({"stem", "block1", "block2", "head"})
                            .with_forward_flops(forward_flops_per_sample)
                            .fp32_runs_on(Fp32Engine::kCudnnConvolution)
                            .built_by([](int64_t num_classes, torch::Device device) -> ModelPtr {
                              auto model = std::make_shared<TinyCnnImpl>(num_classes);
                              model->to(device);
                              return model;
                            }));

}  // namespace

}  // namespace parbench
