#include "benchmarks/run/rank_worker.h"

#include "benchmarks/cases/cases.h"
#include "benchmarks/config/test_hooks.h"
#include "benchmarks/launch/elastic_error.h"
#include "benchmarks/launch/rank_failure.h"
#include "benchmarks/launch/rank_protocol.h"
#include "benchmarks/output/context.h"
#include "benchmarks/run/allreduce.h"
#include "benchmarks/run/distributed_runner.h"
#include "benchmarks/run/threads.h"
#include "strategies/distributed/store_sync.h"

#include <nlohmann/json.hpp>
#ifdef USE_C10D_NCCL
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <stdexcept>

namespace parbench {
namespace {

// A rank that stalled: where TORCH_NCCL_TRACE_BUFFER_SIZE is set (> 0), NCCL's flight recorder
// (c10d's dump_nccl_trace_json: each collective this rank's process groups issued and how far
// it got) goes to <output>.flight_recorder.rank<r>.json, `output` being --benchmark_out (or
// "parbench" without one). Returns "; NCCL flight recorder in FILE", or "" when nothing was written.
std::string dump_flight_recorder(const std::string& output, int rank) {
#ifdef USE_C10D_NCCL
  const char* size = std::getenv("TORCH_NCCL_TRACE_BUFFER_SIZE");
  if (size == nullptr || std::atol(size) <= 0) return "";
  const auto path = (output.empty() ? std::string("parbench") : output) + ".flight_recorder.rank" +
                    std::to_string(rank) + ".json";
  try {
    std::ofstream file(path);
    file << c10d::dump_nccl_trace_json(/*includeCollectives=*/true, /*onlyActive=*/false);
    if (file) return "; NCCL flight recorder in " + path;
  } catch (const std::exception& error) {
    return "; NCCL flight recorder not written: " + first_line(error);
  }
  return "; NCCL flight recorder not written: cannot write " + path;
#else
  return "";
#endif
}

// Every case comes as the fields the launcher wrote (benchmarks/launch/launcher.h), train and comm
// cases alike: the rank builds its case from them alone, never from a case matrix of its own,
// so it runs the case the benchmark process asked for whatever its options would sweep.
RankedRun run_launched_case(const WorkerRequest& request, const Options& options, World& world) {
  const auto path = request.result_dir + "/" + kCaseFile;
  std::ifstream file(path);
  if (!file) throw std::runtime_error("case " + request.case_name + " came without its fields (no " + path + ")");
  const auto fields = nlohmann::json::parse(file);
  const auto check_name = [&request](const std::string& built) {
    if (built != request.case_name) {
      throw std::runtime_error("case " + request.case_name + " was launched with the fields of " + built);
    }
  };
  if (is_allreduce_fields(fields)) {
    const auto allreduce = allreduce_case_from_fields(fields);
    check_name(allreduce.name);
    return run_allreduce_rank(world, allreduce, options);
  }
  // The ranks stand in for visible GPUs: the launcher has decided the case runs.
  const auto spec = case_from_fields(fields, options, world.size());
  check_name(spec.name);
  if (!spec.skip_reason.empty()) throw std::runtime_error("case " + spec.name + " is skipped: " + spec.skip_reason);
  return run_training_rank(world, spec, options, /*ends_with_case=*/true);
}

// What the launching process holds on `gpu` (kLauncherGpuVariable), where it said.
std::optional<double> launcher_gib_on(int gpu) {
  const char* text = std::getenv(kLauncherGpuVariable);
  if (text == nullptr) return std::nullopt;
  const auto holding = launcher_gpu_from_text(text);
  const auto found = holding.find(gpu);
  return found == holding.end() ? std::nullopt : std::optional<double>(found->second);
}

struct ExternalRank {
  RankInfo info;
  torch::Device device;
  std::chrono::milliseconds timeout;
  std::string output;            // --benchmark_out, for a flight recorder dump
  std::shared_ptr<World> world;  // joined on the first distributed case
  std::string failure;           // set once a distributed case failed on this rank
};

std::optional<ExternalRank>& external_rank() {
  static std::optional<ExternalRank> rank;
  return rank;
}

// One distributed case as this externally launched rank.
RankedRun run_as_external_rank(ExternalRank& external, int ranks, const std::function<RankedRun(World&)>& run_rank) {
  if (!external.failure.empty())
    throw std::runtime_error("not run: an earlier distributed case failed (" + external.failure + ")");
  try {
    if (!external.world) {
      const auto record_stall = [rank = external.info.rank, output = external.output](const std::string& message) {
        record_failure_for_launcher("rank " + std::to_string(rank) + ": " + message +
                                    dump_flight_recorder(output, rank));
      };
      external.world = std::make_shared<World>(external.info, external.device, external.timeout, record_stall);
      test_hooks::after_joining(*external.world);
    }
    if (ranks != external.world->size()) {
      throw std::runtime_error("the case needs " + std::to_string(ranks) + " ranks, the launcher started " +
                               std::to_string(external.world->size()));
    }
    return run_rank(*external.world);
  } catch (const std::exception& error) {
    external.failure = "rank " + std::to_string(external.info.rank) + ": " + first_line(error);
    std::fprintf(stderr, "parbench: %s\n", external.failure.c_str());  // ranks other than 0 report nothing else
    record_failure_for_launcher(external.failure);
    if (external.world) external.world->abort();
    throw std::runtime_error(external.failure);
  }
}

// An externally launched rank's process ending before its world was left together (an exit
// with status 0 mid-case included): recorded in the store, so that its peers name it at once
// (store_sync.h). The launcher alone would see the status.
void record_departure(int status, void*) { announce_departure(status); }

}  // namespace

std::optional<WorkerRequest> take_worker_flags(int* argc, char** argv) {
  std::optional<WorkerRequest> request;
  int kept = 1;
  for (int i = 1; i < *argc; ++i) {
    const std::string argument = argv[i];
    if (starts_with(argument, kWorkerFlag)) {
      if (!request) request.emplace();
      request->case_name = argument.substr(std::strlen(kWorkerFlag));
    } else if (starts_with(argument, kResultsFlag)) {
      if (!request) request.emplace();
      request->result_dir = argument.substr(std::strlen(kResultsFlag));
    } else {
      argv[kept++] = argv[i];
    }
  }
  *argc = kept;
  argv[kept] = nullptr;
  return request;
}

int run_worker(const WorkerRequest& request, Options options, int visible_gpus) {
  int rank = -1;
  std::optional<int> gpu;  // this rank's, once known
  try {
    if (request.case_name.empty() || request.result_dir.empty()) {
      throw std::runtime_error("a rank needs both --parbench-worker=CASE and --parbench-results=DIR");
    }
    const auto info = rank_info_from_environment();
    if (!info) throw std::runtime_error("a rank needs RANK and WORLD_SIZE in its environment (the launcher sets them)");
    rank = info->rank;
    test_hooks::before_joining(rank);
    if (options.gpus > 0 && options.gpus != info->world_size) {
      throw std::runtime_error("--gpus=" + std::to_string(options.gpus) + " but the launcher started " +
                               std::to_string(info->world_size) + " ranks");
    }
    // A scaling run's rank: its case names its count (case_from_fields), the world's size.
    if (!options.gpu_counts.empty() &&
        std::find(options.gpu_counts.begin(), options.gpu_counts.end(), info->world_size) == options.gpu_counts.end()) {
      throw std::runtime_error("the launcher started " + std::to_string(info->world_size) +
                               " ranks, not one of the --gpus counts");
    }
    options.gpu_counts.clear();
    options.gpus = info->world_size;
    set_interop_threads_once(options.threads_per_device);  // the number the launching process resolved
    auto rank_info = *info;
    rank_info.arguments = options.argv;
    rank_info.launch = launch_facts();
    const auto record_stall = [dir = request.result_dir, rank, output = options.benchmark_out](const std::string& message) {
      std::ofstream(error_file(dir, rank)) << message << dump_flight_recorder(output, rank) << "\n";
    };
    // --devices names each rank's GPU (distinct: check_devices and the case builder see to it).
    const auto device = options.devices.empty()
                            ? rank_device(*info, visible_gpus)
                            : torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(options.devices.at(rank)));
    if (device.is_cuda()) gpu = device.index();
    auto world = std::make_shared<World>(rank_info, device, timeout_of(options.dist_timeout_s),
                                         record_stall);
    test_hooks::after_joining(*world);

    const auto run = run_launched_case(request, options, *world);
    if (rank == 0) {
      const auto path = request.result_dir + "/" + kResultFile;
      std::ofstream file(path + ".partial");
      file << to_json_value(run).dump();
      file.close();
      if (!file || std::rename((path + ".partial").c_str(), path.c_str()) != 0) {
        throw std::runtime_error("could not write " + path + ": " + std::strerror(errno));
      }
    }
    world->leave();
    std::ofstream(done_file(request.result_dir, rank)) << "done\n";
    return 0;
  } catch (const std::exception& error) {
    auto message = first_line(error);
    // Out of memory on its GPU: said so, with what the launching process holds there.
    if (gpu && is_out_of_memory(message)) message = out_of_memory_reason(*gpu, launcher_gib_on(*gpu), message);
    // One write: other ranks may be failing onto the same stderr at the same moment.
    const auto line = "parbench: " + describe_rank_failure({rank, message}) + "\n";
    [[maybe_unused]] const auto written = write(STDERR_FILENO, line.data(), line.size());
    if (rank >= 0) std::ofstream(error_file(request.result_dir, rank)) << message << "\n";
    std::fflush(nullptr);
    std::_Exit(1);  // no unwinding: a collective stuck in another thread must not hang the exit
  }
}

std::optional<RankInfo> external_launch(Options& options, int visible_gpus) {
  std::optional<RankInfo> info;
  try {
    info = rank_info_from_environment();
  } catch (const std::invalid_argument& error) {
    throw UsageError(error.what());
  }
  if (!info) return std::nullopt;
  if (!options.gpu_counts.empty()) {
    throw UsageError("--gpus with several counts does not apply under a launcher: its world size of " +
                     std::to_string(info->world_size) + " is the one count (leave --gpus out)");
  }
  if (options.gpus > 0 && options.gpus != info->world_size) {
    throw UsageError("--gpus=" + std::to_string(options.gpus) + " does not match the world size of " +
                     std::to_string(info->world_size) + " from the launcher's " + info->source +
                     " variables (leave --gpus out under a launcher)");
  }
  std::optional<torch::Device> device;
  try {
    device = rank_device(*info, visible_gpus);
  } catch (const std::invalid_argument& error) {
    throw UsageError(error.what());
  }
  options.gpus = info->world_size;
  info->arguments = options.argv;
  info->launch = launch_facts();
  external_rank() = ExternalRank{*info, *device, timeout_of(options.dist_timeout_s), options.benchmark_out, nullptr, ""};
  // After external_rank()'s static, so that the handler runs before it is destroyed.
  watch_departures();
  on_exit(record_departure, nullptr);
  return info;
}

int finish_external_launch() {
  auto& external = external_rank();
  if (!external) return 0;
  int status = external->failure.empty() ? 0 : 1;
  if (status == 0 && external->world) {
    try {
      external->world->leave();
    } catch (const std::exception& error) {
      std::fprintf(stderr, "parbench: rank %d: %s\n", external->info.rank, first_line(error).c_str());
      record_failure_for_launcher("rank " + std::to_string(external->info.rank) + ": " + first_line(error));
      external->world->abort();
      status = 1;
    }
  }
  external->world.reset();
  return status;
}

bool launched_externally() { return external_rank().has_value(); }

RankedRun run_as_external_rank(int ranks, const std::function<RankedRun(World&)>& run_rank) {
  return run_as_external_rank(*external_rank(), ranks, run_rank);
}

}  // namespace parbench
