// Multi-GPU equivalence: the CUDA paths (per-stage streams, cross-device copies, DataParallel's
// scatter/gather) give single's step. Skipped, with the reason, where fewer than 2 GPUs exist.
#include "benchmarks/launch/temporary_directory.h"
#include "core/device_timer.h"
#include "models/model_zoo.h"
#include "strategies/strategy.h"
#include "strategies/training.h"
#include "tests/case_options.h"
#include "tests/parbench_process.h"

#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <optional>

namespace parbench {
namespace {

constexpr double kTolerance = 1e-5;  // relative, per tensor, with TF32 off


std::map<std::string, torch::Tensor> step_and_collect(const std::string& strategy_name, const RunConfig& config,
                                                      const std::vector<torch::Device>& devices, const Batch& batch,
                                                      double* loss) {
  auto strategy = StrategyRegistry::instance().get(strategy_name).create();
  strategy->setup([&](torch::Device) {
    torch::manual_seed(99);
    auto model = make_model(config.model, config.num_classes);
    model->module().eval();  // batch-norm statistics must not depend on how the batch is split
    return model;
  }, devices, config);
  *loss = strategy->train_step({batch.inputs.to(strategy->input_device()), batch.targets.to(strategy->target_device())})
              .item<double>();
  std::map<std::string, torch::Tensor> result;
  for (const auto& item : strategy->model().module().named_parameters()) {
    result[item.key() + ".grad"] = item.value().grad().cpu();
    result[item.key()] = item.value().detach().cpu();
  }
  return result;
}

class MultiGpuEquivalence : public ::testing::TestWithParam<std::string> {};

TEST_P(MultiGpuEquivalence, MatchesSingleGpu) {
  if (visible_gpu_count() < 2) GTEST_SKIP() << "needs 2 GPUs, " << visible_gpu_count() << " visible";
  at::globalContext().setAllowTF32CuDNN(false);
  at::globalContext().setAllowTF32CuBLAS(false);
  RunConfig config;
  config.model = GetParam();
  config.num_classes = 10;
  config.batch_size = 12;
  config.image_size = 32;
  config.learning_rate = 0.1;
  torch::manual_seed(5);
  const auto batch = make_random_batch(config, config.batch_size, torch::kCPU, torch::kCPU);
  const std::vector<torch::Device> two_gpus = {torch::Device(torch::kCUDA, 0), torch::Device(torch::kCUDA, 1)};
  double reference_loss = 0;
  const auto reference = step_and_collect("single", config, {two_gpus.front()}, batch, &reference_loss);

  auto cloned = config;
  set_option(cloned, "replicate", "clone");
  std::vector<std::pair<std::string, RunConfig>> variants = {
      {"model_parallel", config}, {"data_parallel", config}, {"data_parallel", cloned}};
  for (const std::string schedule : {"tutorial", "gpipe", "1f1b", "zb-h1"}) {
    for (int64_t split : {1, 5, 12}) {
      for (int lanes : {1, 2}) {
        auto pipelined = config;
        set_option(pipelined, "split", split);
        set_option(pipelined, "schedule", schedule);
        set_option(pipelined, "lanes", lanes);
        variants.emplace_back("pipeline", pipelined);
      }
    }
  }
  // interleaved-1f1b: 4 and 2 micro-batches (whole rounds of the 2 GPUs), on as many chunks per
  // GPU as the model has stages for.
  const auto model_stages = make_model(config.model, config.num_classes)->stages().size();
  for (int chunks : {2, 3}) {
    if (static_cast<size_t>(chunks) * two_gpus.size() > model_stages) continue;
    for (int64_t split : {3, 6}) {
      auto interleaved = config;
      set_option(interleaved, "split", split);
      set_option(interleaved, "schedule", "interleaved-1f1b");
      set_option(interleaved, "chunks", chunks);
      variants.emplace_back("pipeline", interleaved);
    }
  }
  for (const auto& [name, variant] : variants) {
    double loss = 0;
    const auto result = step_and_collect(name, variant, two_gpus, batch, &loss);
    std::string what = name;
    for (const auto& [field, value] : variant.options) what += " " + field + ":" + value;
    EXPECT_NEAR(loss, reference_loss, kTolerance * std::abs(reference_loss)) << what;
    for (const auto& [key, expected] : reference) {
      const double scale = std::max(expected.norm().item<double>(), 1e-12);
      EXPECT_LT((result.at(key) - expected).norm().item<double>() / scale, kTolerance) << what << " " << key;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Models, MultiGpuEquivalence, ::testing::Values("tinycnn", "resnet50"),
                         [](const auto& info) { return info.param; });

// ---- A large local case, then ranks on the same GPUs, in one process ----------------------------

// The label's `key=value` fact of a JSON entry, or "".
std::string label_fact(const nlohmann::json& entry, const std::string& key) {
  const auto label = entry.value("label", std::string());
  const auto at = (";" + label).find(";" + key + "=");
  if (at == std::string::npos) return "";
  const auto start = at + key.size() + 1;
  return label.substr(start, label.find(';', start) - start);
}

// gpt2-large single (AdamW, fp32, batch 4: its model states alone 11.5 GiB, about 60 GB in all on
// GPU 0), then ddp on the same GPUs (one rank where the machine has one GPU), in one process. Run
// once for the tests below; nullopt where no GPU is visible.
struct LargeThenRanks {
  ProcessRun run;
  nlohmann::json single, ddp;
};

const std::optional<LargeThenRanks>& large_then_ranks() {
  static const std::optional<LargeThenRanks> result = []() -> std::optional<LargeThenRanks> {
    const int gpus = std::min(2, visible_gpu_count());
    if (gpus < 1) return std::nullopt;
    TemporaryDirectory dir("parbench-gpu-launch");
    const auto out = dir.file("run.json");
    ParbenchProcess parbench({"--models=gpt2-large", "--seq=1024", "--batch=4", "--optimizer=adamw",
                              "--strategies=single,ddp", "--gpus=" + std::to_string(gpus), "--allreduce=off",
                              "--warmup=1", "--repetitions=1", "--iterations=2", "--busy-profile=off",
                              "--benchmark_out=" + out, "--benchmark_out_format=json"},
                             {});
    LargeThenRanks found;
    found.run = parbench.wait(600);
    if (access(out.c_str(), F_OK) != 0) return found;
    for (const auto& entry : read_json(out).at("benchmarks")) {
      const auto name = entry.at("name").get<std::string>();
      if (name.rfind("train/single/", 0) == 0) found.single = entry;
      if (name.rfind("train/ddp/", 0) == 0) found.ddp = entry;
    }
    return found;
  }();
  return result;
}

// The process hands back what single left before the ranks start: the ddp case runs (before,
// gpt-2.7b's ddp failed "rank 1: no progress for 65 s" after single's 63.5 GiB on GPU 0).
TEST(GpuLaunch, RanksRunAfterALargeLocalCaseOnTheSameGpus) {
  const auto& found = large_then_ranks();
  if (!found) GTEST_SKIP() << "needs a GPU, none visible";
  ASSERT_EQ(found->run.exit_code, 0) << found->run.err;
  ASSERT_FALSE(found->single.is_null()) << found->run.err;
  ASSERT_FALSE(found->ddp.is_null()) << found->run.err;
  EXPECT_FALSE(found->single.value("error_occurred", false)) << found->single.dump();
  EXPECT_FALSE(found->ddp.value("error_occurred", false)) << found->ddp.dump();
  // single held a large share of GPU 0: more than its model states.
  EXPECT_GT(found->single.value("peak_mem_gib_dev0", 0.0), 11.5) << found->single.dump();
}

// What the launching process still reserved on its GPUs when the ranks started (its caching
// allocator's count, the ddp case's label fact launcher_reserved_gib): next to nothing, though
// single's model, optimizer state and cached blocks had been there.
TEST(GpuLaunch, TheLaunchingProcessHoldsNextToNothingWhenItsRanksStart) {
  const auto& found = large_then_ranks();
  if (!found) GTEST_SKIP() << "needs a GPU, none visible";
  ASSERT_FALSE(found->ddp.is_null()) << found->run.err;
  const auto reserved = label_fact(found->ddp, "launcher_reserved_gib");
  ASSERT_FALSE(reserved.empty()) << found->ddp.dump();
  EXPECT_LT(std::stod(reserved), 0.25) << found->ddp.dump();
}

}  // namespace
}  // namespace parbench
