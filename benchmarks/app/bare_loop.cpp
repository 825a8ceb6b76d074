// parbench_bare_loop: the reference parbench's harness is held to (docs/METRICS.md, "Harness
// cost"). The same model and the same `single` train_step, on a batch made once on the device,
// timed with a steady clock and a device synchronisation per step: no Google Benchmark, no
// profiler, no counters. Prints one JSON line with the median, spread and every step's time.
//
//   parbench_bare_loop [--model=resnet50] [--batch=8] [--image=128] [--seq=1024]
//                      [--precision=fp32|bf16] [--warmup=5] [--steps=50] [--device=0]
// --seq applies to language models, --image to image models (models/model_zoo.h: what a model's
// samples are).
#include "models/model_zoo.h"
#include "strategies/strategy.h"
#include "strategies/training.h"
#include "strategies/whole_number.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>
#include <stdexcept>
#include <string>

namespace {

using parbench::parse_whole_number;

struct LoopOptions {
  parbench::RunConfig config;
  int64_t warmup = 5;
  int64_t steps = 50;
  int64_t device = 0;
};

int64_t whole_number(const std::string& flag, const std::string& text, int64_t minimum) {
  const auto value = parse_whole_number(text);
  if (!value || *value < minimum) {
    throw std::invalid_argument("--" + flag + "=" + text + " must be a whole number of at least " +
                                std::to_string(minimum));
  }
  return *value;
}

LoopOptions parse(int argc, char** argv) {
  LoopOptions options;
  options.config.batch_size = 8;
  for (int i = 1; i < argc; ++i) {
    const std::string argument = argv[i];
    const auto equals = argument.find('=');
    if (argument.rfind("--", 0) != 0 || equals == std::string::npos) {
      throw std::invalid_argument("unexpected argument '" + argument + "' (flags are --name=value)");
    }
    const auto flag = argument.substr(2, equals - 2);
    const auto value = argument.substr(equals + 1);
    if (flag == "model") {
      options.config.model = value;
    } else if (flag == "batch") {
      options.config.batch_size = whole_number(flag, value, 1);
    } else if (flag == "image") {
      options.config.image_size = whole_number(flag, value, 1);
    } else if (flag == "seq") {
      options.config.seq_len = whole_number(flag, value, 1);
    } else if (flag == "precision" && (value == "fp32" || value == "bf16")) {
      options.config.precision = value == "bf16" ? parbench::Precision::kBFloat16 : parbench::Precision::kFloat32;
    } else if (flag == "warmup") {
      options.warmup = whole_number(flag, value, 0);
    } else if (flag == "steps") {
      options.steps = whole_number(flag, value, 1);
    } else if (flag == "device") {
      options.device = whole_number(flag, value, 0);
    } else {
      throw std::invalid_argument("unknown option " + argument +
                                  " (allowed: --model, --batch, --image, --seq, --precision=fp32|bf16, --warmup, "
                                  "--steps, --device)");
    }
  }
  // Throws for an unknown model, naming the models allowed.
  const auto& model = parbench::ModelRegistry::instance().get(options.config.model);
  parbench::check_sequence_length(options.config.model, options.config.seq_len);
  if (!model.language_model() && options.config.image_size < model.sample.min_side) {
    throw std::invalid_argument("--image=" + std::to_string(options.config.image_size) + " is smaller than " +
                                model.name + " accepts (at least " + std::to_string(model.sample.min_side) + ")");
  }
  parbench::fit_config_to_model(options.config);
  return options;
}

void synchronize(const torch::Device& device) {
  if (device.is_cuda()) torch::cuda::synchronize(device.index());
}

}  // namespace

int main(int argc, char** argv) {
  LoopOptions options;
  try {
    options = parse(argc, argv);
  } catch (const std::invalid_argument& error) {
    std::fprintf(stderr, "parbench_bare_loop: %s\n", error.what());
    return 2;
  }
  const torch::Device device = torch::cuda::is_available()
                                   ? torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(options.device))
                                   : torch::Device(torch::kCPU);
  const auto& config = options.config;
  const bool language_model = parbench::ModelRegistry::instance().get(config.model).language_model();
  auto single = parbench::StrategyRegistry::instance().get("single").create();
  single->setup([&](torch::Device on) { return parbench::make_model(config.model, config.num_classes, on); }, {device}, config);
  const auto batch = parbench::make_random_batch(config, config.batch_size, device, device);

  for (int64_t step = 0; step < options.warmup; ++step) single->train_step(batch);
  std::vector<double> samples_ms;
  for (int64_t step = 0; step < options.steps; ++step) {
    synchronize(device);
    const auto began = std::chrono::steady_clock::now();
    single->train_step(batch);
    synchronize(device);
    samples_ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - began).count());
  }
  auto sorted = samples_ms;
  std::sort(sorted.begin(), sorted.end());
  const auto at = [&](double quantile) { return sorted[static_cast<size_t>(quantile * (sorted.size() - 1) + 0.5)]; };
  const nlohmann::ordered_json result = {
      {"tool", "parbench_bare_loop"},
      {"model", config.model},
      {"batch", config.batch_size},
      {language_model ? "seq" : "image", language_model ? config.seq_len : config.image_size},
      {"precision", parbench::to_string(config.precision)},
      {"device", device.str()},
      {"step_ms", {{"median", at(0.5)}, {"p10", at(0.1)}, {"p90", at(0.9)}, {"min", sorted.front()}, {"max", sorted.back()}}},
      {"samples_ms", samples_ms}};
  std::printf("%s\n", result.dump().c_str());
  return 0;
}
