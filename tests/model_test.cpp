// ResNets against torchvision's state_dict (tests/fixtures/torchvision_resnets.json, made by
// make_torchvision_fixture.py), output shapes and the analytic FLOP count.
#include "models/model_zoo.h"
#include "models/resnet.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <fstream>

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
  EXPECT_EQ(names, (std::vector<std::string>{"stem", "layer1", "layer2", "layer3", "layer4", "head"}));
  EXPECT_TRUE(torch::allclose(x, output));
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

TEST(Flops, Resnet50At224MatchesKnownMacs) {
  auto model = make_model("resnet50", 1000);
  const double macs = model->forward_flops_per_image(224) / 2;
  EXPECT_NEAR(macs, 4.09e9, 0.01 * 4.09e9);
}

TEST(Flops, ScalesWithImageArea) {
  auto model = make_model("resnet50", 1000);
  // Without the classifier the count scales with the pixel count exactly at powers of two.
  const double fc = 2.0 * 2048 * 1000;
  EXPECT_NEAR((model->forward_flops_per_image(256) - fc) / (model->forward_flops_per_image(128) - fc), 4.0, 1e-9);
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
