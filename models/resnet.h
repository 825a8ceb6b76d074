// ResNet as torchvision builds it (v1.5: stride on the 3x3 conv of the bottleneck), with
// parameter and buffer names equal to torchvision's state_dict keys.
#pragma once

#include "models/staged_model.h"

#include <array>

namespace parbench {

struct BasicBlockImpl : torch::nn::Cloneable<BasicBlockImpl> {
  static constexpr int64_t kExpansion = 1;
  BasicBlockImpl(int64_t in_planes, int64_t planes, int64_t stride);
  void reset() override;
  torch::Tensor forward(torch::Tensor x);

  int64_t in_planes, planes, stride;
  torch::nn::Conv2d conv1{nullptr}, conv2{nullptr};
  torch::nn::BatchNorm2d bn1{nullptr}, bn2{nullptr};
  torch::nn::Sequential downsample{nullptr};
};
TORCH_MODULE(BasicBlock);

struct BottleneckImpl : torch::nn::Cloneable<BottleneckImpl> {
  static constexpr int64_t kExpansion = 4;
  BottleneckImpl(int64_t in_planes, int64_t planes, int64_t stride);
  void reset() override;
  torch::Tensor forward(torch::Tensor x);

  int64_t in_planes, planes, stride;
  torch::nn::Conv2d conv1{nullptr}, conv2{nullptr}, conv3{nullptr};
  torch::nn::BatchNorm2d bn1{nullptr}, bn2{nullptr}, bn3{nullptr};
  torch::nn::Sequential downsample{nullptr};
};
TORCH_MODULE(Bottleneck);

enum class BlockKind { kBasic, kBottleneck };

// A variant is a depth table: blocks per layer and the block kind.
struct ResNetVariant {
  std::string name;
  BlockKind block;
  std::array<int64_t, 4> blocks_per_layer;
};

// resnet18, resnet34, resnet50, resnet101, resnet152.
const std::vector<ResNetVariant>& resnet_variants();

// The stem, each block (layer1.0, ..., layer4.2 for resnet50) and the head: the stages'
// names, known without building the model; and layer1..layer4, each of its blocks.
std::vector<std::string> resnet_stage_names(const ResNetVariant& variant);
std::vector<StageGroup> resnet_stage_groups(const ResNetVariant& variant);

// Forward FLOPs of one image of image_size x image_size pixels: convolutions and the
// classifier only (docs/METRICS.md), 2 per multiply-accumulate.
double resnet_forward_flops_per_sample(const ResNetVariant& variant, int64_t num_classes, int64_t image_size);

class ResNetImpl : public StagedModule<ResNetImpl> {
 public:
  // torchvision_init: false leaves the weights as LibTorch's layers create them.
  ResNetImpl(ResNetVariant variant, int64_t num_classes, bool torchvision_init = true);
  void reset() override;
  std::shared_ptr<ResNetImpl> same_architecture() const;

  std::string name() const override { return variant_.name; }
  // The stem, each block (layer1.0, ..., layer4.2 for resnet50) and the head.
  std::vector<Stage> build_stages() override;
  // layer1..layer4, each of its blocks.
  std::vector<StageGroup> stage_groups() const override;

  torch::nn::Conv2d conv1{nullptr};
  torch::nn::BatchNorm2d bn1{nullptr};
  torch::nn::Sequential layer1{nullptr}, layer2{nullptr}, layer3{nullptr}, layer4{nullptr};
  torch::nn::Linear fc{nullptr};

 private:
  void initialize_like_torchvision();
  int64_t expansion() const;
  torch::nn::Sequential make_layer(int64_t& in_planes, int64_t planes, int64_t blocks, int64_t stride) const;

  ResNetVariant variant_;
  int64_t num_classes_;
};
TORCH_MODULE(ResNet);

}  // namespace parbench
