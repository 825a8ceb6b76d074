#include "benchmarks/run/allreduce.h"

#include "benchmarks/cases/cases.h"
#include "benchmarks/launch/launcher.h"
#include "benchmarks/output/counters.h"
#include "benchmarks/output/outcomes.h"
#include "benchmarks/run/distributed_runner.h"
#include "core/device_timer.h"

#include <algorithm>
#include <numeric>
#include <set>
#include <stdexcept>

namespace parbench {
namespace {

constexpr int64_t kSmallestBytes = 1024;
constexpr int64_t kLargestBytes = 256LL * 1024 * 1024;
// An iteration is a run of back-to-back all-reduces: about kBytesPerIteration bytes' worth, so
// small ones are long enough to time, and at least kLeastPerIteration (nccl-tests' default
// -n), so the ranks' skew leaving the barrier before it is spread over many: with one
// 102 MB all-reduce per iteration that skew had cost 15-25% of the measured bandwidth.
constexpr int64_t kBytesPerIteration = 64LL * 1024 * 1024;
constexpr int64_t kLeastPerIteration = 20;
constexpr int64_t kMostPerIteration = 100;

void all_reduce(c10d::Backend& backend, const torch::Tensor& buffer) {
  std::vector<at::Tensor> tensors{buffer};
  backend.allreduce(tensors)->wait();
}

}  // namespace

int64_t all_reduces_per_iteration(int64_t bytes) {
  return std::clamp<int64_t>(kBytesPerIteration / bytes, kLeastPerIteration, kMostPerIteration);
}

std::vector<AllreduceCase> build_allreduce_cases(const Options& options, int gpus) {
  // The sweep measures what a distributed strategy's all-reduces can reach.
  bool distributed_runs = false;
  for (const auto* strategy : StrategyRegistry::instance().all()) {
    const bool asked = options.strategies.empty() ? !strategy->is_opt_in()
                                                  : std::find(options.strategies.begin(), options.strategies.end(),
                                                              strategy->name()) != options.strategies.end();
    distributed_runs |= asked && strategy->is_distributed();
  }
  // NCCL's ranks cannot share a GPU, as a --devices list with repeats would have them.
  const bool shared_gpus = std::set<int>(options.devices.begin(), options.devices.end()).size() < options.devices.size();
  if (!distributed_runs || !options.allreduce || shared_gpus) return {};
  std::vector<int64_t> sizes;
  for (int64_t bytes = kSmallestBytes; bytes <= kLargestBytes; bytes *= 4) sizes.push_back(bytes);
  sizes.push_back(kResNet50GradientBytes);
  std::sort(sizes.begin(), sizes.end());

  const int ranks = multi_device_count(options, gpus);
  std::vector<AllreduceCase> cases;
  for (auto bytes : sizes) {
    auto allreduce = allreduce_case(bytes, ranks);
    if (ranks > gpus) {
      allreduce.skip_reason = "needs " + std::to_string(ranks) + " GPUs, " + std::to_string(gpus) + " visible";
    }
    cases.push_back(allreduce);
  }
  return cases;
}

AllreduceCase allreduce_case(int64_t bytes, int ranks) {
  AllreduceCase allreduce;
  allreduce.name = "comm/allreduce/bytes:" + std::to_string(bytes) + "/ranks:" + std::to_string(ranks);
  allreduce.bytes = bytes;
  allreduce.ranks = ranks;
  return allreduce;
}

nlohmann::ordered_json allreduce_fields(const AllreduceCase& allreduce) {
  return {{"collective", "allreduce"}, {"bytes", allreduce.bytes}, {"ranks", allreduce.ranks}};
}

bool is_allreduce_fields(const nlohmann::json& fields) {
  return fields.is_object() && fields.contains("collective");
}

AllreduceCase allreduce_case_from_fields(const nlohmann::json& fields) {
  try {
    if (fields.at("collective").get<std::string>() != "allreduce") {
      throw std::invalid_argument("no collective of that name");
    }
    const auto bytes = fields.at("bytes").get<int64_t>();
    const auto ranks = fields.at("ranks").get<int>();
    // A float32 buffer of at least one element, on at least one rank.
    if (bytes < 4 || bytes % 4 != 0 || ranks < 1) throw std::invalid_argument("no all-reduce of that size");
    return allreduce_case(bytes, ranks);
  } catch (const nlohmann::json::exception& error) {
    throw std::invalid_argument("case fields " + fields.dump() + ": " + error.what());
  } catch (const std::invalid_argument& error) {
    throw std::invalid_argument("case fields " + fields.dump() + ": " + error.what());
  }
}

void register_allreduce_cases(const std::vector<AllreduceCase>& cases, const Options& options, RunProgress& progress) {
  for (const auto& allreduce : cases) {
    auto* benchmark =
        benchmark::RegisterBenchmark(allreduce.name.c_str(), [allreduce, &options, &progress](benchmark::State& state) {
          if (!allreduce.skip_reason.empty()) {
            state.SkipWithError(skipped_message(allreduce.skip_reason).c_str());
            return;
          }
          progress.case_started(allreduce.name);
          const LaunchedCase launched{allreduce.name, allreduce_fields(allreduce).dump()};
          const auto reported =
              report_next_repetition(state, launched, allreduce.ranks, options,
                                     [&](World& world) { return run_allreduce_rank(world, allreduce, options); });
          if (!reported) return;
          const auto& seconds = reported->run->repetitions[reported->index].seconds;
          const double mean_seconds = std::accumulate(seconds.begin(), seconds.end(), 0.0) / seconds.size();
          const double algbw = static_cast<double>(allreduce.bytes) / mean_seconds / 1e9;
          state.counters["bytes"] = static_cast<double>(allreduce.bytes);
          state.counters["algbw_gbps"] = algbw;
          state.counters["busbw_gbps"] = bus_bandwidth_gbps(algbw, allreduce.ranks);
          state.SetLabel(format_label(reported->run->facts));
        });
    benchmark->UseManualTime()->Unit(benchmark::kMillisecond);
    benchmark->Iterations(distributed_iterations(options));
  }
}

double bus_bandwidth_gbps(double algbw_gbps, int ranks) {
  const double n = ranks;
  return algbw_gbps * 2.0 * (n - 1.0) / n;
}

RankedRun run_allreduce_rank(World& world, const AllreduceCase& allreduce, const Options& options) {
  TORCH_CHECK(world.size() == allreduce.ranks, allreduce.name, " needs ", allreduce.ranks, " ranks, the world has ",
              world.size());
  const std::vector<torch::Device> devices{world.device()};
  auto& backend = *world.backend();
  auto buffer =
      torch::empty({allreduce.bytes / 4}, torch::TensorOptions().dtype(torch::kFloat32).device(world.device()));

  // Check the sum once: rank r contributes r + 1.
  world.report_progress("the checked all-reduce");
  buffer.fill_(world.rank() + 1);
  all_reduce(backend, buffer);
  const double expected = world.size() * (world.size() + 1) / 2.0;
  const auto wrong = buffer.ne(expected).sum().item<int64_t>();
  TORCH_CHECK(wrong == 0, "all-reduce of ", allreduce.bytes, " bytes gave ", wrong, " wrong elements (expected ",
              expected, " everywhere)");
  buffer.zero_();  // zeros stay zeros however often they are summed

  const int64_t per_iteration = all_reduces_per_iteration(allreduce.bytes);
  for (int step = 0; step < options.warmup_steps; ++step) {
    world.report_progress("warm-up step " + std::to_string(step + 1));
    for (int64_t i = 0; i < per_iteration; ++i) all_reduce(backend, buffer);
  }
  RankMeasurements mine;
  std::optional<NoiseOutcome> noise;
  mine.seconds = time_iterations_together(
      world, options, devices, [&] { for (int64_t i = 0; i < per_iteration; ++i) all_reduce(backend, buffer); },
      static_cast<double>(per_iteration), {}, &noise);

  RankedRun run;
  run.noise = noise;
  run.facts = {{"backend", world.backend_name()}, {"all_reduces_per_iteration", std::to_string(per_iteration)}};
  world.report_progress("handing in measurements");
  run = gather_run(world, mine, std::move(run));
  world.report_idle();
  return run;
}

}  // namespace parbench
