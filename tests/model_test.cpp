// ResNets against torchvision's state_dict (tests/fixtures/torchvision_resnets.json, made by
// make_torchvision_fixture.py), output shapes and the analytic FLOP count.
#include "models/activation_checkpoint.h"
#include "models/model_zoo.h"
#include "models/resnet.h"
#include "strategies/training.h"

#include <ATen/autocast_mode.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <fstream>
#include <map>
#include <optional>

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
  const auto& resnet50 = ModelRegistry::instance().get("resnet50");
  const double macs = resnet50.forward_flops_per_sample(224, /*num_classes=*/1000) / 2;
  EXPECT_NEAR(macs, 4.09e9, 0.01 * 4.09e9);
}

TEST(Flops, ScalesWithImageArea) {
  const auto flops = [](int64_t side) {
    return ModelRegistry::instance().get("resnet50").forward_flops_per_sample(side, /*num_classes=*/1000);
  };
  // Without the classifier the count scales with the pixel count exactly at powers of two.
  const double fc = 2.0 * 2048 * 1000;
  EXPECT_NEAR((flops(256) - fc) / (flops(128) - fc), 4.0, 1e-9);
}

// The FLOPs every model declared before the registry held them (models' own methods then), for
// MFU and tflops: the same numbers, exactly.
TEST(Flops, EveryModelCountsAsBeforeTheRegistry) {
  struct Pinned {
    std::string model;
    int64_t sample, classes;
    double flops;
  };
  const std::vector<Pinned> pinned = {
      {"resnet18", 128, 1000, 1185390592}, {"resnet18", 224, 10, 3627132928},
      {"resnet34", 128, 1000, 2393350144}, {"resnet34", 224, 10, 7326509056},
      {"resnet50", 128, 1000, 2673246208}, {"resnet50", 224, 10, 8174313472},
      {"resnet101", 128, 1000, 5097553920}, {"resnet101", 16, 10, 101253120},
      {"resnet152", 128, 1000, 7521861632}, {"resnet152", 224, 10, 23023198208},
      {"tinycnn", 16, 1000, 275968},       {"tinycnn", 224, 10, 41546368},
      {"gpt2-small", 1024, 10, 291970744320}, {"gpt2-medium", 1024, 10, 827708145664},
      {"tinygpt", 8, 10, 473088},          {"tinygpt", 1024, 10, 326893568},
  };
  for (const auto& [model, sample, classes, flops] : pinned) {
    EXPECT_EQ(ModelRegistry::instance().get(model).forward_flops_per_sample(sample, classes), flops)
        << model << " at " << sample << ", " << classes << " classes";
  }
}

// What a model declares is what it builds: its stages' names and groups, and a batch of its
// samples goes through it. Every registered model but the two largest GPT-2s (1.4 and 3 GB of
// weights; their stage names come from gpt_stage_names as gpt2-small's do).
TEST(ModelZoo, EachDeclarationMatchesTheModelItBuilds) {
  for (const auto* info : ModelRegistry::instance().all()) {
    // Built elsewhere or too large to build here: gpt2-xl's weights are 6.5 GB, gpt-6.7b's 27 GB,
    // llama3-1b's 4.9 GB (their stage names come from llama_stage_names as tinyllama's do).
    if (info->name == "gpt2-medium" || info->name == "gpt2-large" || info->name == "gpt2-xl" ||
        info->name == "gpt-2.7b" || info->name == "gpt-6.7b" || info->name.rfind("llama3-", 0) == 0) {
      continue;
    }
    auto model = make_model(info->name, /*num_classes=*/10);
    EXPECT_EQ(model->name(), info->name);
    std::vector<std::string> names;
    for (const auto& stage : model->stages()) names.push_back(stage.name);
    EXPECT_EQ(names, info->stage_names) << info->name;
    const auto groups = model->stage_groups();
    ASSERT_EQ(groups.size(), info->stage_groups.size()) << info->name;
    for (size_t i = 0; i < groups.size(); ++i) {
      EXPECT_EQ(groups[i].name, info->stage_groups[i].name) << info->name;
      EXPECT_EQ(groups[i].stages, info->stage_groups[i].stages) << info->name;
    }
    RunConfig config;
    config.model = info->name;
    config.num_classes = 10;
    config.image_size = info->language_model() ? 1 : info->sample.min_side;
    config.seq_len = 4;
    fit_config_to_model(config);
    const auto batch = make_random_batch(config, /*batch_size=*/2, torch::kCPU, torch::kCPU);
    if (!info->language_model()) EXPECT_EQ(batch.inputs.size(1), info->sample.channels) << info->name;
    model->module().eval();
    torch::NoGradGuard no_grad;
    const auto output = model->forward(batch.inputs);
    EXPECT_EQ(output.size(0), 2) << info->name;
    EXPECT_EQ(output.size(-1), config.num_classes) << info->name;
  }
}

TEST(ModelZoo, RefusesASecondModelUnderATakenNameAndAnIncompleteDeclaration) {
  ModelInfo twin = ModelRegistry::instance().get("tinycnn");
  EXPECT_THROW(ModelRegistry::instance().add(twin), std::logic_error);
  auto incomplete = twin;
  incomplete.name = "tinycnn-without-a-builder";
  incomplete.build = nullptr;
  EXPECT_THROW(ModelRegistry::instance().add(incomplete), std::logic_error);
  auto scattered = twin;
  scattered.name = "tinycnn-with-a-scattered-group";
  scattered.stage_groups = {{"ends", {"stem", "head"}}};
  EXPECT_THROW(ModelRegistry::instance().add(scattered), std::logic_error);
  EXPECT_EQ(ModelRegistry::instance().find(incomplete.name), nullptr);
  EXPECT_EQ(ModelRegistry::instance().find(scattered.name), nullptr);
}

TEST(ModelZoo, ListsImageModelsThenLanguageModelsInTheirOrder) {
  const auto names = model_names();
  const std::vector<std::string> shipped = {"resnet18",   "resnet34",    "resnet50",   "resnet101", "resnet152",
                                            "tinycnn",    "gpt2-small",  "gpt2-medium", "gpt2-large", "gpt2-xl",
                                            "gpt-2.7b",   "gpt-6.7b",    "tinygpt",    "llama3-1b", "llama3-3b",
                                            "llama3-8b",  "llama3-70b",  "tinyllama"};
  // This binary may hold test-only models too; parbench's own come first, in this order.
  ASSERT_GE(names.size(), shipped.size());
  EXPECT_EQ(std::vector<std::string>(names.begin(), names.begin() + static_cast<long>(shipped.size())), shipped);
}

TEST(ModelZoo, UnknownModelNamesTheAllowedOnes) {
  try {
    make_model("resnet51", 1000);
    FAIL() << "expected an error";
  } catch (const std::invalid_argument& error) {
    EXPECT_NE(std::string(error.what()).find("resnet50"), std::string::npos);
  }
}

// ---- Activation checkpointing (models/activation_checkpoint.h) --------------------------------

// A block whose backward needs an intermediate (cos saves its input): what checkpointing drops.
struct KeptIntermediate {
  torch::Tensor weight = torch::randn({4}).requires_grad_();
  std::optional<c10::weak_intrusive_ptr<c10::StorageImpl>> intermediate;
  int forwards = 0;
  torch::Tensor operator()(const torch::Tensor& x) {
    ++forwards;
    auto sine = (x * weight).sin();
    intermediate.emplace(sine.storage().getWeakStorageImpl());
    return sine.cos();
  }
};

TEST(ActivationCheckpoint, KeepsNoIntermediateAndGivesTheSameGradients) {
  torch::manual_seed(5);
  const auto input = torch::randn({3, 4}).requires_grad_();
  KeptIntermediate plain, checkpointed;
  checkpointed.weight = plain.weight.detach().clone().requires_grad_();

  const auto kept = plain(input).sum();
  EXPECT_FALSE(plain.intermediate->expired()) << "autograd keeps sin's output for cos's backward";
  const auto input_again = input.detach().clone().requires_grad_();
  const auto recomputed = checkpointed_forward([&](const torch::Tensor& x) { return checkpointed(x); }, input_again).sum();
  EXPECT_TRUE(checkpointed.intermediate->expired()) << "the checkpointed block kept its intermediate";
  EXPECT_EQ(checkpointed.forwards, 1);

  kept.backward();
  recomputed.backward();
  EXPECT_EQ(checkpointed.forwards, 2) << "the backward runs the block's forward again";
  EXPECT_TRUE(torch::equal(recomputed.detach(), kept.detach()));
  EXPECT_TRUE(torch::allclose(checkpointed.weight.grad(), plain.weight.grad(), 1e-6, 1e-6));
  EXPECT_TRUE(torch::allclose(input_again.grad(), input.grad(), 1e-6, 1e-6));
}

// The recomputation runs under the autocast its forward ran under, whatever the backward's thread
// has: a pipeline's backward runs outside the forward's autocast scope, and a model's stages may be
// made before the model's autocast is set (a pipeline's parts were: their bf16 blocks were
// recomputed in fp32, 6.4x slower on gpt2-medium, 2 H200s, and not the forward the gradients
// belong to).
TEST(ActivationCheckpoint, RecomputesUnderTheAutocastItsForwardRanUnder) {
  std::vector<std::optional<c10::ScalarType>> seen;  // each run's autocast dtype, none where off
  const auto block = [&](const torch::Tensor& x) {
    seen.push_back(at::autocast::is_autocast_enabled(torch::kCPU)
                       ? std::optional<c10::ScalarType>(at::autocast::get_autocast_dtype(torch::kCPU))
                       : std::nullopt);
    return x * 2;
  };
  const auto input = torch::ones({4}).requires_grad_();
  torch::Tensor output;
  {
    AutocastScope autocast(torch::kCPU, torch::kBFloat16);
    output = checkpointed_forward(block, input);
  }
  ASSERT_FALSE(at::autocast::is_autocast_enabled(torch::kCPU));
  output.sum().backward();
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_EQ(seen[0], std::optional<c10::ScalarType>(torch::kBFloat16));
  EXPECT_EQ(seen[1], seen[0]) << "the backward recomputed the block under another autocast";
  // Without autocast in the forward, none in the recomputation either.
  seen.clear();
  checkpointed_forward(block, input).sum().backward();
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_EQ(seen[1], std::nullopt);
}

TEST(ActivationCheckpoint, ModelsCheckpointTheirBlocksAlone) {
  for (const std::string name : {"tinycnn", "resnet18", "tinygpt"}) {
    auto model = make_model(name, 10);
    std::vector<std::string> blocks;
    for (const auto& stage : model->stages())
      if (stage.block) blocks.push_back(stage.name);
    const auto& info = ModelRegistry::instance().get(name);
    // Every stage but the first (stem, embedding) and the last (head).
    EXPECT_EQ(blocks, std::vector<std::string>(info.stage_names.begin() + 1, info.stage_names.end() - 1)) << name;
  }
}

// A whole model, its blocks recomputed: the same gradients as without (strategies: strategy_test.cpp).
TEST(ActivationCheckpoint, ACheckpointedModelGivesTheGradientsOfOneWithout) {
  RunConfig config;
  config.model = "tinygpt";
  config.batch_size = 2;
  config.seq_len = 8;
  fit_config_to_model(config);
  const auto batch = make_random_batch(config, config.batch_size, torch::kCPU, torch::kCPU);
  std::map<bool, std::vector<torch::Tensor>> gradients;
  for (const bool checkpoint : {false, true}) {
    torch::manual_seed(9);
    auto model = make_model(config.model, config.num_classes);
    model->set_checkpoint_blocks(checkpoint);
    compute_loss(model->forward(batch.inputs), batch.targets, config.loss).backward();
    for (const auto& parameter : model->module().parameters()) gradients[checkpoint].push_back(parameter.grad());
  }
  ASSERT_EQ(gradients[true].size(), gradients[false].size());
  for (size_t i = 0; i < gradients[true].size(); ++i)
    EXPECT_TRUE(torch::allclose(gradients[true][i], gradients[false][i], 1e-5, 1e-6)) << "gradient " << i;
}

}  // namespace
}  // namespace parbench
