// The GPT models: GPT-2's parameter names, the parameter count against its formula, output
// shapes, stages that compose to the whole forward, and the FLOP count of docs/METRICS.md.
#include "models/gpt.h"
#include "models/model_zoo.h"
#include "models/token_cross_entropy.h"
#include "strategies/training.h"
#include "tests/tensor_compare.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <string>

namespace parbench {
namespace {

int64_t count_parameters(StagedModel& model, const std::function<bool(const std::string&)>& counted) {
  int64_t total = 0;
  for (const auto& item : model.module().named_parameters()) {
    if (counted(item.key())) total += item.value().numel();
  }
  return total;
}

class GptParameters : public ::testing::TestWithParam<std::string> {};

TEST_P(GptParameters, CountMatchesTheFormula) {
  const auto& config = *find_gpt_config(GetParam());
  auto model = make_model(GetParam(), /*num_classes=*/1);
  const auto non_embedding = count_parameters(*model, [](const std::string& name) {
    return name.rfind("wte.", 0) != 0 && name.rfind("wpe.", 0) != 0;
  });
  EXPECT_EQ(static_cast<double>(non_embedding), gpt_non_embedding_params(config));
  const auto all = count_parameters(*model, [](const std::string&) { return true; });
  EXPECT_EQ(all, non_embedding + (config.vocabulary + config.context) * config.width);
}

INSTANTIATE_TEST_SUITE_P(Configs, GptParameters, ::testing::Values("tinygpt", "gpt2-small"),
                         [](const auto& info) {
                           auto name = info.param;
                           std::replace(name.begin(), name.end(), '-', '_');
                           return name;
                         });

TEST(Gpt, Gpt2SmallHasTheKnownNonEmbeddingCount) {
  // GPT-2 small's 85.05M in its blocks, its final LayerNorm and the untied 50304 x 768 head.
  EXPECT_EQ(gpt_non_embedding_params(*find_gpt_config("gpt2-small")), 123689472.0);
}

// The shapes beyond gpt2-large, by the formula alone (building them takes GBs): their blocks hold
// L (12 d^2 + 13 d) parameters, so gpt2-xl's are GPT-2 XL's 1.47B and the GPT-3 shapes' 2.52B and
// 6.44B; all with the untied head and the embeddings, 1.64B, 2.78B and 6.86B.
TEST(Gpt, LargerShapesHaveTheirKnownSizes) {
  const auto all_parameters = [](const std::string& name) {
    const auto& config = *find_gpt_config(name);
    return gpt_non_embedding_params(config) + static_cast<double>((config.vocabulary + config.context) * config.width);
  };
  EXPECT_NEAR(all_parameters("gpt2-xl") / 1e9, 1.64, 0.01);
  EXPECT_NEAR(all_parameters("gpt-2.7b") / 1e9, 2.78, 0.01);
  EXPECT_NEAR(all_parameters("gpt-6.7b") / 1e9, 6.86, 0.01);
  EXPECT_EQ(find_gpt_config("gpt-6.7b")->heads, 32);
  EXPECT_EQ(find_gpt_config("gpt2-xl")->width % find_gpt_config("gpt2-xl")->heads, 0);
}

// The process's peak resident memory (VmHWM) in bytes, from /proc/self/status; -1 where unknown.
double peak_resident_bytes() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmHWM:", 0) == 0) return std::stod(line.substr(6)) * 1024.0;  // "VmHWM:  123 kB"
  }
  return -1;
}

// On a GPU: a GPT built there has the weights it has when built on the CPU from the same seed,
// and the host never holds it whole: building gpt2-large (3.1 GB of fp32 weights) on the GPU
// raises the process's peak resident memory by less than 1 GiB (its largest piece, the token
// embedding, is 0.26 GB).
TEST(Gpt, BuiltOnAGpuHasTheCpusWeightsAndNeverSitsWholeOnTheHost) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "needs a GPU";
  const torch::Device gpu(torch::kCUDA, 0);
  torch::manual_seed(7);
  const auto on_cpu = make_model("tinygpt", 1);
  torch::manual_seed(7);
  const auto on_gpu = make_model("tinygpt", 1, gpu);
  const auto cpu_parameters = on_cpu->module().named_parameters();
  const auto gpu_parameters = on_gpu->module().named_parameters();
  ASSERT_EQ(cpu_parameters.size(), gpu_parameters.size());
  for (size_t i = 0; i < cpu_parameters.size(); ++i) {
    EXPECT_EQ(gpu_parameters[i].key(), cpu_parameters[i].key());
    EXPECT_TRUE(gpu_parameters[i].value().is_cuda()) << gpu_parameters[i].key();
    EXPECT_TRUE(torch::equal(gpu_parameters[i].value().cpu(), cpu_parameters[i].value())) << gpu_parameters[i].key();
  }

  // Writing 5 to clear_refs resets VmHWM to the current resident size (Linux 4.0 on).
  FILE* clear = std::fopen("/proc/self/clear_refs", "w");
  const bool reset = clear != nullptr && std::fputs("5", clear) >= 0 && std::fclose(clear) == 0;
  if (!reset) GTEST_SKIP() << "/proc/self/clear_refs cannot be written here: the peak resident memory cannot be reset";
  const double before = peak_resident_bytes();
  ASSERT_GT(before, 0.0);
  const auto large = make_model("gpt2-large", 1, gpu);
  const double weights = static_cast<double>(count_parameters(*large, [](const std::string&) { return true; })) * 4;
  ASSERT_GT(weights, 3e9);
  EXPECT_LT(peak_resident_bytes() - before, 1024.0 * 1024 * 1024)
      << "the host's peak grew by more than 1 GiB while " << weights / 1e9 << " GB of weights were built on the GPU";
}

TEST(Gpt, ParameterNamesAreGpt2Checkpoints) {
  auto model = make_model("tinygpt", 1);
  const auto parameters = model->module().named_parameters();
  for (const std::string name : {"wte.weight", "wpe.weight", "h.0.ln_1.weight", "h.0.ln_1.bias",
                                 "h.0.attn.c_attn.weight", "h.0.attn.c_attn.bias", "h.0.attn.c_proj.weight",
                                 "h.0.ln_2.weight", "h.0.mlp.c_fc.weight", "h.0.mlp.c_proj.bias",
                                 "h.1.mlp.c_proj.weight", "ln_f.weight", "ln_f.bias", "lm_head.weight"}) {
    EXPECT_TRUE(parameters.contains(name)) << name;
  }
  EXPECT_FALSE(parameters.contains("lm_head.bias"));
}

TEST(Gpt, StagesComposeToForwardAndGiveLogitsPerToken) {
  torch::manual_seed(0);
  RunConfig config;
  config.model = "tinygpt";
  config.seq_len = 16;
  fit_config_to_model(config);
  EXPECT_EQ(config.loss, LossKind::kCrossEntropy);
  auto model = make_model(config.model, config.num_classes);
  const auto batch = make_random_batch(config, 3, torch::kCPU, torch::kCPU);
  ASSERT_EQ(batch.inputs.sizes().vec(), (std::vector<int64_t>{3, 16}));
  // The targets are the inputs shifted by one token.
  EXPECT_TRUE(torch::equal(batch.inputs.narrow(1, 1, 15), batch.targets.narrow(1, 0, 15)));
  const auto output = model->forward(batch.inputs);
  EXPECT_EQ(output.sizes().vec(), (std::vector<int64_t>{3, 16, 96}));
  auto staged = batch.inputs;
  for (auto& stage : model->stages()) staged = stage.forward(staged);
  EXPECT_TRUE(torch::allclose(staged, output));
  const auto names = gpt_stage_names(*find_gpt_config("tinygpt"));
  EXPECT_EQ(names, (std::vector<std::string>{"embed", "h.0", "h.1", "head"}));
  // The attention kernel that ran is recorded.
  EXPECT_EQ(model->forward_facts().count("attention"), 1u);
}

TEST(Gpt, AttentionIsCausal) {
  // A token's logits depend on the tokens before it only.
  torch::manual_seed(0);
  auto model = make_model("tinygpt", 1);
  auto tokens = torch::randint(96, {1, 8}, torch::kLong);
  const auto before = model->forward(tokens);
  auto changed = tokens.clone();
  changed[0][5] = (changed[0][5].item<int64_t>() + 1) % 96;
  const auto after = model->forward(changed);
  EXPECT_TRUE(torch::allclose(before.narrow(1, 0, 5), after.narrow(1, 0, 5)));
  EXPECT_FALSE(torch::allclose(before.narrow(1, 5, 1), after.narrow(1, 5, 1)));
}

TEST(Gpt, TrainingFlopsPerTokenAre6NPlus12LdT) {
  const auto& tinygpt = ModelRegistry::instance().get("tinygpt");
  const double n = gpt_non_embedding_params(*find_gpt_config("tinygpt"));
  const double per_token = 6 * n + 12.0 * /*L*/ 2 * /*d*/ 32 * /*T*/ 64;
  EXPECT_DOUBLE_EQ(3 * tinygpt.forward_flops_per_sample(64, /*num_classes=*/96) / 64, per_token);
}

}  // namespace
}  // namespace parbench

namespace parbench {
namespace {

// The chunked cross-entropy against PyTorch's on fp32 logits: the same loss and gradient, in one
// chunk and in chunks of 3 rows (the last one short), fp32 and bf16 logits (the gradient then
// bf16, within its rounding). A wrong chunk offset, a missing one-hot or a sum for the mean is
// off by far more.
// A language model's loss is PyTorch's cross-entropy, and the chunked one under checkpointing.
TEST(TokenCrossEntropy, IsTheLanguageModelsLossUnderCheckpointingOnly) {
  RunConfig config;
  config.model = "tinygpt";
  fit_config_to_model(config);
  EXPECT_EQ(config.loss, LossKind::kCrossEntropy);
  config.checkpoint = Checkpointing::kBlocks;
  fit_config_to_model(config);
  EXPECT_EQ(config.loss, LossKind::kTokenCrossEntropyChunked);
  config.model = "resnet18";
  config.loss = LossKind::kMse;
  fit_config_to_model(config);
  EXPECT_EQ(config.loss, LossKind::kMse);
  // Both losses agree.
  torch::manual_seed(5);
  const auto logits = torch::randn({2, 4, 9});
  const auto targets = torch::randint(9, {2, 4}, torch::kLong);
  EXPECT_NEAR(compute_loss(logits, targets, LossKind::kTokenCrossEntropyChunked).item<double>(),
              compute_loss(logits, targets, LossKind::kCrossEntropy).item<double>(), 1e-6);
}

TEST(TokenCrossEntropy, MatchesCrossEntropyOnFp32LogitsInAnyChunksAndDtypes) {
  torch::manual_seed(3);
  const int64_t tokens = 11, vocabulary = 37;
  const auto reference_logits = (torch::randn({tokens, vocabulary}) * 4).requires_grad_();
  const auto targets = torch::randint(vocabulary, {tokens}, torch::kLong);
  const auto reference = torch::nn::functional::cross_entropy(reference_logits, targets);
  reference.backward(torch::full({}, 0.5));
  const auto before = reference_logits.detach().clone();
  for (const auto dtype : {torch::kFloat32, torch::kBFloat16}) {
    for (const int64_t chunk : {kCrossEntropyChunkElements, 3 * vocabulary}) {
      const auto logits = reference_logits.detach().to(dtype).clone().requires_grad_();
      const auto loss = token_cross_entropy(logits, targets, chunk);
      loss.backward(torch::full({}, 0.5));
      const bool bf16 = dtype == torch::kBFloat16;
      // bf16 logits are rounded before either loss sees them: compare against the rounded ones.
      const auto rounded = logits.detach().to(torch::kFloat32).clone().requires_grad_();
      const auto expected = torch::nn::functional::cross_entropy(rounded, targets);
      expected.backward(torch::full({}, 0.5));
      EXPECT_NEAR(loss.item<double>(), expected.item<double>(), 1e-5) << dtype << " chunk " << chunk;
      EXPECT_EQ(logits.grad().scalar_type(), dtype);
      EXPECT_LT(relative_difference(logits.grad().to(torch::kFloat32), rounded.grad()), bf16 ? 1e-2 : 1e-5)
          << dtype << " chunk " << chunk;
      if (!bf16) EXPECT_LT(relative_difference(logits.grad(), reference_logits.grad()), 1e-5);
    }
  }
  // The saved logits are left as they were.
  const auto logits = reference_logits.detach().clone().requires_grad_();
  token_cross_entropy(logits, targets, 3 * vocabulary).backward();
  EXPECT_TRUE(torch::equal(logits.detach(), before));
  EXPECT_THROW(token_cross_entropy(reference_logits, targets.unsqueeze(0)), c10::Error);
}

}  // namespace
}  // namespace parbench
