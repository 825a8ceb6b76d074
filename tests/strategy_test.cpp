// Splitting a model changes the speed, not the math: every strategy that runs in one
// process gives single's loss, gradients and updated weights (CPU "devices").
#include "core/text.h"
#include "models/model_zoo.h"
#include "strategies/ddp_options.h"
#include "strategies/partition.h"
#include "strategies/prediction.h"
#include "strategies/optimizer.h"
#include "strategies/pipeline_schedule.h"
#include "strategies/stage_timing.h"
#include "strategies/staged_options.h"
#include "strategies/strategy.h"
#include "strategies/training.h"
#include "tests/case_options.h"
#include "tests/split_equivalence.h"
#include "tests/tensor_compare.h"

#include <gtest/gtest.h>

#include <functional>
#include <limits>
#include <numeric>
#include <type_traits>

namespace parbench {
namespace {

constexpr double kTolerance = 1e-5;  // relative, per tensor

struct StepResult {
  double loss = 0;
  std::map<std::string, torch::Tensor> grads, weights;
};

// A model with the weights every strategy in these tests starts from, its parameters and
// buffers in `dtype`.
ModelPtr seeded_model(const RunConfig& config, bool eval_mode, torch::Dtype dtype = torch::kFloat) {
  torch::manual_seed(1234);
  auto model = make_case_model(config);  // its blocks checkpointed where config says
  if (eval_mode) model->module().eval();
  model->module().to(dtype);
  return model;
}

// `steps` training steps of `strategy_name` on CPU devices, the model and inputs in `dtype`: the
// last loss, the gradients of the last step and the weights after it.
StepResult train(const std::string& strategy_name, RunConfig config, size_t num_devices, const Batch& batch,
                 bool eval_mode, int steps = 1, torch::Dtype dtype = torch::kFloat) {
  auto strategy = StrategyRegistry::instance().get(strategy_name).create();
  strategy->setup([&](torch::Device) { return seeded_model(config, eval_mode, dtype); },
                  std::vector<torch::Device>(num_devices, torch::kCPU), config);
  // A language model's token ids stay integers.
  const Batch typed{batch.inputs.is_floating_point() ? batch.inputs.to(dtype) : batch.inputs, batch.targets};
  StepResult result;
  for (int step = 0; step < steps; ++step) result.loss = strategy->train_step(typed).item<double>();
  for (const auto& item : strategy->model().module().named_parameters()) {
    result.grads[item.key()] = item.value().grad().clone();
    result.weights[item.key()] = item.value().detach().clone();
  }
  return result;
}

void expect_same_step(const StepResult& value, const StepResult& reference, const std::string& what,
                      double weight_tolerance = kTolerance) {
  EXPECT_NEAR(value.loss, reference.loss, kTolerance * std::abs(reference.loss)) << what;
  for (const auto& [name, grad] : reference.grads) {
    EXPECT_LT(relative_difference(value.grads.at(name), grad), kTolerance) << what << " grad " << name;
    EXPECT_LT(relative_difference(value.weights.at(name), reference.weights.at(name)), weight_tolerance)
        << what << " weight " << name;
  }
}

// One AdamW step from fresh moments moves each weight by lr * g / (|g| + eps): about the learning
// rate whatever the gradient's size, with the gradient's sign. Where a gradient is rounding noise
// (|g| ~ 1e-8 in a tensor of norm ~20: most of eval-mode resnet50's), two correct runs that sum
// in another order can round it to either sign, and move that weight apart by up to 2 * lr
// (measured: a 1.05e-5 relative difference on one CI host, 2e-6 on another). So the weights are
// compared where the two runs' gradients agree to 1%, at kTolerance; elsewhere each must be within
// 2 * lr, and such elements must stay rare. A missed, doubled or mis-corrected update moves every
// weight by a large part of lr, which the settled elements show.
void expect_same_adamw_first_step(const StepResult& value, const StepResult& reference, const std::string& what,
                                  double learning_rate) {
  constexpr double kAgreement = 1e-2;      // per element, relative
  constexpr double kMaxUnsettled = 1e-2;   // share of a tensor's elements (measured: up to 1e-3)
  EXPECT_NEAR(value.loss, reference.loss, kTolerance * std::abs(reference.loss)) << what;
  for (const auto& [name, grad] : reference.grads) {
    const auto& value_grad = value.grads.at(name);
    EXPECT_LT(relative_difference(value_grad, grad), kTolerance) << what << " grad " << name;
    const auto unsettled = (value_grad - grad).abs() > kAgreement * grad.abs();
    const auto weight = reference.weights.at(name);
    const auto difference = value.weights.at(name) - weight;
    const double settled_difference = difference.masked_fill(unsettled, 0).to(torch::kDouble).norm().item<double>();
    EXPECT_LT(settled_difference, kTolerance * weight.to(torch::kDouble).norm().item<double>())
        << what << " weight " << name << " where the gradients agree";
    EXPECT_LE(difference.abs().max().item<double>(), 2 * learning_rate * (1 + kTolerance))
        << what << " weight " << name << " moved apart by more than 2 * lr";
    EXPECT_LE(unsettled.sum().item<double>(), kMaxUnsettled * static_cast<double>(grad.numel()))
        << what << " grad " << name << ": too many elements at rounding-noise level";
  }
}

// An equivalence test's configuration: `model` with 10 classes at `batch` samples of `sample`
// (image side, or a language model's tokens), SGD at a large rate, so a wrong update shows in
// the weights.
RunConfig equivalence_config(const std::string& model, int64_t batch, int64_t sample) {
  RunConfig config;
  config.model = model;
  config.num_classes = 10;
  config.batch_size = batch;
  (is_language_model(model) ? config.seq_len : config.image_size) = sample;
  fit_config_to_model(config);
  config.learning_rate = 0.1;
  return config;
}

TEST_P(SplitEquivalence, MatchesSingleDevice) {
  const auto& c = GetParam();
  torch::manual_seed(7);
  auto config = equivalence_config(c.model, c.batch, c.image);
  const auto batch = make_random_batch(config, c.batch, torch::kCPU, torch::kCPU);
  const auto reference = train("single", config, 1, batch, c.eval_mode);

  expect_same_step(train("model_parallel", config, c.devices, batch, c.eval_mode), reference, "model_parallel");
  for (int64_t split : c.split_sizes) {
    for (const auto& info : schedule_table()) {  // every schedule; those with chunks on one chunk here
      const auto& schedule = info.name;
      set_option(config, "split", split);
      set_option(config, "schedule", schedule);
      set_option(config, "chunks", 1);
      expect_same_step(train("pipeline", config, c.devices, batch, c.eval_mode), reference,
                       "pipeline split " + std::to_string(split) + " " + schedule);
    }
  }
  // interleaved-1f1b with 2 or 3 chunks per device, where the model has a stage for every chunk
  // and the micro-batches fill whole rounds of the devices.
  const auto model_stages = ModelRegistry::instance().get(c.model).stage_names.size();
  for (int64_t split : c.split_sizes) {
    for (int chunks : {2, 3}) {
      const auto micro_batches = static_cast<size_t>((c.batch + split - 1) / split);
      if (micro_batches % c.devices != 0 || chunks * c.devices > model_stages) continue;
      set_option(config, "split", split);
      set_option(config, "schedule", "interleaved-1f1b");
      set_option(config, "chunks", chunks);
      expect_same_step(train("pipeline", config, c.devices, batch, c.eval_mode), reference,
                       "pipeline split " + std::to_string(split) + " interleaved-1f1b, " + std::to_string(chunks) +
                           " chunks");
    }
  }
  // data_parallel over several steps, so that a wrong broadcast of updated weights shows. In
  // double: three steps of an eval-mode resnet50 (no batch statistics, so its activations grow
  // block after block) amplify a float rounding difference a thousandfold, measured; at larger
  // rates than 1e-4 it diverges.
  constexpr int kSteps = 3;
  if (c.model == "resnet50") config.learning_rate = 1e-4;
  expect_same_step(train("data_parallel", config, c.devices, batch, c.eval_mode, kSteps, torch::kDouble),
                   train("single", config, 1, batch, c.eval_mode, kSteps, torch::kDouble),
                   "data_parallel after 3 steps");

  // AdamW: each stage's, replica 0's optimizer updates as single's does, over 3 steps so that
  // the step counts and the moments carry from one step to the next. AdamW's update is about the
  // learning rate per element whatever the gradient, so the rate stays small. Eval-mode resnet50
  // amplifies the float rounding of micro-batches summed in another order past the tolerance
  // within 3 steps (measured: 2e-5 on 2 devices, 5% on 4), and its balanced cut on 4 devices times
  // its stages in float, so it cannot run in double: its stages take one step, of one schedule.
  // data_parallel runs in double, as above. A transformer's key bias (a third of c_attn.bias) has
  // no true gradient (softmax ignores a shift common to every key), only rounding noise far below
  // AdamW's eps, which AdamW scales up to a sizeable part of the learning rate: its weights are
  // compared at 1e-3 (measured: 1.7e-4), every gradient still at 1e-5.
  const double adamw_weight_tolerance = is_language_model(c.model) ? 1e-3 : kTolerance;
  config.optimizer = OptimizerKind::kAdamW;
  config.learning_rate = c.model == "resnet50" ? 1e-4 : 1e-3;
  // tinyllama's staged strategies drift the same way over 3 steps: on 2 devices with micro-batches of
  // one sequence, every schedule's third-step gradients were 1.7e-5 to 2.3e-4 from single's (measured;
  // 4 devices stayed within 1e-5), so its stages take one step too, and tinygpt keeps the three.
  const int staged_steps = c.model == "resnet50" || c.model == "tinyllama" ? 1 : kSteps;
  const auto adamw_reference = train("single", config, 1, batch, c.eval_mode, staged_steps);
  const auto expect_same_adamw = [&](const StepResult& value, const std::string& what) {
    if (staged_steps == 1) {
      expect_same_adamw_first_step(value, adamw_reference, what, config.learning_rate);
    } else {
      expect_same_step(value, adamw_reference, what, adamw_weight_tolerance);
    }
  };
  expect_same_adamw(train("model_parallel", config, c.devices, batch, c.eval_mode, staged_steps),
                    "model_parallel adamw");
  for (const auto& info : schedule_table()) {
    if (c.model == "resnet50" && info.name != "1f1b") continue;
    set_option(config, "split", c.split_sizes.front());
    set_option(config, "schedule", info.name);
    set_option(config, "chunks", 1);
    expect_same_adamw(train("pipeline", config, c.devices, batch, c.eval_mode, staged_steps),
                      "pipeline adamw split " + config.options.at("split") + " " + info.name);
  }
  expect_same_step(train("data_parallel", config, c.devices, batch, c.eval_mode, kSteps, torch::kDouble),
                   train("single", config, 1, batch, c.eval_mode, kSteps, torch::kDouble),
                   "data_parallel adamw after 3 steps");
}

INSTANTIATE_TEST_SUITE_P(
    Models, SplitEquivalence,
    // Split sizes that divide the batch, that do not, one image, the batch, and more than it.
    ::testing::Values(EquivalenceCase{"tinycnn", 6, 16, /*eval_mode=*/false, /*devices=*/2, {1, 3, 4, 6, 9}},
                      EquivalenceCase{"tinycnn", 7, 16, /*eval_mode=*/false, /*devices=*/4, {1, 2, 3, 7, 10}},
                      EquivalenceCase{"resnet50", 4, 32, /*eval_mode=*/true, /*devices=*/2, {2, 3}},
                      EquivalenceCase{"resnet50", 3, 32, /*eval_mode=*/true, /*devices=*/4, {2}},
                      // Embeddings on the first stage, blocks between, the head on the last.
                      EquivalenceCase{"tinygpt", 6, 8, /*eval_mode=*/false, /*devices=*/2, {1, 3, 4, 6, 9}},
                      EquivalenceCase{"tinygpt", 7, 8, /*eval_mode=*/false, /*devices=*/4, {1, 2, 3, 7, 10}},
                      // Grouped-query attention, rotary positions, RMSNorm, SwiGLU.
                      EquivalenceCase{"tinyllama", 6, 8, /*eval_mode=*/false, /*devices=*/2, {1, 3, 4, 6, 9}},
                      EquivalenceCase{"tinyllama", 7, 8, /*eval_mode=*/false, /*devices=*/4, {1, 2, 3, 7, 10}}),
    [](const auto& info) {
      return info.param.model + "_" + std::to_string(info.param.devices) + "devices";
    });

// --checkpoint=blocks under every strategy and schedule that runs a block's backward whole: the
// same loss, gradients and weights as the same case without (docs/STRATEGIES.md, "Activation
// checkpointing"). Batch-norm in train mode: the recomputed forward normalises by the same batch.
TEST(Checkpointing, EveryStrategyAndScheduleTrainsAsWithout) {
  struct Model {
    std::string name;
    int64_t batch, sample;
  };
  for (const auto& model :
       {Model{"tinycnn", 6, 16}, Model{"resnet18", 4, 32}, Model{"tinygpt", 6, 8}, Model{"tinyllama", 6, 8}}) {
    torch::manual_seed(7);
    auto config = equivalence_config(model.name, model.batch, model.sample);
    const auto batch = make_random_batch(config, model.batch, torch::kCPU, torch::kCPU);
    const auto both = [&](const std::string& strategy, size_t devices, const std::string& what, int steps = 2) {
      config.checkpoint = Checkpointing::kOff;
      const auto kept = train(strategy, config, devices, batch, /*eval_mode=*/false, steps);
      config.checkpoint = Checkpointing::kBlocks;
      expect_same_step(train(strategy, config, devices, batch, /*eval_mode=*/false, steps), kept,
                       model.name + " " + what + " checkpointed");
    };
    both("single", 1, "single");
    both("model_parallel", 2, "model_parallel");
    both("data_parallel", 2, "data_parallel");
    set_option(config, "split", model.batch / 2);  // 2 micro-batches: whole rounds of 2 devices
    for (const auto& info : schedule_table()) {
      if (info.splits_backward) continue;  // skipped with a reason: CheckpointingSkip below
      set_option(config, "schedule", info.name);
      set_option(config, "chunks", info.uses_chunks ? 2 : 1);
      both("pipeline", 2, "pipeline " + info.name);
    }
    config.optimizer = OptimizerKind::kAdamW;
    config.learning_rate = 1e-3;
    both("single", 1, "single adamw", 3);
    config.optimizer = OptimizerKind::kSgd;
  }
}

// AdamW (decoupled weight decay, bias-corrected moments) written out for one tensor, as
// torch.optim.AdamW documents it, against the fused kernel the strategies use, over several steps.
TEST(AdamW, MatchesTheReferenceFormulaWithWeightDecayOverSeveralSteps) {
  torch::manual_seed(3);
  const double lr = 1e-2;
  const AdamWSettings settings;  // betas 0.9, 0.999, eps 1e-8, weight decay 1e-2
  auto parameter = torch::randn({5, 7}, torch::kDouble).requires_grad_();
  auto second = torch::randn({3}, torch::kDouble).requires_grad_();
  auto reference = parameter.detach().clone();
  auto m = torch::zeros_like(reference), v = torch::zeros_like(reference);
  Optimizer optimizer({parameter, second}, OptimizerKind::kAdamW, lr);
  for (int t = 1; t <= 4; ++t) {
    const auto gradient = torch::randn({5, 7}, torch::kDouble);
    parameter.mutable_grad() = gradient.clone();
    second.mutable_grad() = torch::Tensor();  // no gradient: left alone, its step count too
    optimizer.step();
    reference = reference * (1 - lr * settings.weight_decay);
    m = settings.beta1 * m + (1 - settings.beta1) * gradient;
    v = settings.beta2 * v + (1 - settings.beta2) * gradient * gradient;
    const auto m_hat = m / (1 - std::pow(settings.beta1, t));
    const auto v_hat = v / (1 - std::pow(settings.beta2, t));
    reference = reference - lr * m_hat / (v_hat.sqrt() + settings.eps);
    EXPECT_LT(relative_difference(parameter.detach(), reference), 1e-12) << "step " << t;
  }
  // The state: two moments per parameter and a step count each, the second's still zero.
  const auto state = optimizer.state();
  ASSERT_EQ(state.size(), 6u);
  EXPECT_LT(relative_difference(state[0], m), 1e-12);
  EXPECT_LT(relative_difference(state[2], v), 1e-12);
  EXPECT_EQ(state[4].item<double>(), 4.0);
  EXPECT_EQ(state[5].item<double>(), 0.0);
}

TEST(AdamW, SgdKeepsNoStateAndBothKernelsGiveTheSameUpdate) {
  auto a = torch::ones({4}).requires_grad_(), b = torch::ones({4}).requires_grad_();
  Optimizer per_parameter({a}, OptimizerKind::kSgd, 0.5, Optimizer::SgdKernels::kPerParameter);
  Optimizer multi_tensor({b}, OptimizerKind::kSgd, 0.5, Optimizer::SgdKernels::kMultiTensor);
  for (auto* tensor : {&a, &b}) tensor->mutable_grad() = torch::full({4}, 2.0);
  per_parameter.step();
  multi_tensor.step();
  EXPECT_TRUE(torch::equal(a.detach(), torch::zeros({4})));
  EXPECT_TRUE(torch::equal(b.detach(), torch::zeros({4})));
  EXPECT_TRUE(per_parameter.state().empty());
  per_parameter.zero_grad();
  EXPECT_FALSE(a.grad().defined());
}

// As in Python's DataParallel, the model keeps replica 0's batch-norm running statistics: those
// of the first shard, not of the whole batch.
TEST(DataParallel, BatchNormStatisticsFollowReplicaZerosShard) {
  RunConfig config;
  config.model = "resnet50";
  config.num_classes = 10;
  config.batch_size = 4;
  config.image_size = 32;
  torch::manual_seed(11);
  const auto batch = make_random_batch(config, config.batch_size, torch::kCPU, torch::kCPU);
  auto strategy = StrategyRegistry::instance().get("data_parallel").create();
  strategy->setup([&](torch::Device) { return seeded_model(config, /*eval_mode=*/false); }, {torch::kCPU, torch::kCPU}, config);
  strategy->train_step(batch);

  const auto statistics_after_forward = [&](const torch::Tensor& inputs) {
    auto model = seeded_model(config, /*eval_mode=*/false);
    torch::NoGradGuard no_grad;
    model->forward(inputs);
    return model->module().named_buffers();
  };
  const auto shard_zero = statistics_after_forward(batch.inputs.slice(0, 0, config.batch_size / 2));
  const auto whole_batch = statistics_after_forward(batch.inputs);
  const auto kept = strategy->model().module().named_buffers();
  double largest_difference_from_whole_batch = 0;
  for (const auto& item : shard_zero) {
    const auto& value = kept[item.key()];
    EXPECT_LT(relative_difference(value, item.value()), kTolerance) << item.key();
    largest_difference_from_whole_batch =
        std::max(largest_difference_from_whole_batch,
                 relative_difference(value, whole_batch[item.key()]));
  }
  EXPECT_GT(largest_difference_from_whole_batch, 1e-3);
}

TEST(DataParallel, RejectsAnUnknownReplicationAndTheCloneVariantOnCpu) {
  RunConfig config;
  config.model = "tinycnn";
  config.num_classes = 10;
  for (const std::string replicate : {"scatter", "clone"}) {
    set_option(config, "replicate", replicate);
    auto strategy = StrategyRegistry::instance().get("data_parallel").create();
    EXPECT_THROW(strategy->setup([&](torch::Device) { return seeded_model(config, false); }, {torch::kCPU, torch::kCPU}, config),
                 std::invalid_argument)
        << replicate;
  }
}

TEST(SingleDevice, StepsReduceTheLossOnAFixedBatch) {
  torch::manual_seed(3);
  RunConfig config;
  config.model = "resnet50";
  config.batch_size = 4;
  config.image_size = 32;
  auto strategy = StrategyRegistry::instance().get("single").create();
  strategy->setup([&](torch::Device) { return make_model(config.model, config.num_classes); }, {torch::kCPU}, config);
  const auto batch = make_random_batch(config, config.batch_size, torch::kCPU, torch::kCPU);
  const double first = strategy->train_step(batch).item<double>();
  double last = first;
  for (int step = 0; step < 5; ++step) last = strategy->train_step(batch).item<double>();
  EXPECT_LT(last, first);
}

TEST(SingleDevice, Bf16AutocastStepRunsAndReducesTheLoss) {
  torch::manual_seed(3);
  RunConfig config;
  config.model = "tinycnn";
  config.num_classes = 10;
  config.batch_size = 8;
  config.image_size = 16;
  config.precision = Precision::kBFloat16;
  config.learning_rate = 0.5;
  config.loss = LossKind::kCrossEntropy;
  auto strategy = StrategyRegistry::instance().get("single").create();
  strategy->setup([&](torch::Device) { return make_model(config.model, config.num_classes); }, {torch::kCPU}, config);
  const auto batch = make_random_batch(config, config.batch_size, torch::kCPU, torch::kCPU);
  EXPECT_TRUE(batch.inputs.is_contiguous(torch::MemoryFormat::ChannelsLast));
  const double first = strategy->train_step(batch).item<double>();
  double last = first;
  for (int step = 0; step < 10; ++step) last = strategy->train_step(batch).item<double>();
  EXPECT_LT(last, first);
}

TEST(Registry, ListsEveryPlugIn) {
  std::vector<std::string> names;
  for (const auto* info : StrategyRegistry::instance().all()) names.push_back(info->name());
  EXPECT_EQ(names, (std::vector<std::string>{"single", "model_parallel", "pipeline", "data_parallel", "ddp", "zero",
                                                "tensor_parallel"}));
  EXPECT_THROW(StrategyRegistry::instance().get("zero3"), std::invalid_argument);
}

TEST(Registry, RefusesASecondPlugInUnderATakenName) {
  StrategyInfo twin = StrategyRegistry::instance().get("single");
  EXPECT_THROW(StrategyRegistry::instance().add(twin), std::logic_error);
  EXPECT_EQ(StrategyRegistry::instance().get("single").order(), 0);
}

// Every case holds --cut under "cut" (strategies/staged_options.h): a strategy option of that
// field would read the placement, or overwrite it.
class NeverRuns final : public Strategy {
 public:
  void setup(const ModelFactory&, const std::vector<torch::Device>&, const RunConfig&) override {}
  torch::Device input_device() const override { return torch::kCPU; }
  torch::Device target_device() const override { return torch::kCPU; }
  torch::Tensor train_step(const Batch&) override { return {}; }
};

TEST(Registry, RefusesAnOptionUnderCutsField) {
  const auto info = StrategyInfo("cuts").creates<NeverRuns>().option(StrategyOption::choice("cut", "cuts", {"a"}));
  EXPECT_THROW(StrategyRegistry::instance().add(info), std::logic_error);
  EXPECT_THROW(StrategyRegistry::instance().get("cuts"), std::invalid_argument);
}

// A case without an option (model_parallel's, or a config built by hand) reads what the option's
// declaration defaults to.
TEST(Registry, OptionStructsDefaultToTheirDeclarations) {
  const auto declared_default = [](const std::string& strategy, const std::string& field) {
    for (const auto& option : StrategyRegistry::instance().get(strategy).options()) {
      if (option.field() == field) return option.defaults().empty() ? std::string() : option.defaults().front();
    }
    throw std::logic_error(strategy + " declares no option " + field);
  };
  const RunConfig none;
  const auto pipeline = pipeline_options(none);
  EXPECT_EQ(declared_default("pipeline", "split"), "");  // swept from the batch: no split is model_parallel's
  EXPECT_EQ(pipeline.split_size, 0);
  EXPECT_EQ(pipeline.schedule, declared_default("pipeline", "schedule"));
  EXPECT_EQ(std::to_string(pipeline.chunks), declared_default("pipeline", "chunks"));
  EXPECT_EQ(std::to_string(pipeline.lanes), declared_default("pipeline", "lanes"));
  const auto ddp = ddp_options(none);
  EXPECT_EQ(format_number(ddp.bucket_mib), declared_default("ddp", "bucket_mib"));
  EXPECT_EQ(ddp.overlap ? "on" : "off", declared_default("ddp", "overlap"));
  EXPECT_EQ(staged_options(none).cut, "");
  // data_parallel's struct is its own file's: its default shows in what it describes.
  RunConfig config;
  config.model = "tinycnn";
  config.num_classes = 10;
  config.image_size = 16;
  auto data_parallel = StrategyRegistry::instance().get("data_parallel").create();
  data_parallel->setup([&config](torch::Device) { return make_case_model(config); }, {torch::kCPU, torch::kCPU}, config);
  EXPECT_EQ(data_parallel->describe().at("replicate"), declared_default("data_parallel", "replicate"));
}

// Text that is not the option's kind is refused, naming the field.
TEST(Registry, OptionReadersRefuseTextOfTheWrongKind) {
  RunConfig config;
  set_option(config, "split", "2x");
  set_option(config, "bucket_mib", "many");
  try {
    pipeline_options(config);
    ADD_FAILURE() << "split=2x was read";
  } catch (const std::invalid_argument& error) {
    EXPECT_EQ(std::string(error.what()), "option split='2x' is not a whole number");
  }
  try {
    ddp_options(config);
    ADD_FAILURE() << "bucket_mib=many was read";
  } catch (const std::invalid_argument& error) {
    EXPECT_EQ(std::string(error.what()), "option bucket_mib='many' is not a number");
  }
  set_option(config, "split", 3);
  set_option(config, "bucket_mib", "0.5");
  EXPECT_EQ(pipeline_options(config).split_size, 3);
  EXPECT_EQ(ddp_options(config).bucket_mib, 0.5);
}

// A declaration is built by named setters: no positional or aggregate form compiles, where a
// swapped "" would land in the wrong slot.
static_assert(!std::is_aggregate_v<StrategyInfo> && !std::is_aggregate_v<StrategyOption>);
static_assert(!std::is_default_constructible_v<StrategyInfo> && !std::is_default_constructible_v<StrategyOption>);
static_assert(!std::is_constructible_v<StrategyInfo, const char*, const char*>);
static_assert(!std::is_constructible_v<StrategyOption, const char*, const char*, const char*>);
static_assert(!std::is_convertible_v<const char*, StrategyInfo>);

// Each setter fills its own slot, and what is not set keeps its documented default.
TEST(Registry, DeclarationSettersFillTheirOwnSlots) {
  StrategyPredictor predictor;
  predictor.reference = true;
  predictor.covers = [](const CaseConditions& conditions) { return conditions.devices > 1; };
  predictor.predict = [](const AdviseProfile&, const CaseConditions&) { return Prediction{}; };
  const auto info =
      StrategyInfo("declared")
          .summary("its summary")
          .order(7)
          .min_devices(3)
          .distributed()
          .device_role("ranks")
          .option(StrategyOption::integer("width", "widths").help("its help").choices({"2", "4"}).minimum(2)
                      .defaults({"4"}).unnamed_value("4").counter("width_count"))
          .option(StrategyOption::number("rate", "rates").apply([](RunConfig& config, const std::string& value, int) {
            config.learning_rate = std::stod(value);
          }))
          .option(StrategyOption::choice("mode", "modes", {"a", "b"})
                      .values_for([](const std::vector<std::string>& values, bool defaulted, const RunConfig&) {
                        return defaulted ? std::vector<std::string>{} : values;
                      }))
          .predictor(predictor);
  EXPECT_EQ(info.name(), "declared");
  EXPECT_EQ(info.summary(), "its summary");
  EXPECT_EQ(info.order(), 7);
  EXPECT_EQ(info.min_devices(), 3);
  EXPECT_TRUE(info.is_distributed());
  EXPECT_FALSE(info.is_graph_capturable());
  EXPECT_EQ(info.device_role(), "ranks");
  EXPECT_FALSE(info.has_class());
  EXPECT_TRUE(info.predictor().reference);
  EXPECT_FALSE(info.predictor().needs_gpu_per_device);
  RunConfig config;
  const CaseConditions conditions{config};
  EXPECT_FALSE(info.obstacle_in(conditions).has_value());
  EXPECT_FALSE(info.predicts(conditions));  // its predictor covers cases on several devices
  EXPECT_TRUE(info.predicts(CaseConditions{config, 0, /*devices=*/2}));
  EXPECT_FALSE(StrategyInfo("unpredicted").predicts(conditions));
  ASSERT_EQ(info.options().size(), 3u);
  const auto& width = info.options()[0];
  EXPECT_EQ(width.field(), "width");
  EXPECT_EQ(width.flag(), "widths");
  EXPECT_EQ(width.help(), "its help");
  EXPECT_EQ(width.kind(), StrategyOption::Kind::kInteger);
  EXPECT_EQ(width.choices(), (std::vector<std::string>{"2", "4"}));
  EXPECT_EQ(width.minimum(), 2);
  EXPECT_EQ(width.defaults(), (std::vector<std::string>{"4"}));
  EXPECT_EQ(width.unnamed_value(), "4");
  EXPECT_EQ(width.counter(), "width_count");
  const auto& rate = info.options()[1];
  EXPECT_EQ(rate.kind(), StrategyOption::Kind::kNumber);
  EXPECT_EQ(rate.minimum(), 1);
  EXPECT_TRUE(rate.unnamed_value().empty());
  EXPECT_TRUE(rate.counter().empty());
  rate.apply_to(config, "0.5", 1);
  EXPECT_EQ(config.learning_rate, 0.5);
  width.apply_to(config, "2", 1);  // no apply: RunConfig as it was
  EXPECT_EQ(config.learning_rate, 0.5);
  const auto& mode = info.options()[2];
  EXPECT_EQ(mode.kind(), StrategyOption::Kind::kChoice);
  EXPECT_EQ(mode.choices(), (std::vector<std::string>{"a", "b"}));
  EXPECT_TRUE(mode.values({"a"}, /*defaulted=*/true, config).empty());
  EXPECT_EQ(mode.values({"b"}, /*defaulted=*/false, config), (std::vector<std::string>{"b"}));
  EXPECT_EQ(width.values({"2"}, /*defaulted=*/true, config), (std::vector<std::string>{"2"}));
}

TEST(Registry, RefusesADeclarationWithoutAClass) {
  EXPECT_THROW(StrategyRegistry::instance().add(StrategyInfo("classless").summary("no class")), std::logic_error);
  EXPECT_THROW(StrategyRegistry::instance().get("classless"), std::invalid_argument);
}

TEST(Pipeline, RejectsBadSplitSizeAndSchedule) {
  RunConfig config;
  config.model = "tinycnn";
  config.num_classes = 10;
  const auto factory = [&](torch::Device) { return make_model(config.model, config.num_classes); };
  const std::vector<torch::Device> devices(2, torch::kCPU);
  for (int64_t split : {0, -3}) {
    set_option(config, "split", split);
    EXPECT_THROW(StrategyRegistry::instance().get("pipeline").create()->setup(factory, devices, config),
                 std::invalid_argument);
  }
  set_option(config, "split", 2);
  set_option(config, "schedule", "interleaved");
  EXPECT_THROW(StrategyRegistry::instance().get("pipeline").create()->setup(factory, devices, config),
               std::invalid_argument);
}

// Every stage forwards and backwards each micro-batch once, forwards in order, and holds at
// most as many micro-batches' activations as its schedule allows.
TEST(PipelineSchedule, EveryMicroBatchOnceAndTheActivationsInFlightEachScheduleAllows) {
  constexpr size_t kStages = 3, kMicroBatches = 5;
  const std::map<std::string, std::vector<size_t>> most_in_flight = {
      {"gpipe", {5, 5, 5}}, {"tutorial", {5, 5, 5}}, {"1f1b", {3, 2, 1}}};
  for (const auto& [schedule, expected] : most_in_flight) {
    const auto programs = make_schedule(schedule, kStages, kMicroBatches);
    ASSERT_EQ(programs.size(), kStages) << schedule;
    for (size_t s = 0; s < kStages; ++s) {
      std::vector<int> forwards(kMicroBatches), backwards(kMicroBatches);
      int64_t next_forward = 0;
      size_t in_flight = 0, most = 0;
      for (const auto& action : programs[s]) {
        if (action.op == StageOp::kForward) {
          EXPECT_EQ(action.micro_batch, next_forward++) << schedule << " stage " << s;
          ++forwards[action.micro_batch];
          most = std::max(most, ++in_flight);
        } else if (action.op == StageOp::kBackward) {
          ++backwards[action.micro_batch];
          --in_flight;
        } else {
          EXPECT_EQ(schedule, "tutorial");
          EXPECT_EQ(s, kStages - 1) << "only the last stage runs the joint backward";
          for (auto& count : backwards) ++count;
          in_flight = 0;
        }
      }
      EXPECT_EQ(forwards, std::vector<int>(kMicroBatches, 1)) << schedule << " stage " << s;
      EXPECT_EQ(backwards, std::vector<int>(kMicroBatches, 1)) << schedule << " stage " << s;
      EXPECT_EQ(most, expected[s]) << schedule << " stage " << s;
    }
  }
  EXPECT_THROW(make_schedule("interleaved", 2, 4), std::invalid_argument);
}

// ZB-H1: every micro-batch's forward, B and W once, each W after its B; stage s keeps at most s
// W passes pending, and no stage holds more than S micro-batches' activations (freed by W).
TEST(PipelineSchedule, ZeroBubbleSplitsEachBackwardAndDefersWeightGradients) {
  constexpr size_t kStages = 4, kMicroBatches = 6;
  const auto programs = make_schedule("zb-h1", kStages, kMicroBatches);
  ASSERT_EQ(programs.size(), kStages);
  for (size_t s = 0; s < kStages; ++s) {
    std::vector<int> forwards(kMicroBatches), inputs(kMicroBatches), weights(kMicroBatches);
    size_t in_flight = 0, most = 0, pending = 0, most_pending = 0;
    for (const auto& action : programs[s]) {
      const auto m = static_cast<size_t>(action.micro_batch);
      if (action.op == StageOp::kForward) {
        ++forwards[m];
        most = std::max(most, ++in_flight);
      } else if (action.op == StageOp::kBackwardInput) {
        ++inputs[m];
        most_pending = std::max(most_pending, ++pending);
      } else {
        ASSERT_EQ(action.op, StageOp::kBackwardWeight);
        EXPECT_EQ(inputs[m], 1) << "W before B, stage " << s << " micro-batch " << m;
        ++weights[m];
        --pending;
        --in_flight;
      }
    }
    EXPECT_EQ(forwards, std::vector<int>(kMicroBatches, 1)) << "stage " << s;
    EXPECT_EQ(inputs, std::vector<int>(kMicroBatches, 1)) << "stage " << s;
    EXPECT_EQ(weights, std::vector<int>(kMicroBatches, 1)) << "stage " << s;
    EXPECT_LE(most, kStages) << "stage " << s;
    EXPECT_EQ(most_pending, s + 1) << "stage " << s;  // s deferred, plus the one just issued
  }
}

// Interleaved 1F1B: each device runs only its own chunks (d, d+D, ...), every stage forwards and
// backwards each micro-batch once, forwards in order; micro-batches must fill whole rounds of D.
TEST(PipelineSchedule, InterleavedRunsEveryChunkOfEachDeviceOnceForEveryMicroBatch) {
  constexpr size_t kDevices = 2, kChunks = 3, kMicroBatches = 6;
  const auto programs = make_schedule("interleaved-1f1b", kDevices, kMicroBatches, kChunks);
  ASSERT_EQ(programs.size(), kDevices);
  std::map<size_t, std::vector<int>> forwards, backwards;
  std::map<size_t, int64_t> next_forward;
  for (size_t d = 0; d < kDevices; ++d) {
    for (const auto& action : programs[d]) {
      EXPECT_EQ(action.stage % kDevices, d) << "stage " << action.stage;
      auto& counts = action.op == StageOp::kForward ? forwards[action.stage] : backwards[action.stage];
      counts.resize(kMicroBatches);
      ++counts[action.micro_batch];
      if (action.op == StageOp::kForward) EXPECT_EQ(action.micro_batch, next_forward[action.stage]++);
    }
  }
  ASSERT_EQ(forwards.size(), kDevices * kChunks);
  for (const auto& [stage, counts] : forwards) {
    EXPECT_EQ(counts, std::vector<int>(kMicroBatches, 1)) << "stage " << stage;
    EXPECT_EQ(backwards[stage], std::vector<int>(kMicroBatches, 1)) << "stage " << stage;
  }
  EXPECT_THROW(make_schedule("interleaved-1f1b", 2, 5, 2), std::invalid_argument);
  EXPECT_THROW(make_schedule("gpipe", 2, 4, 2), std::invalid_argument);
  EXPECT_EQ(make_schedule("interleaved-1f1b", 2, 5, 1).size(), 2u);  // one chunk: 1f1b
}

TEST(Cut, ParsesAndRejectsBadSpecs) {
  const std::vector<std::string> stages = {"stem", "layer1", "layer2", "layer3", "layer4", "head"};
  EXPECT_EQ(parse_cut("stem,layer1,layer2|layer3,layer4,head", stages, 2),
            (Cut{{"stem", "layer1", "layer2"}, {"layer3", "layer4", "head"}}));
  EXPECT_THROW(parse_cut("stem,layer1,layer2|layer3,layer5,head", stages, 2), std::invalid_argument);  // unknown
  EXPECT_THROW(parse_cut("stem,layer1,layer2||layer3,layer4,head", stages, 3), std::invalid_argument);  // empty device
  EXPECT_THROW(parse_cut("stem,layer1,layer2|layer3,layer4,head", stages, 3), std::invalid_argument);  // parts != devices
  EXPECT_THROW(parse_cut("stem|layer1|layer2|layer3|layer4|head", stages, 2), std::invalid_argument);  // more parts
  EXPECT_THROW(parse_cut("layer1,stem|layer2,layer3,layer4,head", stages, 2), std::invalid_argument);  // order
  EXPECT_THROW(parse_cut("stem,layer1|layer2,layer3,layer4", stages, 2), std::invalid_argument);       // head left out
}

// ResNet-50's stages (a block each) and groups (its layers), as the model declares them.
struct ResNetStages {
  std::vector<std::string> names;
  std::vector<StageGroup> groups;
};

ResNetStages resnet50_stages() {
  auto model = make_model("resnet50", /*num_classes=*/10);
  ResNetStages stages;
  for (const auto& stage : model->stages()) stages.names.push_back(stage.name);
  stages.groups = model->stage_groups();
  return stages;
}

// The message of the std::invalid_argument that `parse` throws, or "" where it throws none.
std::string cut_error(const std::function<void()>& parse) {
  try {
    parse();
  } catch (const std::invalid_argument& error) {
    return error.what();
  }
  return "";
}

TEST(Cut, GroupsStandForTheirStagesAndAreWrittenByName) {
  const auto resnet = resnet50_stages();
  const auto& names = resnet.names;
  const auto& groups = resnet.groups;
  const auto parse = [&](const std::string& spec, size_t parts) { return parse_cut(spec, names, parts, groups); };
  // The tutorial's cut: layer names stand for their blocks, and are written back as they were.
  const auto tutorial = parse("stem,layer1,layer2|layer3,layer4,head", 2);
  ASSERT_EQ(tutorial.size(), 2u);
  EXPECT_EQ(tutorial[0], (std::vector<std::string>{"stem", "layer1.0", "layer1.1", "layer1.2", "layer2.0", "layer2.1",
                                                   "layer2.2", "layer2.3"}));
  EXPECT_EQ(tutorial[1].front(), "layer3.0");
  EXPECT_EQ(tutorial[1].size(), 6u + 3u + 1u);
  EXPECT_EQ(format_cut(tutorial, groups), "stem,layer1,layer2|layer3,layer4,head");
  EXPECT_EQ(format_cut(tutorial).rfind("stem,layer1.0,layer1.1,layer1.2,layer2.0,", 0), 0u);  // no groups: blocks
  EXPECT_EQ(parse(format_cut(tutorial), 2), tutorial);
  // Blocks and layers mixed, a layer across two parts: a part writes a layer by name only whole.
  for (const std::string spec : {"stem,layer1,layer2.0|layer2.1,layer2.2,layer2.3,layer3.0|layer3.1,layer3.2,layer3."
                                 "3,layer3.4|layer3.5,layer4,head",
                                 "stem|layer1|layer2|layer3.0,layer3.1|layer3.2,layer3.3|layer3.4,layer3.5|layer4.0|"
                                 "layer4.1,layer4.2,head"}) {
    const auto parts = static_cast<size_t>(std::count(spec.begin(), spec.end(), '|')) + 1;
    const auto cut = parse(spec, parts);
    EXPECT_EQ(format_cut(cut, groups), spec);
    size_t stages = 0;
    for (const auto& part : cut) stages += part.size();
    EXPECT_EQ(stages, names.size()) << spec;
  }
  // Every stage a part of its own: 18.
  std::string each = "stem";
  for (size_t i = 1; i < names.size(); ++i) each += "|" + names[i];
  EXPECT_EQ(parse(each, 18).size(), 18u);

  // Bad specs: one line naming what was wrong and the stages and groups allowed.
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"stem,layer1.3,layer2|layer3,layer4,head", "unknown stage 'layer1.3'"},     // layer1 has 3 blocks
      {"stem,layer5|layer3,layer4,head", "unknown stage 'layer5'"},
      {"stem,layer2|layer1,layer3,layer4,head", "'layer2' is out of order, repeated, or skips 'layer1.0'"},
      {"stem,layer1,layer1.2|layer2,layer3,layer4,head", "'layer1.2' is out of order, repeated, or skips 'layer2.0'"},
      {"stem,layer1.0,layer1|layer2,layer3,layer4,head", "'layer1' is out of order, repeated, or skips 'layer1.1'"},
      {"stem,layer1,layer2|layer3,layer4.0,layer4.1", "stage 'layer4.2' is in no part"},
      {"stem,layer1||layer2,layer3,layer4,head", "part 1 has no stage"},
  };
  for (const auto& [spec, what] : bad) {
    const auto parts = static_cast<size_t>(std::count(spec.begin(), spec.end(), '|')) + 1;
    const auto message = cut_error([&] { parse(spec, parts); });
    EXPECT_NE(message.find("bad --cut '" + spec + "': " + what), std::string::npos) << message;
    EXPECT_NE(message.find("stages in order: stem, layer1 (layer1.0..layer1.2), layer2 (layer2.0..layer2.3), layer3 "
                           "(layer3.0..layer3.5), layer4 (layer4.0..layer4.2), head; a group's name stands for its "
                           "stages; parts separated by '|'"),
              std::string::npos)
        << message;
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;
  }
  EXPECT_NE(cut_error([&] { parse("stem,layer1,layer2|layer3,layer4,head", 4); }).find("2 parts where 4 are asked for"),
            std::string::npos);
}

TEST(Cut, StrategiesRejectABadCutAndTooManyDevices) {
  RunConfig config;
  config.model = "tinycnn";
  config.num_classes = 10;
  set_cut(config, "stem,block1|block9,head");
  const auto factory = [&](torch::Device) { return make_model(config.model, config.num_classes); };
  EXPECT_THROW(StrategyRegistry::instance().get("model_parallel").create()->setup(factory, {torch::kCPU, torch::kCPU}, config),
               std::invalid_argument);
  set_cut(config, "");
  // tinycnn has 4 stages: 5 devices would leave one empty.
  EXPECT_EQ(cut_error([&] {
              StrategyRegistry::instance().get("model_parallel").create()->setup(
                  factory, std::vector<torch::Device>(5, torch::kCPU), config);
            }),
            "tinycnn has 4 stages, fewer than the 5 stages asked for");
}

// --chunks places several stages on each device: too many for the model is said in stages.
TEST(Cut, TooManyChunksAreCountedInStagesNotDevices) {
  RunConfig config;
  config.model = "tinycnn";  // 4 stages
  config.num_classes = 10;
  set_option(config, "split", 1);
  config.batch_size = 4;
  set_option(config, "schedule", "interleaved-1f1b");
  set_option(config, "chunks", 3);
  const auto factory = [&](torch::Device) { return make_model(config.model, config.num_classes); };
  try {
    StrategyRegistry::instance().get("pipeline").create()->setup(factory, {torch::kCPU, torch::kCPU}, config);
    ADD_FAILURE() << "no error";
  } catch (const std::invalid_argument& error) {
    EXPECT_EQ(std::string(error.what()),
              "tinycnn has 4 stages, fewer than the 6 stages that --chunks=3 asks for on 2 devices (3 per device)");
  }
}

TEST(Cut, StageTimesArePositiveOnePerStageAndLeaveTheModelAlone) {
  RunConfig config;
  config.model = "tinycnn";
  config.image_size = 16;
  auto model = make_model(config.model, config.num_classes);
  std::vector<torch::Tensor> before;
  for (const auto& parameter : model->module().parameters()) before.push_back(parameter.detach().clone());
  const auto seconds = measure_stage_seconds(*model, config, /*batch_size=*/4, torch::kCPU);
  ASSERT_EQ(seconds.size(), model->stages().size());
  for (double stage_seconds : seconds) EXPECT_GT(stage_seconds, 0.0);
  const auto after = model->module().parameters();
  for (size_t i = 0; i < before.size(); ++i) {
    EXPECT_TRUE(torch::equal(after[i], before[i])) << i;
    EXPECT_FALSE(after[i].grad().defined()) << i;
  }
}

TEST(Cut, BalancedMinimisesTheSlowestPart) {
  const std::vector<std::string> stages = {"a", "b", "c", "d", "e", "f"};
  EXPECT_EQ(balanced_cut(stages, {1, 1, 1, 1, 1, 1}, 2), (Cut{{"a", "b", "c"}, {"d", "e", "f"}}));
  EXPECT_EQ(balanced_cut(stages, {1, 5, 1, 1, 1, 1}, 2), (Cut{{"a", "b"}, {"c", "d", "e", "f"}}));
  const auto four = balanced_cut(stages, {1, 1, 1, 1, 1, 1}, 4);
  ASSERT_EQ(four.size(), 4u);
  size_t covered = 0;
  for (const auto& part : four) {
    EXPECT_GE(part.size(), 1u);
    EXPECT_LE(part.size(), 2u);  // the best slowest part holds two unit stages
    covered += part.size();
  }
  EXPECT_EQ(covered, stages.size());
  EXPECT_THROW(balanced_cut(stages, {1, 1, 1, 1, 1, 1}, 7), std::invalid_argument);
}

// The slowest part of the best contiguous cut of `seconds` into `parts`, by trying every cut.
double best_slowest_part(const std::vector<double>& seconds, size_t begin, size_t parts) {
  if (parts == 1) return std::accumulate(seconds.begin() + static_cast<std::ptrdiff_t>(begin), seconds.end(), 0.0);
  double best = std::numeric_limits<double>::infinity(), first = 0;
  for (size_t end = begin + 1; end + parts - 1 <= seconds.size(); ++end) {
    first += seconds[end - 1];
    best = std::min(best, std::max(first, best_slowest_part(seconds, end, parts - 1)));
  }
  return best;
}

// ResNet-50's 18 stages into 4, 8 and 16 parts (pipelines of 4 devices, 4 devices x 2 chunks, 16
// devices): every stage once, in order, and the slowest part as small as any cut makes it.
TEST(Cut, BalancesBlocksIntoAnyNumberOfParts) {
  const auto names = resnet50_stages().names;
  // Made-up times of ResNet-50's shape: a light stem and head, blocks of unequal weight.
  std::vector<double> seconds = {0.5};
  for (size_t i = 1; i + 1 < names.size(); ++i) seconds.push_back(1.0 + 0.37 * static_cast<double>((i * 7) % 5));
  seconds.push_back(0.1);
  for (size_t parts : {4u, 8u, 16u, 18u}) {
    const auto cut = balanced_cut(names, seconds, parts);
    ASSERT_EQ(cut.size(), parts);
    std::vector<std::string> in_order;
    double slowest = 0;
    size_t next = 0;
    for (const auto& part : cut) {
      EXPECT_FALSE(part.empty()) << parts;
      double part_seconds = 0;
      for (const auto& name : part) {
        in_order.push_back(name);
        part_seconds += seconds[next++];
      }
      slowest = std::max(slowest, part_seconds);
    }
    EXPECT_EQ(in_order, names) << parts;
    EXPECT_DOUBLE_EQ(slowest, best_slowest_part(seconds, 0, parts)) << parts;
  }
  EXPECT_EQ(cut_error([&] { balanced_cut(names, seconds, 19); }),
            "cannot cut 18 stages into 19 parts: every part needs a stage");
}

// Pipelines longer than ResNet's layers: 8 stages of blocks on 8 devices, and interleaved-1f1b
// with 2 chunks on each of 4 devices, train as single does (CPU devices, as SplitEquivalence).
TEST(Cut, BlockLevelPipelinesOfEightStagesMatchSingleDevice) {
  torch::manual_seed(7);
  RunConfig config;
  config.model = "resnet50";
  config.num_classes = 10;
  config.batch_size = 4;  // 4 micro-batches of 1: whole rounds of 4 devices
  config.image_size = 32;
  config.learning_rate = 0.1;
  const auto batch = make_random_batch(config, config.batch_size, torch::kCPU, torch::kCPU);
  const auto reference = train("single", config, 1, batch, /*eval_mode=*/true);

  set_option(config, "split", 1);
  set_option(config, "schedule", "1f1b");
  set_cut(config, "stem,layer1.0,layer1.1|layer1.2,layer2.0|layer2.1,layer2.2|layer2.3,layer3.0|layer3.1,layer3.2|"
                  "layer3.3,layer3.4|layer3.5,layer4.0|layer4.1,layer4.2,head");
  expect_same_step(train("pipeline", config, 8, batch, /*eval_mode=*/true), reference, "1f1b on 8 devices");
  set_cut(config, "balanced");
  set_option(config, "schedule", "interleaved-1f1b");
  set_option(config, "chunks", 2);
  expect_same_step(train("pipeline", config, 4, batch, /*eval_mode=*/true), reference,
                   "interleaved-1f1b on 4 devices x 2 chunks");
}

TEST(Cut, DefaultIsTheTutorialsOnTwoDevicesAndBalancedOnFour) {
  RunConfig config;
  config.num_classes = 10;
  config.batch_size = 2;
  config.image_size = 32;
  config.model = "resnet50";
  auto model = make_model(config.model, config.num_classes);
  Cut cut;
  partition_model(*model, {torch::kCPU, torch::kCPU}, config, 2, &cut);
  EXPECT_EQ(format_cut(cut, model->stage_groups()), "stem,layer1,layer2|layer3,layer4,head");
  partition_model(*model, std::vector<torch::Device>(4, torch::kCPU), config, 2, &cut);
  EXPECT_EQ(cut.size(), 4u);
  // tinycnn has no layers: balanced on two devices too.
  config.model = "tinycnn";
  auto tiny = make_model(config.model, config.num_classes);
  partition_model(*tiny, {torch::kCPU, torch::kCPU}, config, 2, &cut);
  EXPECT_EQ(cut.size(), 2u);
}

}  // namespace
}  // namespace parbench
