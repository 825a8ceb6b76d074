// The Llama models: Hugging Face's parameter names, the parameter count against its formula and
// the published sizes, stages that compose to the whole forward, causal grouped-query attention,
// rotary positions that a slice keeps, weights drawn the same whatever came before, a tied head,
// the FLOPs of docs/METRICS.md and torchtitan's MFU. Logits and gradients against Hugging Face's
// own implementation: tests/python/test_llama_reference.py.
#include "benchmarks/cases/cases.h"
#include "benchmarks/measure/mfu.h"
#include "models/llama.h"
#include "models/llama_config_file.h"
#include "models/model_traits.h"
#include "models/model_zoo.h"
#include "strategies/strategy.h"
#include "strategies/training.h"
#include "tests/option_parsing.h"
#include "tests/parbench_process.h"
#include "tests/tensor_compare.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <set>
#include <string>

namespace parbench {
namespace {

const std::string kTiedConfig = std::string(PARBENCH_FIXTURE_DIR) + "/tinyllama-tied.json";

int64_t count_parameters(StagedModel& model) {
  int64_t total = 0;
  for (const auto& parameter : model.module().parameters()) total += parameter.numel();
  return total;
}

TEST(Llama, ParameterNamesAreHuggingFacesLlamaForCausalLM) {
  auto model = make_model("tinyllama", 1);
  const auto parameters = model->module().named_parameters();
  std::vector<std::string> expected = {"model.embed_tokens.weight"};
  for (const std::string layer : {"0", "1"}) {
    for (const std::string part : {"input_layernorm", "self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj",
                                   "self_attn.o_proj", "post_attention_layernorm", "mlp.gate_proj", "mlp.up_proj",
                                   "mlp.down_proj"}) {
      expected.push_back("model.layers." + layer + "." + part + ".weight");
    }
  }
  expected.push_back("model.norm.weight");
  expected.push_back("lm_head.weight");
  auto names = parameters.keys();
  std::sort(names.begin(), names.end());
  std::sort(expected.begin(), expected.end());
  EXPECT_EQ(names, expected);  // no biases
  // Grouped-query attention: 8 heads of 8 features, 4 kv heads.
  EXPECT_EQ(parameters["model.layers.0.self_attn.q_proj.weight"].sizes().vec(), (std::vector<int64_t>{64, 64}));
  EXPECT_EQ(parameters["model.layers.0.self_attn.k_proj.weight"].sizes().vec(), (std::vector<int64_t>{32, 64}));
  EXPECT_EQ(parameters["model.layers.0.mlp.gate_proj.weight"].sizes().vec(), (std::vector<int64_t>{128, 64}));
  EXPECT_EQ(parameters["model.layers.0.mlp.down_proj.weight"].sizes().vec(), (std::vector<int64_t>{64, 128}));
}

TEST(Llama, CountMatchesTheFormulaAndThePublishedSizes) {
  for (const std::string name : {"tinyllama"}) {
    auto model = make_model(name, 1);
    const auto& config = *find_llama_config(name);
    EXPECT_EQ(static_cast<double>(count_parameters(*model)), llama_params(config));
    EXPECT_EQ(llama_params(config) - llama_non_embedding_params(config),
              static_cast<double>(config.vocabulary * config.width));
  }
  // The published shapes, by the formula alone: Llama 3.2 1B's 1.24 B and 3B's 3.21 B (tied), Llama
  // 3.1 8B's 8.03 B and 70B's 70.55 B (untied).
  EXPECT_NEAR(llama_params(*find_llama_config("llama3-1b")) / 1e9, 1.236, 0.001);
  EXPECT_NEAR(llama_params(*find_llama_config("llama3-3b")) / 1e9, 3.213, 0.001);
  EXPECT_NEAR(llama_params(*find_llama_config("llama3-8b")) / 1e9, 8.030, 0.001);
  EXPECT_NEAR(llama_params(*find_llama_config("llama3-70b")) / 1e9, 70.554, 0.001);
  for (const std::string name : {"llama3-1b", "llama3-3b", "llama3-8b", "llama3-70b"}) {
    const auto& info = ModelRegistry::instance().get(name);
    EXPECT_EQ(info.sample.vocabulary, 128256) << name;
    EXPECT_EQ(info.sample.context, 131072) << name;
    EXPECT_EQ(info.stage_names.size(), static_cast<size_t>(find_llama_config(name)->layers + 2)) << name;
  }
  EXPECT_TRUE(find_llama_config("llama3-1b")->tied);
  EXPECT_FALSE(find_llama_config("llama3-8b")->tied);
}

TEST(Llama, SeqIsBoundedByTheModelsContext) {
  EXPECT_NO_THROW(check_sequence_length("llama3-8b", 131072));
  EXPECT_THROW(check_sequence_length("llama3-8b", 131073), std::invalid_argument);
  EXPECT_NO_THROW(parsed_options({"--models=llama3-8b", "--seq=8192"}, /*has_gpu=*/false));
  EXPECT_THROW(parsed_options({"--models=llama3-8b", "--seq=200000"}, /*has_gpu=*/false), UsageError);
}

TEST(Llama, StagesComposeToForwardAndGiveLogitsPerToken) {
  torch::manual_seed(0);
  RunConfig config;
  config.model = "tinyllama";
  config.seq_len = 16;
  fit_config_to_model(config);
  auto model = make_model(config.model, config.num_classes);
  const auto batch = make_random_batch(config, 3, torch::kCPU, torch::kCPU);
  const auto output = model->forward(batch.inputs);
  EXPECT_EQ(output.sizes().vec(), (std::vector<int64_t>{3, 16, 128}));
  auto staged = batch.inputs;
  std::vector<std::string> names;
  for (auto& stage : model->stages()) {
    staged = stage.forward(staged);
    names.push_back(stage.name);
  }
  EXPECT_TRUE(torch::allclose(staged, output));
  EXPECT_EQ(names, (std::vector<std::string>{"embed", "layers.0", "layers.1", "head"}));
  EXPECT_EQ(names, ModelRegistry::instance().get("tinyllama").stage_names);
  EXPECT_EQ(model->forward_facts().count("attention"), 1u);
}

TEST(Llama, AttentionIsCausal) {
  torch::manual_seed(0);
  auto model = make_model("tinyllama", 1);
  auto tokens = torch::randint(128, {1, 8}, torch::kLong);
  const auto before = model->forward(tokens);
  auto changed = tokens.clone();
  changed[0][5] = (changed[0][5].item<int64_t>() + 1) % 128;
  const auto after = model->forward(changed);
  EXPECT_TRUE(torch::allclose(before.narrow(1, 0, 5), after.narrow(1, 0, 5)));
  EXPECT_FALSE(torch::allclose(before.narrow(1, 5, 1), after.narrow(1, 5, 1)));
}

// A slice of a sequence, rotated at its first token's absolute position, is the whole sequence's
// rotation there; rotated from 0 instead it is not.
TEST(Llama, RotaryPositionsAreAbsoluteSoASliceKeepsItsOwn) {
  torch::manual_seed(1);
  const auto& config = *find_llama_config("tinyllama");
  const auto inv_freq = torch::tensor(llama_inverse_frequencies(config), torch::kDouble).to(torch::kFloat);
  const auto x = torch::randn({2, 3, 10, config.head_size()});
  const auto whole = llama_rotary(x, inv_freq, 0);
  const auto slice = x.narrow(2, 4, 5);
  EXPECT_LT(relative_difference(llama_rotary(slice, inv_freq, 4), whole.narrow(2, 4, 5)), 1e-6);
  EXPECT_GT(relative_difference(llama_rotary(slice, inv_freq, 0), whole.narrow(2, 4, 5)), 1e-2);
  // Position 0 is no rotation.
  EXPECT_TRUE(torch::allclose(whole.narrow(2, 0, 1), x.narrow(2, 0, 1)));
  // Rotations keep each pair's length.
  EXPECT_TRUE(torch::allclose(whole.norm(2, -1), x.norm(2, -1), 1e-5, 1e-6));
}

// Llama 3.1's scaling, as Hugging Face's _compute_llama3_parameters: tinyllama's four frequencies
// (theta 500000, head size 8) fall one in the high band (kept), one between (blended), two in the
// low band (divided by the factor 8), with an original context of 256.
TEST(Llama, Llama3RopeScalingKeepsBlendsAndStretchesByWavelength) {
  auto config = *find_llama_config("tinyllama");
  const auto scaled = llama_inverse_frequencies(config);
  config.rope_scaling.reset();
  const auto plain = llama_inverse_frequencies(config);
  ASSERT_EQ(plain.size(), 4u);
  EXPECT_DOUBLE_EQ(plain[1], 1.0 / std::pow(500000.0, 0.25));
  EXPECT_DOUBLE_EQ(scaled[0], plain[0]);  // wavelength 6.3 < 256 / 4
  const double smooth = (256 / (2 * M_PI / plain[1]) - 1) / (4 - 1);  // wavelength 167: between 64 and 256
  EXPECT_DOUBLE_EQ(scaled[1], (1 - smooth) * plain[1] / 8 + smooth * plain[1]);
  EXPECT_DOUBLE_EQ(scaled[2], plain[2] / 8);
  EXPECT_DOUBLE_EQ(scaled[3], plain[3] / 8);
}

// Each weight is drawn from (seed, name) alone: not from what was drawn before, nor where.
TEST(Llama, WeightsDependOnTheSeedAndTheNameAlone) {
  torch::manual_seed(7);
  const auto first = make_model("tinyllama", 1);
  torch::manual_seed(7);
  torch::randn({1000});  // draws in between leave the model's weights alone
  const auto second = make_model("tinyllama", 1);
  torch::manual_seed(8);
  const auto other = make_model("tinyllama", 1);
  const auto a = first->module().named_parameters(), b = second->module().named_parameters(),
             c = other->module().named_parameters();
  for (const auto& item : a) {
    EXPECT_TRUE(torch::equal(item.value(), b[item.key()])) << item.key();
    if (item.key().find("norm") == std::string::npos) EXPECT_FALSE(torch::equal(item.value(), c[item.key()])) << item.key();
  }
  // Two names give unrelated values; the spread is the one asked for, the mean near 0.
  const auto q = seeded_normal(3, "q", 1 << 20, 0.02, torch::kCPU), k = seeded_normal(3, "k", 1 << 20, 0.02, torch::kCPU);
  EXPECT_NEAR(q.std().item<double>(), 0.02, 2e-4);
  EXPECT_NEAR(q.mean().item<double>(), 0.0, 1e-4);
  EXPECT_LT(std::abs((q * k).mean().item<double>()) / (0.02 * 0.02), 0.01);
  EXPECT_LE(q.abs().max().item<double>(), 0.02 * std::sqrt(12.0) + 1e-6);  // the sum of 4 uniforms' bound
  // The first values of one stream, fixed: a change of the generator changes every model's weights.
  const auto fixed = seeded_normal(1234, "model.embed_tokens.weight", 3, 1.0, torch::kCPU);
  EXPECT_TRUE(torch::equal(fixed, seeded_normal(1234, "model.embed_tokens.weight", 3, 1.0, torch::kCPU)));
  // Norms start at 1, the projections into the residual stream smaller than the others.
  const auto p = first->module().named_parameters();
  EXPECT_TRUE(torch::equal(p["model.norm.weight"], torch::ones({64})));
  EXPECT_NEAR(p["model.layers.0.mlp.down_proj.weight"].std().item<double>(), 0.02 / 2, 2e-3);
  EXPECT_NEAR(p["model.layers.0.mlp.up_proj.weight"].std().item<double>(), 0.02, 2e-3);
}

// On a GPU: drawn there, the weights are the CPU's bit for bit.
TEST(Llama, BuiltOnAGpuHasTheCpusWeights) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "needs a GPU";
  const torch::Device gpu(torch::kCUDA, 0);
  torch::manual_seed(7);
  const auto on_cpu = make_model("tinyllama", 1);
  torch::manual_seed(7);
  const auto on_gpu = make_model("tinyllama", 1, gpu);
  const auto cpu_parameters = on_cpu->module().named_parameters();
  for (const auto& item : on_gpu->module().named_parameters()) {
    EXPECT_TRUE(item.value().is_cuda()) << item.key();
    EXPECT_TRUE(torch::equal(item.value().cpu(), cpu_parameters[item.key()])) << item.key();
  }
}

TEST(Llama, TrainingFlopsPerTokenAre6NPlus12LHhT) {
  const auto& config = *find_llama_config("tinyllama");
  // Per block: q 64x64, k and v 32x64 each, o 64x64, three 64x128 feed-forward matrices, two norms.
  const double block = 64 * 64 + 2 * 32 * 64 + 64 * 64 + 3 * 64 * 128 + 2 * 64;
  const double n = 2 * block + 64 + 128 * 64;
  EXPECT_EQ(llama_non_embedding_params(config), n);
  const double per_token = 6 * n + 12.0 * /*L*/ 2 * /*H*/ 8 * /*h*/ 8 * /*T*/ 64;
  EXPECT_DOUBLE_EQ(3 * ModelRegistry::instance().get("tinyllama").forward_flops_per_sample(64, 128) / 64, per_token);
  // torchtitan's count is the same for an untied head.
  const auto shape = transformer_shape("tinyllama");
  ASSERT_TRUE(shape.has_value());
  EXPECT_DOUBLE_EQ(torchtitan_flops_per_token(*shape, 64), per_token);
}

// mfu_torchtitan = tokens/s x (6 N + 12 L H h T) / (989e12 x GPUs), at bf16 on H100/H200 SXM only.
TEST(Llama, TorchtitanMfuIsItsFormula) {
  const auto& config = *find_llama_config("llama3-8b");
  const double n = llama_non_embedding_params(config);  // 7.50 G
  EXPECT_NEAR(n / 1e9, 7.505, 0.001);
  for (const int gpus : {1, 4}) {
    benchmark::UserCounters counters;
    add_torchtitan_mfu("NVIDIA H100 80GB HBM3", "bf16", "llama3-8b", 8192, 3000.0 * gpus, gpus, counters);
    ASSERT_EQ(counters.count("mfu_torchtitan"), 1u);
    const double expected = 3000.0 * (6 * n + 12.0 * 32 * 32 * 128 * 8192) / 989e12;
    EXPECT_DOUBLE_EQ(counters.at("mfu_torchtitan").value, expected) << gpus;
    EXPECT_NEAR(counters.at("mfu_torchtitan").value, 0.1757, 1e-4);  // 57.9 GFLOP per token x 3000 / 989 T
  }
  // A GPT: its N leaves out both embeddings.
  benchmark::UserCounters gpt;
  add_torchtitan_mfu("NVIDIA H200", "bf16", "tinygpt", 64, 1e6, 2, gpt);
  const double tinygpt_n = 2 * (12 * 32 * 32 + 13 * 32) + 2 * 32 + 96 * 32;
  EXPECT_DOUBLE_EQ(gpt.at("mfu_torchtitan").value, 1e6 * (6 * tinygpt_n + 12.0 * 2 * 4 * 8 * 64) / (989e12 * 2));
  // Not at fp32 or tf32, not on another GPU, not for an image model.
  for (const auto& [gpu, math, model] : std::vector<std::tuple<std::string, std::string, std::string>>{
           {"NVIDIA H100 80GB HBM3", "tf32", "llama3-8b"},
           {"NVIDIA H100 PCIe", "bf16", "llama3-8b"},
           {"NVIDIA H200 NVL", "bf16", "llama3-8b"},
           {"NVIDIA A100-SXM4-80GB", "bf16", "llama3-8b"},
           {"NVIDIA H100 80GB HBM3", "bf16", "resnet50"}}) {
    benchmark::UserCounters none;
    add_torchtitan_mfu(gpu, math, model, 8192, 3000.0, 1, none);
    EXPECT_EQ(none.count("mfu_torchtitan"), 0u) << gpu << " " << math << " " << model;
  }
}

// A tied head: no lm_head, the head's product through the embedding's weight, whose gradient
// gathers both uses; strategies that place stages apart skip it, saying why.
TEST(Llama, ATiedHeadIsTheEmbeddingAndStrategiesThatPlaceStagesApartSkipIt) {
  const auto name = register_llama_config_file(kTiedConfig, nullptr);
  EXPECT_EQ(name, "tinyllama-tied");
  torch::manual_seed(2);
  auto model = make_model(name, 1);
  const auto parameters = model->module().named_parameters();
  EXPECT_FALSE(parameters.contains("lm_head.weight"));
  EXPECT_EQ(parameters["model.layers.0.self_attn.q_proj.weight"].sizes().vec(), (std::vector<int64_t>{60, 48}));
  const auto tokens = torch::randint(80, {2, 6}, torch::kLong);
  const auto logits = model->forward(tokens);
  const auto* llama = dynamic_cast<LlamaImpl*>(&model->module());
  ASSERT_NE(llama, nullptr);
  EXPECT_TRUE(llama->head_weight().is_same(parameters["model.embed_tokens.weight"]));
  logits.sum().backward();
  EXPECT_TRUE(parameters["model.embed_tokens.weight"].grad().defined());

  const auto skip_reasons = [&](const std::string& strategy, const std::string& more) {
    std::vector<std::string> arguments = {"--strategies=" + strategy, "--models=" + name, "--batch=4", "--seq=8",
                                          "--gpus=2"};
    if (!more.empty()) arguments.push_back(more);
    std::vector<std::string> reasons;
    for (const auto& spec : build_cases(parsed_options(arguments, /*has_gpu=*/false), /*visible_gpus=*/2)) {
      reasons.push_back(spec.skip_reason);
    }
    return reasons;
  };
  for (const std::string strategy : {"model_parallel", "pipeline"}) {
    for (const auto& reason : skip_reasons(strategy, "")) {
      EXPECT_NE(reason.find(strategy + " places stages on separate devices"), std::string::npos) << reason;
      EXPECT_NE(reason.find("tinyllama-tied's stages share a weight: its output head is its token embedding's weight"),
                std::string::npos)
          << reason;
    }
  }
  const auto zero = skip_reasons("zero", "--zero-stages=1,2,3");
  ASSERT_EQ(zero.size(), 3u);
  EXPECT_EQ(zero[0], "");
  EXPECT_EQ(zero[1], "");
  EXPECT_NE(zero[2].find("zero stage 3 gathers and frees each stage's parameters"), std::string::npos) << zero[2];
  for (const std::string strategy : {"single", "data_parallel", "ddp"}) {
    for (const auto& reason : skip_reasons(strategy, "")) EXPECT_EQ(reason, "") << strategy;
  }
  // An untied Llama's stages own their weights.
  for (const std::string strategy : {"model_parallel", "pipeline", "zero"}) {
    for (const auto& spec : build_cases(parsed_options({"--strategies=" + strategy, "--models=tinyllama", "--batch=4",
                                                        "--seq=8", "--gpus=2"},
                                                       /*has_gpu=*/false),
                                        /*visible_gpus=*/2)) {
      EXPECT_EQ(spec.skip_reason.find("share a weight"), std::string::npos) << strategy << ": " << spec.skip_reason;
    }
  }
}

// A tied head trains under the strategies that keep the stages together: data_parallel's replicas
// (each with its own tied weight) and single take the same steps, the embedding's gradient holding
// both of its uses.
TEST(Llama, ATiedHeadTrainsUnderDataParallelAsUnderSingle) {
  const auto name = register_llama_config_file(kTiedConfig, nullptr);
  RunConfig config;
  config.model = name;
  config.batch_size = 4;
  config.seq_len = 8;
  fit_config_to_model(config);
  config.learning_rate = 0.1;
  torch::manual_seed(3);
  const auto batch = make_random_batch(config, config.batch_size, torch::kCPU, torch::kCPU);
  const auto train = [&](const std::string& strategy_name, size_t devices) {
    auto strategy = StrategyRegistry::instance().get(strategy_name).create();
    strategy->setup([&](torch::Device) {
      torch::manual_seed(11);
      return make_case_model(config);
    }, std::vector<torch::Device>(devices, torch::kCPU), config);
    double loss = 0;
    for (int step = 0; step < 2; ++step) loss = strategy->train_step(batch).item<double>();
    std::map<std::string, std::pair<torch::Tensor, torch::Tensor>> result;
    for (const auto& item : strategy->model().module().named_parameters()) {
      result[item.key()] = {item.value().detach().clone(), item.value().grad().clone()};
    }
    return std::make_pair(loss, result);
  };
  const auto single = train("single", 1);
  const auto replicated = train("data_parallel", 2);
  EXPECT_NEAR(replicated.first, single.first, 1e-5 * std::abs(single.first));
  ASSERT_EQ(replicated.second.size(), single.second.size());
  EXPECT_EQ(single.second.count("lm_head.weight"), 0u);
  for (const auto& [parameter, tensors] : single.second) {
    EXPECT_LT(relative_difference(replicated.second.at(parameter).first, tensors.first), 1e-5) << parameter;
    EXPECT_LT(relative_difference(replicated.second.at(parameter).second, tensors.second), 1e-5) << parameter;
  }
}

// The example configurations (models/configs/, Hugging Face's config.json of each, architecture
// fields only) read as the built-in flavours of the same shapes.
TEST(ModelConfig, TheExampleConfigsAreTheFlavoursShapes) {
  const std::string configs = std::string(PARBENCH_SOURCE_DIR) + "/models/configs/";
  for (const auto& [file, flavour] : std::vector<std::pair<std::string, std::string>>{
           {"llama-3.2-1b", "llama3-1b"}, {"llama-3.2-3b", "llama3-3b"}, {"llama-3.1-8b", "llama3-8b"}}) {
    std::vector<std::string> unused;
    const auto config = read_llama_config_file(configs + file + ".json", &unused);
    const auto& built_in = *find_llama_config(flavour);
    EXPECT_EQ(config.name, file);
    EXPECT_TRUE(unused.empty()) << file;
    EXPECT_EQ(llama_config_json(config), [&] {
      auto renamed = built_in;
      renamed.name = file;
      return llama_config_json(renamed);
    }()) << file;
    EXPECT_EQ(llama_params(config), llama_params(built_in)) << file;
  }
}

// A configuration file for a test: `json` written as DIR/NAME.json.
std::string write_config(const TemporaryDirectory& dir, const std::string& name, const nlohmann::json& json) {
  const auto path = dir.file(name + ".json");
  std::ofstream(path) << json.dump(2);
  return path;
}

nlohmann::json tiny_config() { return nlohmann::json::parse(llama_config_json(*find_llama_config("tinyllama"))); }

const std::vector<std::string> kSmallLlamaRun = {"--preset=cpu", "--strategies=single", "--batch=2", "--seq=8",
                                                 "--warmup=1", "--repetitions=1", "--iterations=1"};

// A good file: trained as a model named after the file, its unused fields named on one line of
// stderr (once: not again by the ranks, which read the options too), the cases in the JSON.
TEST(ModelConfig, AGoodFileTrainsAsAModelNamedAfterTheFile) {
  TemporaryDirectory dir("parbench-model-config");
  auto json = tiny_config();
  json["torch_dtype"] = "bfloat16";
  json["bos_token_id"] = 1;
  const auto path = write_config(dir, "my-llama", json);
  auto arguments = kSmallLlamaRun;
  arguments[1] = "--strategies=single,ddp";
  arguments.push_back("--allreduce=off");
  arguments.push_back("--model-config=" + path);
  arguments.push_back("--benchmark_out=" + dir.file("run.json"));
  ParbenchProcess process(arguments, {});
  const auto run = process.wait(300);
  ASSERT_EQ(run.exit_code, 0) << run.err;
  const auto expected_line = "parbench: --model-config=" + path + ": fields not used: bos_token_id, torch_dtype\n";
  EXPECT_NE(run.err.find(expected_line), std::string::npos) << run.err;
  size_t lines = 0;
  for (auto at = run.err.find("fields not used"); at != std::string::npos; at = run.err.find("fields not used", at + 1)) {
    ++lines;
  }
  EXPECT_EQ(lines, 1u) << run.err;
  const auto out = read_json(dir.file("run.json"));
  std::set<std::string> trained;
  for (const auto& benchmark : out.at("benchmarks")) {
    const auto name = benchmark.at("name").get<std::string>();
    for (const std::string strategy : {"single", "ddp"}) {
      if (name.rfind("train/" + strategy + "/my-llama/", 0) == 0) trained.insert(strategy);
    }
  }
  EXPECT_EQ(trained, (std::set<std::string>{"single", "ddp"})) << out.at("benchmarks").dump();
}

// The set-up's seconds are a counter: a case in this process, and a distributed case per rank,
// whose model build the test hook slows by 400 ms.
TEST(SetupSeconds, AreReportedForACaseAndForEachRank) {
  TemporaryDirectory dir("parbench-setup-seconds");
  auto arguments = kSmallLlamaRun;
  arguments[1] = "--strategies=single,ddp";
  arguments.push_back("--models=tinyllama");
  arguments.push_back("--allreduce=off");
  arguments.push_back("--benchmark_out=" + dir.file("run.json"));
  ParbenchProcess process(arguments, {{"PARBENCH_TEST_SLOW_MODEL_BUILD_MS", "400"}});
  const auto run = process.wait(300);
  ASSERT_EQ(run.exit_code, 0) << run.err;
  int seen = 0;
  const auto out = read_json(dir.file("run.json"));
  for (const auto& benchmark : out.at("benchmarks")) {
    const auto name = benchmark.at("name").get<std::string>();
    if (name.rfind("train/single/", 0) == 0) {
      ASSERT_TRUE(benchmark.contains("setup_s")) << benchmark.dump();
      EXPECT_GT(benchmark.at("setup_s").get<double>(), 0.0);
      ++seen;
    } else if (name.rfind("train/ddp/", 0) == 0) {
      for (const std::string rank : {"0", "1"}) {
        const auto key = benchmark.contains("setup_s") ? "setup_s" : "setup_s_rank" + rank;
        ASSERT_TRUE(benchmark.contains(key)) << benchmark.dump();
        EXPECT_GE(benchmark.at(key).get<double>(), 0.4) << key;
      }
      ++seen;
    }
  }
  EXPECT_EQ(seen, 2) << out.dump();
}

// Each kind of bad file: exit 2, one line on stderr naming the file and what is wrong, nothing
// written.
TEST(ModelConfig, EachBadFileGetsItsOneLineErrorAndExit2) {
  TemporaryDirectory dir("parbench-model-config");
  const auto changed = [](const std::function<void(nlohmann::json&)>& change) {
    auto json = tiny_config();
    change(json);
    return json;
  };
  std::vector<std::pair<std::string, std::string>> cases;  // path, what the message says
  cases.push_back({dir.file("absent.json"), "cannot read it: No such file or directory"});
  {
    const auto path = dir.file("broken.json");
    std::ofstream(path) << "{\"hidden_size\": 64,";
    cases.push_back({path, "not JSON ("});
  }
  cases.push_back({write_config(dir, "array", nlohmann::json::array({1, 2})), "not a JSON object"});
  cases.push_back({write_config(dir, "missing", changed([](auto& j) { j.erase("hidden_size"); })),
                   "no hidden_size (a whole number of at least 1 is needed)"});
  cases.push_back({write_config(dir, "fraction", changed([](auto& j) { j["num_hidden_layers"] = 2.5; })),
                   "num_hidden_layers is 2.5 (must be a whole number of at least 1)"});
  cases.push_back({write_config(dir, "text", changed([](auto& j) { j["vocab_size"] = "128"; })),
                   "vocab_size is \"128\" (must be a whole number of at least 1)"});
  cases.push_back({write_config(dir, "zero", changed([](auto& j) { j["intermediate_size"] = 0; })),
                   "intermediate_size is 0 (must be a whole number of at least 1)"});
  cases.push_back({write_config(dir, "heads", changed([](auto& j) {
                                  j["num_attention_heads"] = 6;
                                  j["num_key_value_heads"] = 2;
                                  j.erase("head_dim");
                                })),
                   "num_attention_heads 6 does not divide hidden_size 64 (give head_dim, or heads that divide the width)"});
  cases.push_back({write_config(dir, "kv-heads", changed([](auto& j) { j["num_key_value_heads"] = 3; })),
                   "num_key_value_heads 3 does not divide num_attention_heads 8"});
  cases.push_back({write_config(dir, "mistral", changed([](auto& j) { j["model_type"] = "mistral"; })),
                   "model_type \"mistral\" is not a Llama-style decoder"});
  cases.push_back({write_config(dir, "gpt2", changed([](auto& j) {
                                  j.erase("model_type");
                                  j["architectures"] = {"GPT2LMHeadModel"};
                                })),
                   "architectures [\"GPT2LMHeadModel\"] is not a Llama-style decoder"});
  cases.push_back({write_config(dir, "nameless", changed([](auto& j) {
                                  j.erase("model_type");
                                  j.erase("architectures");
                                })),
                   "names no architecture"});
  cases.push_back({write_config(dir, "biased", changed([](auto& j) { j["attention_bias"] = true; })),
                   "attention_bias is true: biases on q, k, v and o, which parbench does not model"});
  cases.push_back({write_config(dir, "mlp-biased", changed([](auto& j) { j["mlp_bias"] = true; })),
                   "mlp_bias is true: biases in the feed-forward, which parbench does not model"});
  cases.push_back({write_config(dir, "windowed", changed([](auto& j) { j["sliding_window"] = 4096; })),
                   "sliding_window is 4096: sliding-window attention, which parbench does not model"});
  cases.push_back({write_config(dir, "experts", changed([](auto& j) { j["num_local_experts"] = 8; })),
                   "num_local_experts is 8: a mixture of experts, which parbench does not model"});
  cases.push_back({write_config(dir, "yarn", changed([](auto& j) { j["rope_scaling"]["rope_type"] = "yarn"; })),
                   "rope_scaling.rope_type is \"yarn\": parbench models Llama 3.1's \"llama3\" scaling only"});
  cases.push_back({write_config(dir, "gelu", changed([](auto& j) { j["hidden_act"] = "gelu"; })),
                   "hidden_act is \"gelu\": parbench models SwiGLU"});
  cases.push_back({write_config(dir, "tinyllama", tiny_config()), "a model named 'tinyllama' exists already"});
  for (const auto& [path, what] : cases) {
    const auto out = dir.file("out.json");
    auto arguments = kSmallLlamaRun;
    arguments.push_back("--model-config=" + path);
    arguments.push_back("--benchmark_out=" + out);
    ParbenchProcess process(arguments, {});
    const auto run = process.wait(120);
    EXPECT_EQ(run.exit_code, 2) << path << ": " << run.err;
    const auto prefix = "parbench: --model-config=" + path + ": ";
    EXPECT_EQ(run.err.rfind(prefix, 0), 0u) << run.err;
    EXPECT_NE(run.err.find(what), std::string::npos) << path << ": " << run.err;
    EXPECT_EQ(std::count(run.err.begin(), run.err.end(), '\n'), 1) << run.err;
    EXPECT_EQ(access(out.c_str(), F_OK), -1) << path << ": something was written";
    EXPECT_EQ(run.out, "") << path;
  }
}

}  // namespace
}  // namespace parbench
