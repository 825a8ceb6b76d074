#include "benchmarks/config/test_hooks.h"

#include "strategies/strategy.h"
#include "strategies/distributed/world.h"

#include <torch/torch.h>

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <thread>
#include <vector>

namespace parbench::test_hooks {
namespace {

// The hook's value; "" where unset.
std::string hook(const char* variable) {
  const char* value = std::getenv(variable);
  return value != nullptr ? value : "";
}

bool names_rank(const char* variable, int rank) { return hook(variable) == std::to_string(rank); }

[[noreturn]] void hang_forever() {
  while (true) pause();
}

}  // namespace

void before_joining(int rank) {
  if (names_rank("PARBENCH_TEST_ABSENT_RANK", rank)) hang_forever();
}

void after_joining(World& world) {
  const int rank = world.rank();
  if (names_rank("PARBENCH_TEST_FAIL_RANK", rank)) {
    std::fprintf(stderr, "parbench: rank %d: exiting on purpose (PARBENCH_TEST_FAIL_RANK)\n", rank);
    std::_Exit(3);
  }
  if (names_rank("PARBENCH_TEST_QUIT_RANK", rank)) {
    std::fprintf(stderr, "parbench: rank %d: exiting 0 before its case on purpose (PARBENCH_TEST_QUIT_RANK)\n", rank);
    std::exit(0);  // as a return from main would: the exit handlers run
  }
  if (names_rank("PARBENCH_TEST_HANG_RANK", rank)) {
    world.report_progress("a hang on purpose (PARBENCH_TEST_HANG_RANK)");
    hang_forever();
  }
}

void after_timed_steps(const Strategy& strategy, int rank) {
  const auto dir = hook("PARBENCH_TEST_SAVE_WEIGHTS");
  if (dir.empty()) return;
  std::vector<torch::Tensor> tensors;
  for (const auto& parameter : strategy.parameters_for_check()) tensors.push_back(parameter.cpu());
  for (const auto& gradient : strategy.gradients_for_check()) tensors.push_back(gradient.cpu());
  torch::save(tensors, dir + "/rank" + std::to_string(rank) + ".pt");
}

void at_case_setup(const std::string& case_name) {
  if (const auto name = hook("PARBENCH_TEST_FAIL_CASE"); !name.empty() && name == case_name) {
    throw std::runtime_error("failing on purpose (PARBENCH_TEST_FAIL_CASE)");
  }
}

void while_building_model() {
  const auto milliseconds = std::atoi(hook("PARBENCH_TEST_SLOW_MODEL_BUILD_MS").c_str());
  if (milliseconds > 0) std::this_thread::sleep_for(std::chrono::milliseconds(milliseconds));
}

void at_case_batch(int64_t batch_size) {
  const auto limit = hook("PARBENCH_TEST_OOM_ABOVE_BATCH");
  if (!limit.empty() && batch_size > std::atoll(limit.c_str())) {
    throw std::runtime_error("out of memory on purpose: batch " + std::to_string(batch_size) +
                             " is above PARBENCH_TEST_OOM_ABOVE_BATCH=" + limit);
  }
}

int stall_ms() { return std::atoi(hook("PARBENCH_TEST_STALL_MS").c_str()); }

std::optional<unsigned> nvml_device() {
  const auto index = hook("PARBENCH_TEST_NVML_DEVICE");
  if (index.empty()) return std::nullopt;
  return static_cast<unsigned>(std::atoi(index.c_str()));
}

std::optional<double> device_gib() {
  const auto gib = hook("PARBENCH_TEST_DEVICE_GIB");
  if (gib.empty()) return std::nullopt;
  return std::atof(gib.c_str());
}

std::optional<std::string> meminfo_file() {
  const auto file = hook("PARBENCH_TEST_MEMINFO");
  if (file.empty()) return std::nullopt;
  return file;
}

}  // namespace parbench::test_hooks
