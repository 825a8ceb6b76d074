#include "models/resnet.h"

#include "models/model_zoo.h"

namespace parbench {
namespace {

torch::nn::Conv2d conv(int64_t in, int64_t out, int64_t kernel_size, int64_t stride, int64_t padding) {
  return torch::nn::Conv2d(
      torch::nn::Conv2dOptions(in, out, kernel_size).stride(stride).padding(padding).bias(false));
}

torch::nn::Sequential downsample_if_needed(int64_t in_planes, int64_t out_planes, int64_t stride) {
  if (stride == 1 && in_planes == out_planes) return torch::nn::Sequential(nullptr);
  return torch::nn::Sequential(conv(in_planes, out_planes, /*kernel_size=*/1, stride, /*padding=*/0),
                               torch::nn::BatchNorm2d(out_planes));
}

// Side of a square conv output.
int64_t conv_out(int64_t side, int64_t kernel_size, int64_t stride, int64_t padding) {
  return (side + 2 * padding - kernel_size) / stride + 1;
}

// Multiply-accumulates of one square conv on one image.
double conv_macs(int64_t out_side, int64_t in_channels, int64_t out_channels, int64_t kernel_size) {
  return static_cast<double>(out_side) * out_side * in_channels * out_channels * kernel_size * kernel_size;
}

// A block's stage name, its module path as torchvision writes it: "layer1.0" for layer 0, block 0.
std::string block_name(size_t layer, size_t block) {
  return "layer" + std::to_string(layer + 1) + "." + std::to_string(block);
}

int64_t expansion_of(BlockKind block) {
  return block == BlockKind::kBottleneck ? BottleneckImpl::kExpansion : BasicBlockImpl::kExpansion;
}

}  // namespace

BasicBlockImpl::BasicBlockImpl(int64_t in_planes, int64_t planes, int64_t stride)
    : in_planes(in_planes), planes(planes), stride(stride) {
  reset();
}

void BasicBlockImpl::reset() {
  conv1 = register_module("conv1", conv(in_planes, planes, /*kernel_size=*/3, stride, /*padding=*/1));
  bn1 = register_module("bn1", torch::nn::BatchNorm2d(planes));
  conv2 = register_module("conv2", conv(planes, planes, /*kernel_size=*/3, /*stride=*/1, /*padding=*/1));
  bn2 = register_module("bn2", torch::nn::BatchNorm2d(planes));
  downsample = downsample_if_needed(in_planes, planes * kExpansion, stride);
  if (downsample) register_module("downsample", downsample);
}

torch::Tensor BasicBlockImpl::forward(torch::Tensor x) {
  auto identity = downsample ? downsample->forward(x) : x;
  auto out = torch::relu(bn1(conv1(x)));
  out = bn2(conv2(out));
  return torch::relu(out + identity);
}

BottleneckImpl::BottleneckImpl(int64_t in_planes, int64_t planes, int64_t stride)
    : in_planes(in_planes), planes(planes), stride(stride) {
  reset();
}

void BottleneckImpl::reset() {
  conv1 = register_module("conv1", conv(in_planes, planes, /*kernel_size=*/1, /*stride=*/1, /*padding=*/0));
  bn1 = register_module("bn1", torch::nn::BatchNorm2d(planes));
  // v1.5: the stride sits on the 3x3 conv, as in torchvision.
  conv2 = register_module("conv2", conv(planes, planes, /*kernel_size=*/3, stride, /*padding=*/1));
  bn2 = register_module("bn2", torch::nn::BatchNorm2d(planes));
  conv3 = register_module("conv3", conv(planes, planes * kExpansion, /*kernel_size=*/1, /*stride=*/1, /*padding=*/0));
  bn3 = register_module("bn3", torch::nn::BatchNorm2d(planes * kExpansion));
  downsample = downsample_if_needed(in_planes, planes * kExpansion, stride);
  if (downsample) register_module("downsample", downsample);
}

torch::Tensor BottleneckImpl::forward(torch::Tensor x) {
  auto identity = downsample ? downsample->forward(x) : x;
  auto out = torch::relu(bn1(conv1(x)));
  out = torch::relu(bn2(conv2(out)));
  out = bn3(conv3(out));
  return torch::relu(out + identity);
}

const std::vector<ResNetVariant>& resnet_variants() {
  static const std::vector<ResNetVariant> variants = {
      {"resnet18", BlockKind::kBasic, {2, 2, 2, 2}},
      {"resnet34", BlockKind::kBasic, {3, 4, 6, 3}},
      {"resnet50", BlockKind::kBottleneck, {3, 4, 6, 3}},
      {"resnet101", BlockKind::kBottleneck, {3, 4, 23, 3}},
      {"resnet152", BlockKind::kBottleneck, {3, 8, 36, 3}},
  };
  return variants;
}

ResNetImpl::ResNetImpl(ResNetVariant variant, int64_t num_classes, bool torchvision_init)
    : variant_(std::move(variant)), num_classes_(num_classes) {
  TORCH_CHECK(num_classes_ > 0, "num_classes must be positive, got ", num_classes_);
  reset();
  if (torchvision_init) initialize_like_torchvision();
}

std::shared_ptr<ResNetImpl> ResNetImpl::same_architecture() const {
  return std::make_shared<ResNetImpl>(variant_, num_classes_, /*torchvision_init=*/false);
}

int64_t ResNetImpl::expansion() const { return expansion_of(variant_.block); }

torch::nn::Sequential ResNetImpl::make_layer(int64_t& in_planes, int64_t planes, int64_t blocks,
                                             int64_t stride) const {
  torch::nn::Sequential layer;
  for (int64_t i = 0; i < blocks; ++i) {
    const int64_t block_stride = i == 0 ? stride : 1;
    if (variant_.block == BlockKind::kBottleneck) {
      layer->push_back(Bottleneck(in_planes, planes, block_stride));
    } else {
      layer->push_back(BasicBlock(in_planes, planes, block_stride));
    }
    in_planes = planes * expansion();
  }
  return layer;
}

void ResNetImpl::reset() {
  int64_t in_planes = 64;
  conv1 = register_module("conv1", conv(3, in_planes, /*kernel_size=*/7, /*stride=*/2, /*padding=*/3));
  bn1 = register_module("bn1", torch::nn::BatchNorm2d(in_planes));
  const auto& blocks = variant_.blocks_per_layer;
  layer1 = register_module("layer1", make_layer(in_planes, 64, blocks[0], /*stride=*/1));
  layer2 = register_module("layer2", make_layer(in_planes, 128, blocks[1], /*stride=*/2));
  layer3 = register_module("layer3", make_layer(in_planes, 256, blocks[2], /*stride=*/2));
  layer4 = register_module("layer4", make_layer(in_planes, 512, blocks[3], /*stride=*/2));
  fc = register_module("fc", torch::nn::Linear(512 * expansion(), num_classes_));
}

// Not part of reset(): copies made by clone() (data_parallel's replicas) overwrite the weights.
void ResNetImpl::initialize_like_torchvision() {
  // Kaiming-normal (fan_out, relu) convs, BN weight 1 and bias 0; fc keeps nn.Linear's default.
  torch::NoGradGuard no_grad;
  for (auto& module : modules(/*include_self=*/false)) {
    if (auto* c = module->as<torch::nn::Conv2d>()) {
      torch::nn::init::kaiming_normal_(c->weight, /*a=*/0, torch::kFanOut, torch::kReLU);
    } else if (auto* bn = module->as<torch::nn::BatchNorm2d>()) {
      torch::nn::init::ones_(bn->weight);
      torch::nn::init::zeros_(bn->bias);
    }
  }
}

std::vector<Stage> ResNetImpl::build_stages() {
  std::vector<Stage> stages;
  stages.push_back({"stem", {conv1.ptr(), bn1.ptr()}, [this](const torch::Tensor& x) {
                      return torch::max_pool2d(torch::relu(bn1(conv1(x))), /*kernel_size=*/3, /*stride=*/2,
                                               /*padding=*/1);
                    }});
  const std::array<torch::nn::Sequential*, 4> layers = {&layer1, &layer2, &layer3, &layer4};
  for (size_t layer = 0; layer < layers.size(); ++layer) {
    const auto& blocks = *layers[layer];
    for (size_t index = 0; index < blocks->size(); ++index) {
      std::function<torch::Tensor(const torch::Tensor&)> forward;
      if (variant_.block == BlockKind::kBottleneck) {
        forward = [block = blocks->ptr<BottleneckImpl>(index)](const torch::Tensor& x) { return block->forward(x); };
      } else {
        forward = [block = blocks->ptr<BasicBlockImpl>(index)](const torch::Tensor& x) { return block->forward(x); };
      }
      stages.push_back({block_name(layer, index), {blocks->ptr(index)}, std::move(forward), /*block=*/true});
    }
  }
  stages.push_back({"head", {fc.ptr()}, [this](const torch::Tensor& x) {
                      return fc(torch::flatten(torch::adaptive_avg_pool2d(x, {1, 1}), /*start_dim=*/1));
                    }});
  return stages;
}

std::vector<StageGroup> ResNetImpl::stage_groups() const { return resnet_stage_groups(variant_); }

std::vector<StageGroup> resnet_stage_groups(const ResNetVariant& variant) {
  std::vector<StageGroup> groups;
  for (size_t layer = 0; layer < variant.blocks_per_layer.size(); ++layer) {
    StageGroup group{"layer" + std::to_string(layer + 1), {}};
    for (int64_t block = 0; block < variant.blocks_per_layer[layer]; ++block) {
      group.stages.push_back(block_name(layer, static_cast<size_t>(block)));
    }
    groups.push_back(std::move(group));
  }
  return groups;
}

std::vector<std::string> resnet_stage_names(const ResNetVariant& variant) {
  std::vector<std::string> names = {"stem"};
  for (const auto& group : resnet_stage_groups(variant)) names.insert(names.end(), group.stages.begin(), group.stages.end());
  names.push_back("head");
  return names;
}

double resnet_forward_flops_per_sample(const ResNetVariant& variant, int64_t num_classes, int64_t image_size) {
  // Convolutions and the classifier only (batch-norm, ReLU and pooling are < 1% of ResNet's
  // work); one multiply-accumulate counts as 2 FLOPs. docs/METRICS.md defines it.
  double macs = 0;
  int64_t side = conv_out(image_size, /*kernel_size=*/7, /*stride=*/2, /*padding=*/3);
  macs += conv_macs(side, 3, 64, 7);
  side = conv_out(side, /*kernel_size=*/3, /*stride=*/2, /*padding=*/1);  // max pool
  int64_t in_planes = 64;
  const std::array<int64_t, 4> planes_per_layer = {64, 128, 256, 512};
  for (size_t layer = 0; layer < 4; ++layer) {
    const int64_t planes = planes_per_layer[layer];
    for (int64_t block = 0; block < variant.blocks_per_layer[layer]; ++block) {
      const int64_t stride = (layer > 0 && block == 0) ? 2 : 1;
      const int64_t out_side = conv_out(side, 3, stride, 1);
      const int64_t out_planes = planes * expansion_of(variant.block);
      if (variant.block == BlockKind::kBottleneck) {
        macs += conv_macs(side, in_planes, planes, 1);
        macs += conv_macs(out_side, planes, planes, 3);
        macs += conv_macs(out_side, planes, out_planes, 1);
      } else {
        macs += conv_macs(out_side, in_planes, planes, 3);
        macs += conv_macs(out_side, planes, planes, 3);
      }
      if (stride != 1 || in_planes != out_planes) macs += conv_macs(out_side, in_planes, out_planes, 1);
      in_planes = out_planes;
      side = out_side;
    }
  }
  macs += static_cast<double>(in_planes) * num_classes;
  return 2.0 * macs;
}

namespace {

// The network's total stride: smaller inputs collapse to 1x1 before layer4.
constexpr int64_t kMinImageSide = 32;

// Each variant, listed in depth order.
std::vector<ModelInfo> resnet_models() {
  std::vector<ModelInfo> models;
  int position = 10;
  for (const auto& variant : resnet_variants()) {
    models.push_back(ModelInfo::named(variant.name)
                         .listed_at(position++)
                         .takes_images(/*channels=*/3, /*min_side=*/kMinImageSide)
                         .with_stages(resnet_stage_names(variant), resnet_stage_groups(variant))
                         .with_forward_flops([variant](int64_t image_size, int64_t num_classes) {
                           return resnet_forward_flops_per_sample(variant, num_classes, image_size);
                         })
                         // Convolutions: cuDNN's TF32 switch decides their arithmetic.
                         .fp32_runs_on(Fp32Engine::kCudnnConvolution)
                         .built_by([variant](int64_t num_classes, torch::Device device) -> ModelPtr {
                           auto model = std::make_shared<ResNetImpl>(variant, num_classes);
                           model->to(device);  // at most ResNet-152's 60M parameters on the host
                           return model;
                         }));
  }
  return models;
}

PARBENCH_REGISTER_MODEL(resnet_models());

}  // namespace

}  // namespace parbench
