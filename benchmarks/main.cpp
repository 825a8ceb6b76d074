// parbench: times one model's training step under each parallelism strategy.
#include "benchmarks/allreduce.h"
#include "benchmarks/cases.h"
#include "benchmarks/context.h"
#include "benchmarks/launcher.h"
#include "benchmarks/options.h"

#include <benchmark/benchmark.h>
#include <torch/torch.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <map>
#include <optional>
#include <string>

int main(int argc, char** argv) {
  using namespace parbench;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--help") == 0 || std::strcmp(argv[i], "-h") == 0) {
      std::fputs(usage().c_str(), stdout);
      return 0;
    }
  }

  // Ranks started by parbench's own launcher carry hidden flags (benchmarks/launcher.h).
  const auto worker = take_worker_flags(&argc, argv);
  const int visible_gpus = torch::cuda::is_available() ? static_cast<int>(torch::cuda::device_count()) : 0;
  Options options;
  std::vector<char*> benchmark_args;
  std::optional<RankInfo> external;  // set when torchrun, srun or mpirun started this process as one rank
  try {
    options = parse_options(argc, argv, visible_gpus > 0, &benchmark_args);
    if (!worker) external = external_launch(options, visible_gpus);
    if (!worker && !external && options.gpus > visible_gpus) {
      throw UsageError("--gpus=" + std::to_string(options.gpus) + " asks for more GPUs than the " +
                       std::to_string(visible_gpus) + " visible");
    }
    const int multi_gpus = options.gpus > 0 ? options.gpus : visible_gpus;
    const auto cut_parts = std::count(options.cut.begin(), options.cut.end(), '|') + 1;
    if (!options.cut.empty() && options.cut != "balanced" && multi_gpus >= 2 && cut_parts != multi_gpus) {
      throw UsageError("--cut=" + options.cut + " places stages on " + std::to_string(cut_parts) + " devices but " +
                       std::to_string(multi_gpus) + " GPUs are used (set --gpus, or give one part per GPU)");
    }
  } catch (const UsageError& error) {
    std::fprintf(stderr, "parbench: %s\n", error.what());
    return 2;
  }
  if (worker) return run_worker(*worker, options, visible_gpus);

  // Under an external launcher only rank 0 writes output; the others run the cases silently.
  const bool writes_output = !external || external->rank == 0;
  if (!writes_output) {
    benchmark_args.erase(std::remove_if(benchmark_args.begin(), benchmark_args.end(),
                                        [](const char* arg) { return std::strncmp(arg, "--benchmark_out", 15) == 0; }),
                         benchmark_args.end());
  }

  // Google Benchmark writes its file as the run goes: point it at a temporary name and move
  // the file into place only once the run has finished, so no partial JSON is left behind.
  std::string out_flag, partial_path;
  bool user_set_repetitions = false;
  for (auto& arg : benchmark_args) {
    const std::string text = arg;
    if (text.rfind("--benchmark_repetitions", 0) == 0) user_set_repetitions = true;
    if (text.rfind("--benchmark_out=", 0) == 0) {
      partial_path = options.benchmark_out + ".partial";
      out_flag = "--benchmark_out=" + partial_path;
      arg = out_flag.data();
    }
  }
  // --repetitions sets Google Benchmark's own flag unless that was given.
  std::string repetitions_flag = "--benchmark_repetitions=" + std::to_string(options.repetitions);
  if (!user_set_repetitions) benchmark_args.push_back(repetitions_flag.data());
  int benchmark_argc = static_cast<int>(benchmark_args.size());
  benchmark::Initialize(&benchmark_argc, benchmark_args.data());
  if (benchmark::ReportUnrecognizedArguments(benchmark_argc, benchmark_args.data())) return 2;

  // Under an external launcher every process is one rank: only the distributed cases run, and
  // the launcher's ranks stand in for the visible GPUs.
  const int case_gpus = external ? external->world_size : visible_gpus;
  auto cases = build_cases(options, case_gpus);
  if (external) {
    cases.erase(std::remove_if(cases.begin(), cases.end(), [](const CaseSpec& spec) { return !spec.strategy->distributed; }),
                cases.end());
    if (writes_output) {
      std::fprintf(stderr, "parbench: rank 0 of %d (%s variables): running the distributed cases only\n",
                   external->world_size, external->source.c_str());
    }
  }
  std::map<std::string, std::pair<int, std::string>> skipped;  // strategy: cases, reason
  for (const auto& spec : cases) {
    if (spec.skip_reason.empty()) continue;
    auto& entry = skipped[spec.strategy->name];
    ++entry.first;
    entry.second = spec.skip_reason;
  }
  for (const auto& [strategy, entry] : skipped) {
    std::fprintf(stderr, "parbench: skipping %s (%d case%s): %s\n", strategy.c_str(), entry.first,
                 entry.first == 1 ? "" : "s", entry.second.c_str());
  }
  register_cases(cases, options);
  register_allreduce_cases(build_allreduce_cases(options, visible_gpus > 0 ? case_gpus : 0), options);
  add_run_context(options);
  if (writes_output) {
    benchmark::RunSpecifiedBenchmarks();
  } else {
    const auto silent = make_silent_reporter();
    benchmark::RunSpecifiedBenchmarks(silent.get());
  }
  benchmark::Shutdown();

  if (!partial_path.empty() && std::rename(partial_path.c_str(), options.benchmark_out.c_str()) != 0) {
    std::fprintf(stderr, "parbench: could not move %s to %s: %s\n", partial_path.c_str(),
                 options.benchmark_out.c_str(), std::strerror(errno));
    return 1;
  }
  return finish_external_launch();
}
