// ResNets against torchvision's state_dict (tests/fixtures/torchvision_resnets.json, made by
// make_torchvision_fixture.py), output shapes and the analytic FLOP count.
#include "models/model_zoo.h"
#include "models/resnet.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <fstream>
#include <map>

namespace parbench {
namespace {

nlohmann::json torchvision_fixture() {
  std::ifstream file(std::string(PARBENCH_FIXTURE_DIR) + "/torchvision_resnets.json");
  EXPECT_TRUE(file.good()) << "missing fixture";
  return nlohmann::json::parse(file);
}

class ResNetAgainstTorchvision : public ::testing::TestWithParam<std::string> {};

TEST_P(ResNetAgainstTorchvision, StateDictKeysShapesAndParameterCount) {
  const auto expected = torchvision_fixture()["models"][GetParam()];
  auto model = make_model(GetParam(), /*num_classes=*/1000);
  auto& module = model->module();

  int64_t parameters = 0;
  for (const auto& p : module.parameters()) parameters += p.numel();
  EXPECT_EQ(parameters, expected["parameters"].get<int64_t>());

  // torchvision's state_dict: parameters and buffers, in registration order per module.
  std::map<std::string, std::vector<int64_t>> ours;
  for (const auto& item : module.named_parameters()) ours[item.key()] = item.value().sizes().vec();
  for (const auto& item : module.named_buffers()) ours[item.key()] = item.value().sizes().vec();
  ASSERT_EQ(ours.size(), expected["state_dict"].size());
  for (const auto& entry : expected["state_dict"]) {
    const auto key = entry[0].get<std::string>();
    ASSERT_TRUE(ours.count(key)) << "missing " << key;
    EXPECT_EQ(ours[key], entry[1].get<std::vector<int64_t>>()) << key;
  }
}

INSTANTIATE_TEST_SUITE_P(AllDepths, ResNetAgainstTorchvision,
                         ::testing::Values("resnet18", "resnet34", "resnet50", "resnet101", "resnet152"),
                         [](const auto& info) { return info.param; });

TEST(ResNet, Resnet50HasTorchvisionParameterCount) {
  auto model = make_model("resnet50", 1000);
  int64_t parameters = 0;
  for (const auto& p : model->module().parameters()) parameters += p.numel();
  EXPECT_EQ(parameters, 25557032);
}

TEST(ResNet, OutputShapeAndStagesComposeToForward) {
  torch::manual_seed(0);
  auto model = make_model("resnet50", /*num_classes=*/10);
  model->module().eval();
  const auto input = torch::randn({2, 3, 64, 64});
  const auto output = model->forward(input);
  EXPECT_EQ(output.sizes().vec(), (std::vector<int64_t>{2, 10}));

  std::vector<std::string> names;
  auto x = input;
  for (auto& stage : model->stages()) {
    names.push_back(stage.name);
    x = stage.forward(x);
  }
  // A stage per block, named by its module path, so that a cut may place each block.
  std::vector<std::string> expected = {"stem"};
  const std::vector<int> blocks = {3, 4, 6, 3};
  for (size_t layer = 0; layer < blocks.size(); ++layer) {
    for (int block = 0; block < blocks[layer]; ++block) {
      expected.push_back("layer" + std::to_string(layer + 1) + "." + std::to_string(block));
    }
  }
  expected.push_back("head");
  EXPECT_EQ(names, expected);
  EXPECT_TRUE(torch::allclose(x, output));
}

// Each layer is a group of its blocks, in order, and every parameter lies in exactly one stage.
TEST(ResNet, LayersGroupTheirBlocksAndStagesHoldEveryParameterOnce) {
  for (const std::string name : {"resnet18", "resnet50"}) {
    auto model = make_model(name, /*num_classes=*/10);
    const auto stages = model->stages();
    std::vector<std::string> stage_names;
    for (const auto& stage : stages) stage_names.push_back(stage.name);
    std::vector<std::string> grouped = {"stem"};
    std::vector<std::string> group_names;
    for (const auto& group : model->stage_groups()) {
      group_names.push_back(group.name);
      for (const auto& member : group.stages) EXPECT_EQ(member.rfind(group.name + ".", 0), 0u) << name << " " << member;
      grouped.insert(grouped.end(), group.stages.begin(), group.stages.end());
    }
    grouped.push_back("head");
    EXPECT_EQ(group_names, (std::vector<std::string>{"layer1", "layer2", "layer3", "layer4"})) << name;
    EXPECT_EQ(grouped, stage_names) << name;
    EXPECT_EQ(stages.size(), name == "resnet18" ? 10u : 18u) << name;

    std::map<const c10::TensorImpl*, int> owners;
    for (const auto& stage : stages) {
      for (const auto& module : stage.modules) {
        for (const auto& parameter : module->parameters()) ++owners[parameter.unsafeGetTensorImpl()];
      }
    }
    const auto parameters = model->module().parameters();
    EXPECT_EQ(owners.size(), parameters.size()) << name;
    for (const auto& parameter : parameters) EXPECT_EQ(owners[parameter.unsafeGetTensorImpl()], 1) << name;
  }
}

TEST(ResNet, InitialisationFollowsTorchvision) {
  torch::manual_seed(0);
  auto model = make_model("resnet50", 1000);
  auto* resnet = dynamic_cast<ResNetImpl*>(model.get());
  ASSERT_NE(resnet, nullptr);
  EXPECT_TRUE(torch::equal(resnet->bn1->weight, torch::ones(64)));
  EXPECT_TRUE(torch::equal(resnet->bn1->bias, torch::zeros(64)));
  // Kaiming normal, fan_out, relu: std = sqrt(2 / (out_channels * k * k)).
  const double expected_std = std::sqrt(2.0 / (64 * 7 * 7));
  EXPECT_NEAR(resnet->conv1->weight.std().item<double>(), expected_std, 0.05 * expected_std);
}

// data_parallel's replicas come from clone(): it must be a deep copy equal to the original.
TEST(ResNet, CloneCopiesWeightsBuffersModesAndAutocastIntoNewTensors) {
  torch::manual_seed(0);
  auto original = std::dynamic_pointer_cast<ResNetImpl>(make_model("resnet18", 10));
  ASSERT_NE(original, nullptr);
  original->set_autocast(torch::kBFloat16);
  original->train();
  original->layer2->eval();
  {
    torch::NoGradGuard no_grad;
    original->bn1->running_mean.uniform_();  // buffers that differ from a fresh model's
    original->fc->bias.fill_(0.25);
  }
  original->conv1->weight.set_requires_grad(false);

  auto copy = std::dynamic_pointer_cast<ResNetImpl>(original->clone());
  ASSERT_NE(copy, nullptr);
  EXPECT_EQ(copy->autocast_dtype(), std::optional<c10::ScalarType>(torch::kBFloat16));
  const auto originals = original->named_parameters();
  const auto copies = copy->named_parameters();
  ASSERT_EQ(copies.keys(), originals.keys());
  for (const auto& item : originals) {
    const auto& copied = copies[item.key()];
    EXPECT_TRUE(torch::equal(copied, item.value())) << item.key();
    EXPECT_NE(copied.data_ptr(), item.value().data_ptr()) << item.key();
    EXPECT_EQ(copied.requires_grad(), item.value().requires_grad()) << item.key();
  }
  const auto original_buffers = original->named_buffers();
  const auto copied_buffers = copy->named_buffers();
  ASSERT_EQ(copied_buffers.keys(), original_buffers.keys());
  for (const auto& item : original_buffers) {
    EXPECT_TRUE(torch::equal(copied_buffers[item.key()], item.value())) << item.key();
    EXPECT_NE(copied_buffers[item.key()].data_ptr(), item.value().data_ptr()) << item.key();
  }
  const auto copied_modules = copy->named_modules();
  for (const auto& item : original->named_modules()) {
    EXPECT_EQ(copied_modules[item.key()]->is_training(), item.value()->is_training()) << item.key();
  }
  EXPECT_FALSE(copy->layer2->is_training());
  EXPECT_TRUE(copy->layer3->is_training());

  // Training the copy leaves the original alone.
  auto before = original->fc->weight.clone();
  torch::NoGradGuard no_grad;
  copy->fc->weight.add_(1.0);
  EXPECT_TRUE(torch::equal(original->fc->weight, before));
}

TEST(Flops, Resnet50At224MatchesKnownMacs) {
  auto model = make_model("resnet50", 1000);
  const double macs = model->forward_flops_per_sample(224) / 2;
  EXPECT_NEAR(macs, 4.09e9, 0.01 * 4.09e9);
}

TEST(Flops, ScalesWithImageArea) {
  auto model = make_model("resnet50", 1000);
  // Without the classifier the count scales with the pixel count exactly at powers of two.
  const double fc = 2.0 * 2048 * 1000;
  EXPECT_NEAR((model->forward_flops_per_sample(256) - fc) / (model->forward_flops_per_sample(128) - fc), 4.0, 1e-9);
}

TEST(ModelZoo, UnknownModelNamesTheAllowedOnes) {
  try {
    make_model("resnet51", 1000);
    FAIL() << "expected an error";
  } catch (const std::invalid_argument& error) {
    EXPECT_NE(std::string(error.what()).find("resnet50"), std::string::npos);
  }
}

}  // namespace
}  // namespace parbench
