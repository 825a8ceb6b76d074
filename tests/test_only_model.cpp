// A model that exists only in tests, registered from this file alone as parbench's own models are
// (docs/EXTENDING.md, "A model"): a small MLP on one-channel images, average-pooled to 4x4
// first, in four stages (input, hidden1, hidden2, output) with one group (hidden). No batch-norm,
// so every sample is independent and splitting a batch does not change its gradients.
// tests/test_only_model_test.cpp checks that option parsing reads its declaration without
// building it, and that it trains as single does under every strategy, ddp's CPU ranks included
// (in parbench_with_test_model, a parbench built with this file).
#include "tests/test_only_model.h"

#include "models/model_zoo.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <unistd.h>

namespace parbench {
namespace test_only_model {

const char* const kName = "test_only_mlp";

namespace {

constexpr int64_t kChannels = 1;
constexpr int64_t kPooled = 4;  // the side the image is pooled to, and so the smallest it accepts
constexpr int64_t kWidth = 16;

std::atomic<int> build_count{0};

class TestOnlyMlpImpl : public StagedModule<TestOnlyMlpImpl> {
 public:
  explicit TestOnlyMlpImpl(int64_t num_classes) : num_classes_(num_classes) { reset(); }

  void reset() override {
    input = register_module("input", torch::nn::Linear(kChannels * kPooled * kPooled, kWidth));
    hidden1 = register_module("hidden1", torch::nn::Linear(kWidth, kWidth));
    hidden2 = register_module("hidden2", torch::nn::Linear(kWidth, kWidth));
    output = register_module("output", torch::nn::Linear(kWidth, num_classes_));
  }
  std::shared_ptr<TestOnlyMlpImpl> same_architecture() const {
    return std::make_shared<TestOnlyMlpImpl>(num_classes_);
  }

  std::string name() const override { return kName; }
  std::vector<Stage> build_stages() override {
    return {
        {"input", {input.ptr()},
         [this](const torch::Tensor& x) {
           return torch::relu(input(torch::flatten(torch::adaptive_avg_pool2d(x, {kPooled, kPooled}), /*start_dim=*/1)));
         }},
        {"hidden1", {hidden1.ptr()}, [this](const torch::Tensor& x) { return torch::relu(hidden1(x)); }},
        {"hidden2", {hidden2.ptr()}, [this](const torch::Tensor& x) { return torch::relu(hidden2(x)); }},
        {"output", {output.ptr()}, [this](const torch::Tensor& x) { return output(x); }},
    };
  }
  std::vector<StageGroup> stage_groups() const override { return {{"hidden", {"hidden1", "hidden2"}}}; }

  torch::nn::Linear input{nullptr}, hidden1{nullptr}, hidden2{nullptr}, output{nullptr};

 private:
  int64_t num_classes_;
};

ModelPtr build(int64_t num_classes, torch::Device device) {
  ++build_count;
  if (const char* log = std::getenv(kBuildLogVariable); log != nullptr && *log != '\0') {
    if (FILE* file = std::fopen(log, "a")) {
      std::fprintf(file, "%d\n", static_cast<int>(getpid()));
      std::fclose(file);
    }
  }
  auto model = std::make_shared<TestOnlyMlpImpl>(num_classes);
  model->to(device);
  return model;
}

PARBENCH_REGISTER_MODEL(ModelInfo::named(kName)
                            .listed_at(100)
                            .takes_images(kChannels, /*min_side=*/kPooled)
                            .with_stages({"input", "hidden1", "hidden2", "output"}, {{"hidden", {"hidden1", "hidden2"}}})
                            .with_forward_flops([](int64_t /*image_size*/, int64_t num_classes) {
                              // The linear layers, 2 FLOPs per multiply-accumulate (pooling left out).
                              return 2.0 * (kChannels * kPooled * kPooled * kWidth + 2 * kWidth * kWidth +
                                            kWidth * num_classes);
                            })
                            .fp32_runs_on(Fp32Engine::kCublasMatmul)
                            .built_by(build));

}  // namespace

int builds() { return build_count.load(); }

}  // namespace test_only_model
}  // namespace parbench
