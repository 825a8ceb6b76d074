// The parbench binary end to end: a short CPU run's JSON, and bad input.
#include "benchmarks/config/options.h"
#include "benchmarks/output/context.h"
#include "benchmarks/launch/temporary_directory.h"
#include "core/device_timer.h"
#include "models/model_zoo.h"
#include "tests/option_parsing.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <torch/version.h>

#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <optional>
#include <regex>
#include <sched.h>
#include <set>
#include <sstream>

namespace {

struct Run {
  int exit_code = -1;
  std::string output;  // stdout and stderr
  std::string error;   // stderr alone
};

Run run_parbench(const std::string& arguments) {
  const parbench::TemporaryDirectory dir("parbench-cli-stderr");
  const std::string stderr_path = dir.file("stderr");
  const std::string command = std::string(PARBENCH_BINARY) + " " + arguments + " 2>" + stderr_path;
  Run run;
  std::array<char, 4096> buffer{};
  FILE* pipe = popen(command.c_str(), "r");
  while (fgets(buffer.data(), buffer.size(), pipe)) run.output += buffer.data();
  const int status = pclose(pipe);
  run.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  std::ifstream error_file(stderr_path);
  run.error.assign(std::istreambuf_iterator<char>(error_file), {});
  run.output += run.error;
  return run;
}

bool exists(const std::string& path) { return access(path.c_str(), F_OK) == 0; }

const char* kSmallRun = "--preset=cpu --models=tinycnn --batch=4 --image=16 --warmup=1 --repetitions=3 --iterations=2";

// A small CPU run (kSmallRun and `arguments`) and its JSON, read where the run succeeded.
struct JsonRun {
  Run run;
  nlohmann::json json;
};
JsonRun run_small_to_json(const parbench::TemporaryDirectory& dir, const std::string& arguments) {
  const auto out = dir.file("run.json");
  JsonRun result{run_parbench(std::string(kSmallRun) + " " + arguments + " --benchmark_out=" + out +
                              " --benchmark_out_format=json"),
                 {}};
  if (result.run.exit_code == 0) result.json = nlohmann::json::parse(std::ifstream(out));
  return result;
}

TEST(Cli, ShortRunWritesJsonWithCountersAndContext) {
  parbench::TemporaryDirectory dir("parbench-cli-test");
  const auto out = dir.file("run.json");
  const auto run = run_parbench(std::string(kSmallRun) + " --strategies=single,pipeline --split-sizes=2 --schedules=gpipe" +
                                " --benchmark_out=" + out + " --benchmark_out_format=json");
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_FALSE(exists(out + ".partial"));
  std::ifstream file(out);
  const auto json = nlohmann::json::parse(file);

  const auto& context = json["context"];
  for (const char* key : {"parbench_version", "parbench_json_schema", "git_sha", "git_dirty", "libtorch_version",
                          "cuda_version", "cudnn_version", "nccl_version", "gpu_count", "gpu_names", "tf32_cudnn",
                          "tf32_matmul", "host", "argv", "preset", "timer", "devices", "nvml", "driver_version",
                          "gpu_settings", "environment", "environment_set_by_parbench", "rank_hosts", "strategies",
                          "schedules"}) {
    EXPECT_TRUE(context.contains(key)) << key;
  }
  EXPECT_EQ(context["parbench_json_schema"], "1.17.0");
  EXPECT_EQ(context["strategies"], "single,model_parallel,pipeline,data_parallel,ddp,zero,tensor_parallel");
  EXPECT_EQ(context["schedules"], "tutorial,gpipe,1f1b,interleaved-1f1b,zb-h1");
  EXPECT_FALSE(context.contains("interrupted"));
  EXPECT_EQ(context["preset"], "cpu");
  const int gpu_count = std::stoi(context["gpu_count"].get<std::string>());
  const std::string devices = gpu_count > 0 ? "cuda" : "cpu";
  EXPECT_EQ(context["devices"], devices);

  int single_runs = 0, aggregates = 0, pipeline_runs = 0;
  for (const auto& benchmark : json["benchmarks"]) {
    const auto name = benchmark["name"].get<std::string>();
    if (name.rfind("train/pipeline/", 0) == 0) {
      // Every entry of a case carries its identity as data, options at their unnamed value included.
      EXPECT_EQ(benchmark["fields"], nlohmann::json::parse(
                R"({"strategy":"pipeline","model":"tinycnn","batch":4,"image":16,"precision":"fp32","data":"device",)"
                R"("gpus":2,"split":2,"schedule":"gpipe","lanes":1,"graph":"off"})"));
      // Two devices are needed: two GPUs, or two CPU stand-ins where there is no GPU.
      if (gpu_count == 1) {
        EXPECT_EQ(benchmark["error_message"], "skipped: needs 2 GPUs, 1 visible");
      } else {
        ASSERT_FALSE(benchmark.value("error_occurred", false)) << benchmark.dump();
        const auto label = ";" + benchmark["label"].get<std::string>() + ";";
        for (const auto& fact : {"devices=" + devices, std::string("schedule=gpipe"), std::string("lanes=1")}) {
          EXPECT_NE(label.find(";" + fact + ";"), std::string::npos) << fact << " in " << label;
        }
        if (benchmark["run_type"] == "iteration") ++pipeline_runs;
      }
      continue;
    }
    // Google Benchmark appends the fixed iteration count and the timing mode.
    ASSERT_EQ(benchmark["run_name"].get<std::string>(),
              "train/single/tinycnn/batch:4/image:16/precision:fp32/data:device/iterations:2/manual_time");
    ASSERT_FALSE(benchmark.value("error_occurred", false)) << benchmark.dump();
    EXPECT_EQ(benchmark["fields"], nlohmann::json::parse(
              R"({"strategy":"single","model":"tinycnn","batch":4,"image":16,"precision":"fp32","data":"device",)"
              R"("graph":"off"})"));
    if (benchmark["run_type"] == "aggregate") {
      ++aggregates;
      continue;
    }
    ++single_runs;
    EXPECT_EQ(benchmark["iterations"], 2);
    for (const char* counter : {"items_per_second", "step_ms", "tflops", "params", "batch", "image", "gpus"}) {
      EXPECT_TRUE(benchmark.contains(counter)) << counter;
    }
    EXPECT_GT(benchmark["step_ms"].get<double>(), 0);
    // images/s and step time describe the same measurement.
    EXPECT_NEAR(benchmark["items_per_second"].get<double>(), 4 / (benchmark["step_ms"].get<double>() / 1e3),
                1e-6 * benchmark["items_per_second"].get<double>());
    EXPECT_EQ(benchmark["batch"], 4);
    // Its devices and the threads its process computed with (the cpu preset's threads per device).
    EXPECT_EQ(benchmark["label"].get<std::string>().rfind("devices=" + devices + ";intra_op_threads=", 0), 0u)
        << benchmark["label"];
  }
  EXPECT_EQ(single_runs, 3);
  EXPECT_GE(aggregates, 3);  // mean, median, stddev (and cv)
  EXPECT_EQ(pipeline_runs, gpu_count == 1 ? 0 : 3);

  // Progress as each case starts, with an estimate from the second on; the summary last.
  const int to_run = gpu_count == 1 ? 1 : 2;
  EXPECT_TRUE(std::regex_search(run.error, std::regex("(^|\n)\\[1/" + std::to_string(to_run) +
                                                      " \\d\\d:\\d\\d:\\d\\d\\] train/single/tinycnn/")))
      << run.error;
  if (to_run == 2) {
    EXPECT_TRUE(std::regex_search(
        run.error, std::regex("\n\\[2/2 \\d\\d:\\d\\d:\\d\\d, about \\d\\d:\\d\\d:\\d\\d left\\] train/pipeline/")))
        << run.error;
  }
  const auto summary = gpu_count == 1 ? "parbench: 1 ran, 1 skipped (needs 2 GPUs, 1 visible), 0 failed\n"
                                      : "parbench: 2 ran, 0 skipped, 0 failed\n";
  EXPECT_EQ(run.error.substr(run.error.rfind('\n', run.error.size() - 2) + 1), summary) << run.error;
}

// ddp on 2 CPU ranks, end to end: its `batch` is every rank's (2 x --batch in weak scaling,
// --batch in strong), images/s counts that batch per step, and TFLOP/s is three forwards of it.
TEST(Cli, DdpReportsTheGlobalBatchItsImagesPerSecondAndTflops) {
  parbench::TemporaryDirectory dir("parbench-cli-test");
  const auto [run, json] = run_small_to_json(dir, "--strategies=single,ddp --scaling=weak,strong --allreduce=off --steps=2");
  ASSERT_EQ(run.exit_code, 0) << run.output;
  if (json["context"]["gpu_count"] != "0") GTEST_SKIP() << "the CPU ranks' test: GPUs are visible";
  const double forward_flops =
      parbench::ModelRegistry::instance().get("tinycnn").forward_flops_per_sample(16, /*num_classes=*/1000);
  std::map<std::string, int> repetitions;
  for (const auto& entry : json["benchmarks"]) {
    if (entry["run_type"] != "iteration") continue;
    ASSERT_FALSE(entry.value("error_occurred", false)) << entry.dump();
    const auto name = entry["run_name"].get<std::string>();
    const bool ddp = name.rfind("train/ddp/", 0) == 0;
    const bool strong = name.find("/scaling:strong") != std::string::npos;
    const double batch = ddp && !strong ? 2 * 4 : 4;
    EXPECT_EQ(entry["batch"].get<double>(), batch) << name;
    EXPECT_EQ(entry["gpus"].get<double>(), ddp ? 2 : 1) << name;
    if (ddp) EXPECT_EQ(entry["world_size"].get<double>(), 2) << name;
    // real_time is one iteration of --steps=2 steps, in ms.
    EXPECT_NEAR(entry["real_time"].get<double>(), 2 * entry["step_ms"].get<double>(), 1e-6 * entry["real_time"].get<double>());
    const double ips = entry["items_per_second"].get<double>();
    EXPECT_NEAR(ips, batch / (entry["step_ms"].get<double>() / 1e3), 1e-6 * ips) << name;
    EXPECT_NEAR(entry["tflops"].get<double>(), 3 * forward_flops * ips / 1e12, 1e-6 * entry["tflops"].get<double>())
        << name;
    ++repetitions[ddp ? (strong ? "strong" : "weak") : "single"];
  }
  EXPECT_EQ(repetitions, (std::map<std::string, int>{{"single", 3}, {"strong", 3}, {"weak", 3}}));
}

// --optimizer=adamw on CPU: named in the case and its fields, and every case's memory breakdown
// per device, ddp's from each rank (rank i's as device i), meets the bytes-per-parameter formula:
// fp32 parameters 4, gradients 4, AdamW's state 8 (and a 4-byte step count per tensor).
TEST(Cli, AdamwCasesCarryEachDevicesAndEachRanksMemoryBreakdown) {
  parbench::TemporaryDirectory dir("parbench-cli-test");
  const auto [run, json] = run_small_to_json(dir, "--strategies=single,ddp --optimizer=sgd,adamw --allreduce=off --repetitions=1");
  ASSERT_EQ(run.exit_code, 0) << run.output;
  if (json["context"]["gpu_count"] != "0") GTEST_SKIP() << "the CPU ranks' test: GPUs are visible";
  constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
  std::set<std::string> names;
  for (const auto& entry : json["benchmarks"]) {
    if (entry["run_type"] != "iteration") continue;
    ASSERT_FALSE(entry.value("error_occurred", false)) << entry.dump();
    const auto name = entry["run_name"].get<std::string>();
    names.insert(name.substr(0, name.find("/iterations")));
    const bool adamw = name.find("/optimizer:adamw") != std::string::npos;
    EXPECT_EQ(entry["fields"].value("optimizer", "sgd"), adamw ? "adamw" : "sgd") << name;
    const double params = entry["params"].get<double>();
    const int devices = static_cast<int>(entry["gpus"].get<double>());
    for (int i = 0; i < devices; ++i) {
      const auto dev = "_dev" + std::to_string(i);
      EXPECT_DOUBLE_EQ(entry["param_mem_gib" + dev].get<double>() * kGiB, 4 * params) << name << dev;
      EXPECT_DOUBLE_EQ(entry["grad_mem_gib" + dev].get<double>() * kGiB, 4 * params) << name << dev;
      const double optim = entry["optim_mem_gib" + dev].get<double>() * kGiB;
      if (adamw) {
        EXPECT_NEAR(optim, 8 * params, 0.02 * 8 * params) << name << dev;
      } else {
        EXPECT_EQ(optim, 0) << name << dev;
      }
      EXPECT_NEAR(entry["model_state_mem_gib" + dev].get<double>() * kGiB, (adamw ? 16 : 8) * params,
                  0.02 * (adamw ? 16 : 8) * params) << name << dev;
    }
    EXPECT_FALSE(entry.contains("param_mem_gib_dev" + std::to_string(devices))) << name;
  }
  EXPECT_TRUE(names.count("train/single/tinycnn/batch:4/image:16/precision:fp32/data:device")) << run.output;
  EXPECT_TRUE(names.count("train/single/tinycnn/batch:4/image:16/precision:fp32/data:device/optimizer:adamw"));
  EXPECT_TRUE(names.count("train/ddp/tinycnn/batch:4/image:16/precision:fp32/data:device/optimizer:adamw/gpus:2/"
                          "bucket_mib:25/overlap:on/scaling:weak"))
      << run.output;
}

TEST(Cli, AnUnknownOptimizerIsRefusedNamingTheAllowedOnes) {
  const auto run = run_parbench("--optimizer=adam --benchmark_list_tests=true");
  EXPECT_EQ(run.exit_code, 2);
  EXPECT_NE(run.error.find("adam"), std::string::npos) << run.error;
  EXPECT_NE(run.error.find("sgd, adamw"), std::string::npos) << run.error;
  EXPECT_EQ(std::count(run.error.begin(), run.error.end(), '\n'), 1) << run.error;
}

// A CPU ddp case, traced (as ci/main-job.sh runs it), prints no GPU error: there is no GPU to
// ask about (docs/METRICS.md, "Pipeline timelines"). Its ranks and the profile companion each
// printed "ERROR: ... gpuGetDeviceCount failed with code 35" where no CUDA driver is installed.
TEST(Cli, ACpuDdpCasePrintsNoGpuErrors) {
  parbench::TemporaryDirectory dir("parbench-cli-test");
  // No GPU visible, on a GPU machine too (where CUDA then answers "no device", code 100).
  const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
  const std::optional<std::string> saved = visible ? std::optional<std::string>(visible) : std::nullopt;
  setenv("CUDA_VISIBLE_DEVICES", "", 1);
  const auto run = run_parbench(std::string(kSmallRun) + " --strategies=ddp --allreduce=off --trace=" + dir.file("traces"));
  if (saved) {
    setenv("CUDA_VISIBLE_DEVICES", saved->c_str(), 1);
  } else {
    unsetenv("CUDA_VISIBLE_DEVICES");
  }
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_EQ(run.error.find("gpuGetDeviceCount"), std::string::npos) << run.error;
  EXPECT_EQ(run.error.find("ERROR:"), std::string::npos) << run.error;
}

// A skipped case is not printed as an error once per repetition: it appears once, in a summary
// on stderr grouped by reason, and is recorded in the JSON with its reason.
TEST(Cli, SkipsAreListedOnceByReasonAndRecordedInTheJson) {
  parbench::TemporaryDirectory dir("parbench-cli-test");
  const auto out = dir.file("run.json");
  // Strong scaling of a batch of 3 over 2 or more ranks cannot run, with or without GPUs.
  const auto run = run_parbench(std::string(kSmallRun) + " --strategies=single,ddp --batch=3 --scaling=strong" +
                                " --allreduce=off --benchmark_out=" + out + " --benchmark_out_format=json");
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_EQ(run.output.find("ERROR OCCURRED"), std::string::npos) << run.output;
  EXPECT_EQ(run.output.find("train/ddp/"), std::string::npos) << run.output;  // not by name: in the summary

  std::ifstream file(out);
  const auto json = nlohmann::json::parse(file);
  std::string reason;
  int skipped_repetitions = 0;
  for (const auto& benchmark : json["benchmarks"]) {
    if (benchmark["run_name"].get<std::string>().rfind("train/ddp/", 0) != 0) continue;
    ++skipped_repetitions;
    reason = benchmark["error_message"].get<std::string>();
  }
  EXPECT_EQ(skipped_repetitions, 3);
  ASSERT_EQ(reason.rfind("skipped: ", 0), 0u) << reason;
  reason = reason.substr(std::strlen("skipped: "));
  EXPECT_NE(run.error.find("\nparbench: skipped 1 case (train/ddp): " + reason + "\n"), std::string::npos) << run.error;
  EXPECT_EQ(run.error.substr(run.error.rfind('\n', run.error.size() - 2) + 1),
            "parbench: 1 ran, 1 skipped (" + reason + "), 0 failed\n");
}

TEST(Cli, FilterSelectsTheCasesThatRunAndTheProgressCountsThem) {
  parbench::TemporaryDirectory dir("parbench-cli-test");
  const auto out = dir.file("run.json");
  const auto run = run_parbench(std::string(kSmallRun) + " --strategies=single,model_parallel" +
                                " --benchmark_filter=model_parallel --benchmark_out=" + out + " --benchmark_out_format=json");
  EXPECT_EQ(run.error.find("train/single/"), std::string::npos) << run.error;
  ASSERT_TRUE(exists(out)) << run.output;
  std::ifstream file(out);
  const auto json = nlohmann::json::parse(file);
  // With one GPU nothing runs: the run exits 3 (docs: "Exit status").
  EXPECT_EQ(run.exit_code, json["context"]["gpu_count"] == "1" ? 3 : 0) << run.output;
  for (const auto& benchmark : json["benchmarks"]) {
    EXPECT_EQ(benchmark["run_name"].get<std::string>().rfind("train/model_parallel/", 0), 0u) << benchmark.dump();
  }
  // model_parallel runs on 2 GPUs or 2 CPU stand-ins; with one GPU it is skipped, so nothing runs.
  if (json["context"]["gpu_count"] == "1") {
    EXPECT_EQ(run.error.find("[1/"), std::string::npos) << run.error;
    EXPECT_NE(run.error.find("parbench: 0 ran, 1 skipped (needs 2 GPUs, 1 visible), 0 failed\n"), std::string::npos)
        << run.error;
  } else {
    EXPECT_NE(run.error.find("[1/1 "), std::string::npos) << run.error;
  }
}

TEST(Cli, CudaGraphCasesAreNamedAndSkippedWithTheirReasons) {
  parbench::TemporaryDirectory dir("parbench-cli-test");
  const auto out = dir.file("graph.json");
  const auto run = run_parbench(std::string(kSmallRun) + " --strategies=single,model_parallel,pipeline,data_parallel" +
                                " --split-sizes=2 --schedules=gpipe --dp-replicate=broadcast,clone --cuda-graph=off,on" +
                                " --benchmark_out=" + out + " --benchmark_out_format=json");
  ASSERT_EQ(run.exit_code, 0) << run.output;
  std::ifstream file(out);
  const auto json = nlohmann::json::parse(file);
  const int gpu_count = std::stoi(json["context"]["gpu_count"].get<std::string>());
  const bool has_gpu = gpu_count > 0;
  const auto gpus = "/gpus:" + std::to_string(std::max(gpu_count, 2));
  std::set<std::string> names;
  for (const auto& benchmark : json["benchmarks"]) {
    const auto name = benchmark["run_name"].get<std::string>();
    names.insert(name);
    if (name.find("/graph:on") == std::string::npos || has_gpu) continue;
    EXPECT_NE(benchmark["error_message"].get<std::string>().find("CUDA graphs need a GPU"), std::string::npos) << name;
  }
  const std::string single = "train/single/tinycnn/batch:4/image:16/precision:fp32/data:device";
  const auto model_parallel = "train/model_parallel/tinycnn/batch:4/image:16/precision:fp32/data:device" + gpus;
  const auto pipeline = "train/pipeline/tinycnn/batch:4/image:16/precision:fp32/data:device" + gpus + "/split:2/schedule:gpipe";
  const auto data_parallel = "train/data_parallel/tinycnn/batch:4/image:16/precision:fp32/data:device" + gpus;
  std::set<std::string> expected;
  for (const auto& base : {single, model_parallel, pipeline, data_parallel + "/replicate:broadcast"}) {
    expected.insert(base + "/iterations:2/manual_time");
    expected.insert(base + "/graph:on/iterations:2/manual_time");
  }
  // A variant that cannot be captured runs without a graph only.
  expected.insert(data_parallel + "/replicate:clone/iterations:2/manual_time");
  EXPECT_EQ(names, expected);

  // Asked for graphs alone, it is listed as skipped, with the reason; since nothing ran, the run
  // says so on its last line and exits 3.
  const auto only = run_parbench(std::string(kSmallRun) + " --strategies=data_parallel --dp-replicate=clone" +
                                 " --cuda-graph=on --benchmark_out=" + out + " --benchmark_out_format=json");
  ASSERT_EQ(only.exit_code, 3) << only.output;
  EXPECT_EQ(only.error.substr(only.error.rfind('\n', only.error.size() - 2) + 1),
            "parbench: incomplete (exit status 3): no case ran: every one was skipped (the reasons are above)\n");
  std::ifstream only_file(out);
  const auto skipped = nlohmann::json::parse(only_file)["benchmarks"];
  ASSERT_FALSE(skipped.empty());
  for (const auto& benchmark : skipped) {
    EXPECT_EQ(benchmark["run_name"], data_parallel + "/replicate:clone/graph:on/iterations:2/manual_time");
    const auto reason = benchmark["error_message"].get<std::string>();
    EXPECT_NE(reason.find("data_parallel replicate:clone cannot be captured in a CUDA graph"), std::string::npos)
        << reason;
  }
}

// --advise predicts every modelled case, prints them ranked, and runs single and the best
// predicted ones with their predictions as counters.
TEST(Cli, AdviseRanksEveryModelledCaseAndRunsTheBestPredicted) {
  parbench::TemporaryDirectory dir("parbench-cli-test");
  const auto out = dir.file("advise.json");
  const auto run = run_parbench(std::string(kSmallRun) + " --strategies=single,model_parallel,pipeline,data_parallel,ddp" +
                                " --split-sizes=1,2 --schedules=gpipe,1f1b --advise=2" + " --benchmark_out=" + out +
                                " --benchmark_out_format=json");
  ASSERT_EQ(run.exit_code, 0) << run.output;
  std::ifstream file(out);
  const auto json = nlohmann::json::parse(file);
  const bool multi_device_runs = json["context"]["gpu_count"] != "1";
  // single, model_parallel, 4 pipeline cases and data_parallel; ddp is not modelled and is said
  // to be left out.
  const auto predictions = nlohmann::json::parse(json["context"]["advise_predictions"].get<std::string>());
  EXPECT_EQ(predictions.size(), multi_device_runs ? 7u : 1u) << predictions.dump();
  EXPECT_NE(run.error.find("case(s) left out"), std::string::npos) << run.error;
  EXPECT_NE(run.output.find("<- recommended"), std::string::npos) << run.output;
  std::map<std::string, int> rank_of;
  std::map<std::string, size_t> devices_of;
  for (const auto& prediction : predictions) {
    EXPECT_GT(prediction["predicted_step_ms"].get<double>(), 0.0) << prediction.dump();
    rank_of[prediction["name"]] = prediction["rank"];
    // The predicted peak per device (single one, the others two); tinycnn fits any device.
    const auto& peaks = prediction["predicted_peak_gib"];
    const auto name = prediction["name"].get<std::string>();
    EXPECT_EQ(peaks.size(), name.rfind("train/single/", 0) == 0 ? 1u : 2u) << prediction.dump();
    for (const auto& peak : peaks) EXPECT_GT(peak.get<double>(), 0.0) << prediction.dump();
    EXPECT_TRUE(prediction["fits"].get<bool>()) << prediction.dump();
    devices_of[name] = peaks.size();
  }
  EXPECT_NE(run.output.find("peak GiB"), std::string::npos) << run.output;
  EXPECT_NE(run.output.find("  images/s  peak GiB"), std::string::npos) << run.output;  // an image model's rate
  std::set<std::string> ran;
  std::map<std::string, std::string> skipped;  // by case: the reason
  for (const auto& benchmark : json["benchmarks"]) {
    if (benchmark["run_type"] != "iteration") continue;
    const auto name = benchmark["run_name"].get<std::string>();
    const auto case_name = name.substr(0, name.find("/iterations:"));
    // The cases it leaves out are in the JSON as skipped, with why.
    if (benchmark.value("error_occurred", false)) {
      const auto message = benchmark["error_message"].get<std::string>();
      ASSERT_EQ(message.rfind("skipped: ", 0), 0u) << name << ": " << message;
      skipped[case_name] = message.substr(std::strlen("skipped: "));
      continue;
    }
    ran.insert(case_name);
    ASSERT_TRUE(rank_of.count(case_name)) << name;
    EXPECT_EQ(benchmark["predicted_rank"].get<double>(), rank_of[case_name]) << name;
    EXPECT_GT(benchmark["predicted_step_ms"].get<double>(), 0.0) << name;
    for (size_t device = 0; device < devices_of[case_name]; ++device) {
      EXPECT_GT(benchmark["predicted_peak_gib_dev" + std::to_string(device)].get<double>(), 0.0) << name;
    }
    const bool single = case_name.rfind("train/single/", 0) == 0;
    EXPECT_TRUE(single || rank_of[case_name] <= 2) << name;
  }
  EXPECT_TRUE(ran.count("train/single/tinycnn/batch:4/image:16/precision:fp32/data:device"));
  EXPECT_GE(ran.size(), multi_device_runs ? 2u : 1u);
  EXPECT_LE(ran.size(), 3u);
  // Every case the options name either ran or was skipped with its reason: a predicted case
  // ranked below the best 2, a ddp case that no predictor covers.
  for (const auto& [name, rank] : rank_of) {
    if (ran.count(name) != 0) continue;
    ASSERT_TRUE(skipped.count(name)) << name << " is missing from the JSON";
    if (multi_device_runs) {
      EXPECT_GT(rank, 2) << name;
      EXPECT_EQ(skipped[name], "left out by --advise=2: not among the 2 best predicted of its set-up") << name;
    }
  }
  size_t ddp_cases = 0;
  for (const auto& [name, reason] : skipped) {
    if (name.rfind("train/ddp/", 0) != 0) continue;
    ++ddp_cases;
    EXPECT_EQ(reason, "left out by --advise: no predictor covers it on these devices") << name;
  }
  EXPECT_GE(ddp_cases, 1u);
  size_t train_skipped = 0;  // the all-reduce sweep's cases are skipped too
  for (const auto& entry : skipped) train_skipped += entry.first.rfind("train/", 0) == 0 ? 1 : 0;
  EXPECT_EQ(ran.size() + train_skipped, multi_device_runs ? 7u + ddp_cases : ran.size() + train_skipped);
  EXPECT_NE(run.error.find("parbench: " + std::to_string(ran.size()) + " ran, " + std::to_string(skipped.size()) +
                           " skipped"),
            std::string::npos)
      << run.error;
}

// A language model: named by its sequence length, tokens/s and the attention kernel recorded, and
// --advise profiles and predicts its staged cases as an image model's.
TEST(Cli, TransformerCasesCountTokensAndAdvisePredictsThem) {
  parbench::TemporaryDirectory dir("parbench-cli-test");
  const auto out = dir.file("gpt.json");
  const auto run = run_parbench("--preset=cpu --models=tinygpt --batch=4 --seq=16 --warmup=1 --repetitions=1"
                                " --iterations=1 --strategies=single,pipeline --split-sizes=2 --schedules=1f1b"
                                " --advise=all --benchmark_out=" + out + " --benchmark_out_format=json");
  ASSERT_EQ(run.exit_code, 0) << run.output;
  std::ifstream file(out);
  const auto json = nlohmann::json::parse(file);
  std::set<std::string> ran;
  for (const auto& benchmark : json["benchmarks"]) {
    if (benchmark["run_type"] != "iteration" || benchmark.value("error_occurred", false)) continue;
    const auto name = benchmark["run_name"].get<std::string>();
    ran.insert(name.substr(0, name.find("/iterations:")));
    EXPECT_EQ(benchmark["seq"], 16) << name;
    EXPECT_FALSE(benchmark.contains("image")) << name;
    EXPECT_NEAR(benchmark["tokens_per_second"].get<double>(), 16 * benchmark["items_per_second"].get<double>(),
                1e-6 * benchmark["tokens_per_second"].get<double>());
    EXPECT_GT(benchmark["predicted_step_ms"].get<double>(), 0.0) << name;
    EXPECT_NE(benchmark["label"].get<std::string>().find("attention="), std::string::npos) << benchmark["label"];
  }
  EXPECT_TRUE(ran.count("train/single/tinygpt/batch:4/seq:16/precision:fp32/data:device")) << run.output;
  // The ranking's rate is in tokens, a language model's unit: 4 sequences of 16 tokens a step.
  EXPECT_EQ(run.output.find("images/s"), std::string::npos) << run.output;
  const std::regex single_row(R"(\n +[0-9]+ +([0-9.]+) +([0-9]+) +[0-9.-]+ +train/single/tinygpt/)");
  std::smatch row;
  const auto tokens_at = run.output.find("tokens/s");
  ASSERT_NE(tokens_at, std::string::npos) << run.output;
  const std::string table = run.output.substr(tokens_at);
  ASSERT_TRUE(std::regex_search(table, row, single_row)) << table;
  // Within the rounding of the printed time (to 0.01 ms); sequences/s would be 16 times less.
  const double tokens_per_second = 1e3 * 4 * 16 / std::stod(row[1]);
  EXPECT_NEAR(std::stod(row[2]), tokens_per_second, 0.01 * tokens_per_second + 1) << row[0];
  if (json["context"]["gpu_count"] != "1") {
    EXPECT_TRUE(ran.count("train/pipeline/tinygpt/batch:4/seq:16/precision:fp32/data:device/gpus:2/split:2/schedule:1f1b"))
        << run.output;
  }
}

// --trace: one Chrome trace per case, of a step profiled outside the timed ones, with the
// schedule's actions as labelled ranges on the stage threads.
TEST(Cli, TraceWritesAChromeTracePerCaseWithTheScheduleLabelled) {
  std::optional<parbench::TemporaryDirectory> dir;
  dir.emplace("parbench-cli-trace");
  const auto folder = dir->path();
  const auto out = dir->file("run.json");
  const auto traces = dir->file("traces");
  const auto run = run_parbench(std::string(kSmallRun) +
                                " --strategies=single,pipeline --split-sizes=2 --schedules=1f1b --trace=" + traces +
                                " --benchmark_out=" + out + " --benchmark_out_format=json");
  ASSERT_EQ(run.exit_code, 0) << run.output;
  const auto json = nlohmann::json::parse(std::ifstream(out));
  std::map<std::string, std::string> trace_of;
  for (const auto& entry : json["benchmarks"]) {
    const std::string label = entry.value("label", "");
    const auto at = label.find("trace=");
    ASSERT_NE(at, std::string::npos) << label;
    trace_of[entry["run_name"]] = label.substr(at + 6, label.find(';', at) - at - 6);
  }
  ASSERT_EQ(trace_of.size(), 2u);
  for (const auto& [name, path] : trace_of) {
    const auto trace = nlohmann::json::parse(std::ifstream(path));
    std::map<std::string, std::set<long long>> threads_of;  // range name -> threads it ran on
    for (const auto& event : trace["traceEvents"]) {
      if (event.value("ph", "") == "X" && event.contains("tid") && event["tid"].is_number()) {
        threads_of[event["name"]].insert(event["tid"].get<long long>());
      }
    }
    if (name.find("train/single/") == 0) {
      for (const char* range : {"forward", "backward", "optimizer"}) EXPECT_TRUE(threads_of.count(range)) << range;
      continue;
    }
    // Batch 4 in micro-batches of 2 over 2 stages, each stage on its own thread.
    for (const char* range : {"F0 stage0", "F1 stage0", "F0 stage1", "B1 stage1", "B0 stage0", "optimizer stage1",
                              "send activation0 stage0->1", "send gradient1 stage1->0"}) {
      EXPECT_TRUE(threads_of.count(range)) << name << ": " << range;
    }
    if (threads_of.count("F0 stage0") && threads_of.count("F0 stage1")) {
      EXPECT_NE(*threads_of["F0 stage0"].begin(), *threads_of["F0 stage1"].begin());
    }
  }
  // The folder holds traces/, a folder of its own: it goes whole, leaving nothing behind.
  dir.reset();
  EXPECT_FALSE(exists(folder)) << folder << " was left behind";
}

// --print-schedule: 1f1b over 2 devices and 3 micro-batches in unit time, worked by hand: device 1
// starts each forward once device 0's ends, device 0 each backward once device 1's ends.
TEST(Cli, PrintScheduleDrawsTheActionGridAndRunsNothing) {
  const auto run = run_parbench("--print-schedule=1f1b --micro-batches=3");
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_NE(run.output.find("device 0: F0 F1 .  B0 F2 B1 .  B2\n"
                            "device 1: .  F0 B0 F1 B1 F2 B2 .\n"),
            std::string::npos)
      << run.output;
  const auto bad = run_parbench("--print-schedule=zigzag");
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.error.find("allowed: tutorial"), std::string::npos) << bad.error;
}

struct BadInput {
  std::string arguments;
  std::string expected;  // a phrase the one-line error must contain
};

void PrintTo(const BadInput& input, std::ostream* os) { *os << input.arguments; }

// --gpus=1,2 without GPUs: each count on as many CPU devices, single once, ddp at both counts,
// data_parallel (at least 2 devices) at 2; --help says which strategy starts at which count.
TEST(Cli, AListOfGpuCountsListsEachStrategyAtEachCount) {
  const auto run = run_parbench(std::string(kSmallRun) + " --strategies=single,data_parallel,ddp --gpus=1,2" +
                                " --allreduce=off --dp-replicate=broadcast --benchmark_list_tests");
  ASSERT_EQ(run.exit_code, 0) << run.output;
  const std::string setup = "/tinycnn/batch:4/image:16/precision:fp32/data:device";
  const std::string suffix = "/iterations:2/manual_time\n";
  const auto ddp = [&](int gpus) {
    return "train/ddp" + setup + "/gpus:" + std::to_string(gpus) + "/bucket_mib:25/overlap:on/scaling:weak" + suffix;
  };
  EXPECT_EQ(run.error, "") << run.error;
  EXPECT_EQ(run.output, "train/single" + setup + suffix + "train/data_parallel" + setup + "/gpus:2/replicate:broadcast" +
                            suffix + ddp(1) + ddp(2));
  const auto help = run_parbench("--help").output;
  EXPECT_NE(help.find("--gpus=N|LIST"), std::string::npos);
  EXPECT_NE(help.find("Minimums:\n" + std::string(25, ' ') + "ddp, zero, tensor_parallel: 1; model_parallel, pipeline, data_parallel: 2."),
            std::string::npos)
      << help;
}

class CliBadInput : public ::testing::TestWithParam<BadInput> {};

TEST_P(CliBadInput, OneLineErrorNonZeroExitAndNoOutputFile) {
  parbench::TemporaryDirectory dir("parbench-cli-test");
  const auto out = dir.file("bad.json");
  const auto run = run_parbench(GetParam().arguments + " --benchmark_out=" + out + " --benchmark_out_format=json");
  EXPECT_EQ(run.exit_code, 2) << run.output;
  EXPECT_EQ(std::count(run.error.begin(), run.error.end(), '\n'), 1) << run.error;
  EXPECT_NE(run.error.find(GetParam().expected), std::string::npos) << run.error;
  EXPECT_FALSE(exists(out));
  EXPECT_FALSE(exists(out + ".partial"));
}

INSTANTIATE_TEST_SUITE_P(
    Cases, CliBadInput,
    ::testing::Values(BadInput{"--models=resnet51", "allowed: resnet18"},
                      BadInput{"--strategies=zero3", "allowed: single"},
                      BadInput{"--precision=fp8", "fp32, bf16"},
                      BadInput{"--data=disk", "device, pinned, host"},
                      BadInput{"--batch=0", "at least 1"},
                      BadInput{"--batch=-5", "at least 1"},
                      BadInput{"--batch=ten", "not a whole number"},
                      BadInput{"--image=16", "smaller than resnet50 accepts"},
                      BadInput{"--models=tinygpt --seq=1025", "longer than tinygpt's context (at most 1024 tokens)"},
                      BadInput{"--gpus=64", "more GPUs than"},
                      BadInput{"--split-sizes=0", "at least 1"},
                      BadInput{"--schedules=zigzag", "tutorial, gpipe, 1f1b"},
                      BadInput{"--cuda-graph=yes", "on, off"},
                      BadInput{"--advise=0", "at least 1"},
                      BadInput{"--advise=maybe", "expected N (the best N predicted cases run, at least 1), all or off"},
                      BadInput{"'--cut=stem,layer9|head'", "unknown stage 'layer9'"},
                      // ResNet-50's stages are its blocks; a layer's name stands for its blocks.
                      BadInput{"'--cut=stem,layer1.3|layer2,layer3,layer4,head'",
                               "unknown stage 'layer1.3' (stages in order: stem, layer1 (layer1.0..layer1.2), "},
                      BadInput{"'--cut=stem,layer2|layer1,layer3,layer4,head'",
                               "'layer2' is out of order, repeated, or skips 'layer1.0'"},
                      BadInput{"--preset=fast", "default, tutorial, cpu"},
                      BadInput{"--devices=99", "--devices=99"},
                      BadInput{"--devices=a", "not a whole number"},
                      BadInput{"--busy-profile=maybe", "on, off"},
                      BadInput{"--trace=", "needs a directory"},
                      BadInput{"--colour=blue", "unknown option --colour"},
                      // An unknown flag is named, with the nearest known flag of parbench's or
                      // Google Benchmark's, before a value is looked for.
                      BadInput{"--batchsize=8", "parbench: unknown option --batchsize; did you mean --batch?"},
                      BadInput{"--batchsize 8", "parbench: unknown option --batchsize; did you mean --batch?"},
                      BadInput{"--benchmark_fliter=single", "unknown option --benchmark_fliter; did you mean --benchmark_filter?"},
                      BadInput{"--strategy=single", "unknown option --strategy; did you mean --strategies?"},
                      BadInput{"--version=1", "--version takes no value"},
                      BadInput{"--strategies=single --benchmark_filter=no-such-case", "selects no case of the 1 this run has"},
                      BadInput{"'--benchmark_filter=single(' --strategies=single", "not a valid extended regular expression"},
                      // Numbers that would abort, overflow or run nothing.
                      BadInput{"--strategies=ddp --bucket-mib=inf", "--bucket-mib=inf is not a finite number"},
                      BadInput{"--strategies=ddp --bucket-mib=nan", "--bucket-mib=nan is not a finite number"},
                      BadInput{"--strategies=ddp --bucket-mib=1e30", "--bucket-mib=1e30 must be at most"},
                      BadInput{"--benchmark_repetitions=-1", "--benchmark_repetitions=-1 must be at least 1"},
                      BadInput{"--benchmark_repetitions=0", "--benchmark_repetitions=0 must be at least 1"},
                      BadInput{"--benchmark_repetitions=x", "--benchmark_repetitions=x is not a whole number"},
                      BadInput{"--dist-timeout=inf", "--dist-timeout=inf is not a finite number"},
                      BadInput{"--dist-timeout=1e30", "--dist-timeout=1e30 must be at most 86400"},
                      BadInput{"--gpus=99999999999", "--gpus=99999999999 must be at most"},
                      // --gpus=LIST (a scaling run).
                      BadInput{"--gpus=0,2", "--gpus=0 must be at least 1"},
                      BadInput{"--gpus=1,two", "--gpus=two is not a whole number"},
                      BadInput{"--gpus=1,5000", "--gpus=5000 must be at most 4096"},
                      BadInput{"--gpus=1,2 --devices=0,1", "--gpus=1,2 and --devices cannot be combined"},
                      BadInput{"--gpus=1,2 --print-schedule=gpipe", "--gpus=1,2 and --print-schedule cannot be combined"},
                      BadInput{"--print-schedule=gpipe --micro-batches=100000000", "--micro-batches=100000000 must be at most"},
                      BadInput{"--print-schedule=zb-h1 --gpus=4000 --micro-batches=4000", "too large a grid to draw"},
                      BadInput{"--print-schedule=interleaved-1f1b --gpus=64 --micro-batches=4096 --chunks=64",
                               "too large a grid to draw"}),
    [](const auto& info) { return "case" + std::to_string(info.index); });

// --benchmark_out onto something that is not a regular file: parbench would write FILE.partial
// and rename it over FILE, replacing a device node, a symlink or a FIFO with a JSON file. It
// refuses (exit 2, one line naming the user's path) and leaves it as it was.
TEST(Cli, BenchmarkOutOntoSomethingNotARegularFileIsRefusedAndLeftAsItWas) {
  parbench::TemporaryDirectory dir("parbench-cli-out");
  const auto target = dir.file("target.json"), link = dir.file("link.json"), fifo = dir.file("fifo.json");
  std::ofstream(target) << "mine";
  ASSERT_EQ(symlink(target.c_str(), link.c_str()), 0);
  ASSERT_EQ(mkfifo(fifo.c_str(), 0644), 0);
  int pipe_fds[2];
  ASSERT_EQ(pipe(pipe_fds), 0);  // inherited by the shell popen starts, and by parbench: a process substitution
  const auto process_substitution = "/dev/fd/" + std::to_string(pipe_fds[1]);
  struct Target {
    std::string path, kind;
  };
  for (const auto& [path, kind] : std::vector<Target>{{link, "a symbolic link"},
                                                      {fifo, "a FIFO"},
                                                      {"/dev/null", "a character device"},
                                                      {process_substitution, "not a regular file"}}) {
    struct stat before {};
    ASSERT_EQ(lstat(path.c_str(), &before), 0) << path;
    const auto run = run_parbench("--strategies=single --benchmark_out=" + path + " --benchmark_out_format=json");
    EXPECT_EQ(run.exit_code, 2) << path << ": " << run.output;
    EXPECT_EQ(std::count(run.error.begin(), run.error.end(), '\n'), 1) << run.error;
    EXPECT_NE(run.error.find("cannot write --benchmark_out=" + path + ": "), std::string::npos) << run.error;
    EXPECT_NE(run.error.find(kind), std::string::npos) << run.error;
    struct stat after {};
    ASSERT_EQ(lstat(path.c_str(), &after), 0) << path << " is gone";
    EXPECT_EQ(after.st_mode, before.st_mode) << path;
    EXPECT_EQ(after.st_ino, before.st_ino) << path << " was replaced";
    EXPECT_FALSE(exists(path + ".partial"));
  }
  close(pipe_fds[0]);
  close(pipe_fds[1]);
  std::ifstream kept(target);
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(kept), {}), "mine");
}

// A file no run can write beside (a pseudo file system's): exit 2 before anything runs, naming
// the user's path, not Google Benchmark's message about FILE.partial after the run.
TEST(Cli, BenchmarkOutWhereNoFileCanBeMadeExits2NamingThePath) {
  for (const std::string path : {"/proc/version", "/proc/no-such-dir/run.json"}) {
    const auto run = run_parbench("--strategies=single --benchmark_out=" + path + " --benchmark_out_format=json");
    EXPECT_EQ(run.exit_code, 2) << path << ": " << run.output;
    EXPECT_EQ(std::count(run.error.begin(), run.error.end(), '\n'), 1) << run.error;
    EXPECT_NE(run.error.find("cannot write --benchmark_out=" + path + ": "), std::string::npos) << run.error;
  }
}

// An iteration stalled inside a repetition (PARBENCH_TEST_STALL_MS sleeps in the second) is
// flagged in that repetition's entry.
TEST(Cli, AStallInsideARepetitionIsFlagged) {
  parbench::TemporaryDirectory dir("parbench-cli-test");
  const auto out = dir.file("run.json");
  setenv("PARBENCH_TEST_STALL_MS", "1500", 1);
  const auto run = run_parbench("--preset=cpu --models=tinycnn --batch=4 --image=16 --warmup=1 --repetitions=2 "
                                "--iterations=4 --strategies=single --benchmark_out=" + out + " --benchmark_out_format=json");
  unsetenv("PARBENCH_TEST_STALL_MS");
  ASSERT_EQ(run.exit_code, 0) << run.output;
  const auto json = nlohmann::json::parse(std::ifstream(out));
  int repetitions = 0;
  for (const auto& entry : json["benchmarks"]) {
    if (entry["run_type"] != "iteration") continue;
    ++repetitions;
    EXPECT_EQ(entry["stalled"], 1) << entry.dump();
    EXPECT_GE(entry["iteration_max_over_median"].get<double>(), 3.0) << entry.dump();
  }
  EXPECT_EQ(repetitions, 2);
  // The console says so under the case's line, and the verdict names it.
  EXPECT_NE(run.output.find("\n    ^ 2 of 2 repetitions stalled\n"), std::string::npos) << run.output;
  EXPECT_NE(run.output.find("  Flagged: single (2 of 2 repetitions stalled)."), std::string::npos) << run.output;
}

// The label's `key=value` fact, or "".
std::string label_fact(const nlohmann::json& entry, const std::string& key) {
  const auto label = ";" + entry.value("label", std::string());
  const auto at = label.find(";" + key + "=");
  if (at == std::string::npos) return "";
  const auto start = at + key.size() + 2;
  return label.substr(start, label.find(';', start) - start);
}

// The cpu preset gives every device the same share of the cores (--threads-per-device=auto):
// single one device's, a rank one device's, a case of two devices in one process two devices'.
// The context records the share, each case's label the threads its process computed with.
TEST(Cli, EveryStrategyGetsTheSameThreadsPerDevice) {
  cpu_set_t set;
  CPU_ZERO(&set);
  ASSERT_EQ(sched_getaffinity(0, sizeof set, &set), 0);
  const int per_device = std::max(1, CPU_COUNT(&set) / 2);  // the most devices a case uses: 2
  parbench::TemporaryDirectory dir("parbench-cli-test");
  for (const std::string given : {"", "--threads-per-device=3"}) {
    const auto [run, json] = run_small_to_json(dir, "--strategies=single,model_parallel,ddp --allreduce=off " + given);
    ASSERT_EQ(run.exit_code, 0) << run.output;
    const int expected = given.empty() ? per_device : 3;
    EXPECT_EQ(json["context"]["threads_per_device"], std::to_string(expected)) << given;
    std::map<std::string, int> threads;
    for (const auto& entry : json["benchmarks"]) {
      if (entry["run_type"] != "iteration") continue;
      threads[entry["fields"]["strategy"].get<std::string>()] = std::stoi(label_fact(entry, "intra_op_threads"));
    }
    EXPECT_EQ(threads, (std::map<std::string, int>{{"single", expected}, {"model_parallel", 2 * expected},
                                                   {"ddp", expected}}))
        << given;
  }
  // off: LibTorch's own count, recorded as such.
  const auto [off, json] = run_small_to_json(dir, "--strategies=single --threads-per-device=off");
  ASSERT_EQ(off.exit_code, 0) << off.output;
  EXPECT_EQ(json["context"]["threads_per_device"], "off");
  for (const std::string bad : {"0", "many", "-2"}) {
    const auto refused = run_parbench("--preset=cpu --strategies=single --threads-per-device=" + bad);
    EXPECT_EQ(refused.exit_code, 2) << refused.output;
    EXPECT_NE(refused.error.find("--threads-per-device=" + bad), std::string::npos) << refused.error;
    EXPECT_EQ(std::count(refused.error.begin(), refused.error.end(), '\n'), 1) << refused.error;
  }
}

// A killed run (SIGKILL) leaves its ranks' results directory and its .partial file: the next run
// removes both at its start.
TEST(Cli, AStartRemovesWhatAKilledRunLeftBehind) {
  parbench::TemporaryDirectory dir("parbench-cli-test");
  parbench::TemporaryDirectory tmp("parbench-cli-tmp");
  const pid_t ended = fork();
  if (ended == 0) _exit(0);
  waitpid(ended, nullptr, 0);
  const auto stale = tmp.file("parbench-ranks-" + std::to_string(ended) + "-Ab12Cd");
  ASSERT_EQ(mkdir(stale.c_str(), 0755), 0);
  std::ofstream(stale + "/result.json.partial") << "{";
  const auto out = dir.file("run.json");
  std::ofstream(out + ".partial") << "{\"context\": {";
  setenv("TMPDIR", tmp.path().c_str(), 1);
  const auto run = run_parbench(std::string(kSmallRun) + " --strategies=single --benchmark_out=" + out +
                                " --benchmark_out_format=json");
  unsetenv("TMPDIR");
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_FALSE(exists(stale)) << "a killed run's results directory is still there";
  EXPECT_FALSE(exists(out + ".partial"));
  EXPECT_NO_THROW(nlohmann::json::parse(std::ifstream(out)));
}

TEST(Cli, HelpListsEveryOption) {
  const auto run = run_parbench("--help");
  EXPECT_EQ(run.exit_code, 0);
  for (const char* option : {"--preset", "--models", "--strategies", "--batch", "--image", "--precision", "--data",
                             "--seq", "--loss", "--gpus", "--warmup", "--steps", "--repetitions", "--iterations", "--timer",
                             "--cuda-graph", "--split-sizes", "--schedules", "--cut", "--bucket-mib", "--overlap", "--scaling",
                             "--dist-timeout", "--dp-replicate", "--advise", "--devices", "--busy-profile", "--trace", "--print-schedule", "--micro-batches",
                             "Exit status"}) {
    EXPECT_NE(run.output.find(option), std::string::npos) << option;
  }
}


// Lists and numbers checked as the command line is read: an empty list item, Google Benchmark's
// numeric flags (nan or 1e12 seconds ran forever), and a --dist-timeout too short to meet in.
INSTANTIATE_TEST_SUITE_P(
    ListsAndNumbers, CliBadInput,
    ::testing::Values(BadInput{"--batch=4,,8", "--batch=4,,8 has an empty item"},
                      BadInput{"--strategies=ddp --bucket-mib=25,,50", "--bucket-mib=25,,50 has an empty item"},
                      BadInput{"--benchmark_min_time=nan", "--benchmark_min_time=nan is not a finite number"},
                      BadInput{"--benchmark_min_time=1e12", "--benchmark_min_time=1e12 must be at most 3600 seconds"},
                      BadInput{"--benchmark_min_time=0", "--benchmark_min_time=0 must be above 0"},
                      BadInput{"--benchmark_min_time=0.5s", "--benchmark_min_time=0.5s is not a number of seconds"},
                      BadInput{"--benchmark_min_warmup_time=inf", "--benchmark_min_warmup_time=inf is not a finite number"},
                      BadInput{"--benchmark_min_warmup_time=-0.5", "--benchmark_min_warmup_time=-0.5 must be at least 0"},
                      BadInput{"--benchmark_min_warmup_time=1e9", "--benchmark_min_warmup_time=1e9 must be at most 3600"},
                      BadInput{"--benchmark_repetitions=1000001", "--benchmark_repetitions=1000001 must be at most 100000"},
                      BadInput{"--repetitions=1000001", "--repetitions=1000001 must be at most 100000"},
                      BadInput{"--dist-timeout=0.001", "--dist-timeout=0.001 must be at least 1 second"},
                      BadInput{"--dist-timeout=0.5", "--dist-timeout=0.5 must be at least 1 second"}),
    [](const auto& info) { return "case" + std::to_string(info.index); });

// Google Benchmark reads its flags from its environment too: BENCHMARK_MIN_TIME=nan is refused as
// --benchmark_min_time=nan is.
TEST(Cli, BenchmarkNumbersFromTheEnvironmentAreCheckedToo) {
  parbench::TemporaryDirectory dir("parbench-cli-test");
  const auto out = dir.file("run.json");
  setenv("BENCHMARK_MIN_TIME", "nan", 1);
  const auto run = run_parbench(std::string(kSmallRun) + " --strategies=single --benchmark_out=" + out);
  unsetenv("BENCHMARK_MIN_TIME");
  EXPECT_EQ(run.exit_code, 2) << run.output;
  EXPECT_EQ(run.error, "parbench: the variable BENCHMARK_MIN_TIME=nan is not a finite number\n");
  EXPECT_FALSE(exists(out));
}

// --trace names a file: refused before anything runs, the file left as it was.
TEST(Cli, TraceOntoAFileIsRefusedBeforeAnythingRuns) {
  parbench::TemporaryDirectory dir("parbench-cli-test");
  const auto file = dir.file("not-a-folder"), out = dir.file("run.json");
  std::ofstream(file) << "mine";
  const auto run = run_parbench(std::string(kSmallRun) + " --strategies=single --trace=" + file + " --benchmark_out=" + out);
  EXPECT_EQ(run.exit_code, 2) << run.output;
  EXPECT_EQ(run.error, "parbench: --trace=" + file + " is not a directory (it names a file): give a directory for the "
                       "traces, new or existing\n");
  EXPECT_FALSE(exists(out));
  std::ifstream kept(file);
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(kept), {}), "mine");
}

// A value repeated in a distributed strategy's list (--bucket-mib=25,25, --zero-stages=1,1) runs
// once: the run succeeds and its JSON has each case once per repetition, as the gate requires.
TEST(Cli, ARepeatedDistributedOptionValueRunsOnce) {
  parbench::TemporaryDirectory dir("parbench-cli-test");
  const auto result = run_small_to_json(dir, "--repetitions=2 --strategies=ddp,zero --bucket-mib=25,25 "
                                             "--zero-stages=1,1 --allreduce=off --dist-timeout=60");
  ASSERT_EQ(result.run.exit_code, 0) << result.run.output;
  std::set<std::pair<std::string, int>> seen;
  std::set<std::string> cases;
  for (const auto& entry : result.json["benchmarks"]) {
    if (entry["run_type"] != "iteration") continue;
    EXPECT_FALSE(entry.value("error_occurred", false)) << entry.dump();
    const auto name = entry["run_name"].get<std::string>();
    EXPECT_TRUE(seen.insert({name, entry["repetition_index"].get<int>()}).second) << name << " twice";
    cases.insert(name);
  }
  EXPECT_EQ(cases.size(), 2u) << result.run.output;  // one ddp case, one zero case
  EXPECT_NE(result.run.error.find("parbench: 2 ran, 0 skipped, 0 failed"), std::string::npos) << result.run.error;
}

// --version: the build's facts, one a line, and nothing run, whatever else the command line says.
TEST(Cli, VersionPrintsTheBuildsFactsOneALine) {
  for (const std::string arguments : {"--version", "--batch=8 --version --no-such-flag"}) {
    const auto run = run_parbench(arguments);
    EXPECT_EQ(run.exit_code, 0) << arguments << ": " << run.output;
    EXPECT_EQ(run.error, "") << arguments;
    std::vector<std::string> lines;
    std::istringstream text(run.output);
    for (std::string line; std::getline(text, line);) lines.push_back(line);
    ASSERT_EQ(lines.size(), 6u) << run.output;
    EXPECT_EQ(lines[0], std::string("parbench ") + PARBENCH_VERSION);
    EXPECT_TRUE(std::regex_match(lines[1], std::regex("git_sha: ([0-9a-f]{40}|unknown|\\S+)"))) << lines[1];
    EXPECT_TRUE(std::regex_match(lines[2], std::regex("git_dirty: (true|false|unknown)"))) << lines[2];
    EXPECT_EQ(lines[3], std::string("libtorch_version: ") + TORCH_VERSION);
    EXPECT_TRUE(std::regex_match(lines[4], std::regex("cuda_version: (none|[0-9]+\\.[0-9]+)"))) << lines[4];
    EXPECT_TRUE(std::regex_match(lines[5], std::regex("nccl_version: (none|[0-9]+\\.[0-9]+\\.[0-9]+.*)"))) << lines[5];
  }
}

TEST(Cli, AnUnknownOptionAtTheEndIsNamedNotAskedForAValue) {
  const auto run = run_parbench("--preset=cpu --colour");
  EXPECT_EQ(run.exit_code, 2);
  EXPECT_EQ(run.output, "parbench: unknown option --colour (see --help)\n");
  const auto misspelt = run_parbench("--verison");
  EXPECT_EQ(misspelt.exit_code, 2);
  EXPECT_EQ(misspelt.output, "parbench: unknown option --verison; did you mean --version?\n");
}

TEST(CliOptions, TheNearestFlagIsSuggestedOnlyWhereOneIsNear) {
  const std::vector<std::string> known = {"batch", "image", "seq", "strategies", "models", "cut", "benchmark_filter",
                                          "benchmark_format", "version"};
  EXPECT_EQ(parbench::nearest_flag("batchsize", known), "batch");
  EXPECT_EQ(parbench::nearest_flag("bacth", known), "batch");  // two letters swapped: one edit
  EXPECT_EQ(parbench::nearest_flag("strategy", known), "strategies");
  EXPECT_EQ(parbench::nearest_flag("model", known), "models");
  EXPECT_EQ(parbench::nearest_flag("benchmark_fliter", known), "benchmark_filter");
  EXPECT_EQ(parbench::nearest_flag("benchmark_formt", known), "benchmark_format");
  EXPECT_EQ(parbench::nearest_flag("colour", known), "");
  EXPECT_EQ(parbench::nearest_flag("zzz", known), "");
}

// Google Benchmark's context (the host, the caches, and every key of the JSON context) goes to
// stderr with --verbose alone; the JSON has it either way.
TEST(Cli, GoogleBenchmarksContextIsOnStderrOnlyWithVerbose) {
  parbench::TemporaryDirectory dir("parbench-cli-test");
  for (const bool verbose : {false, true}) {
    const auto [run, json] =
        run_small_to_json(dir, std::string("--strategies=single --repetitions=1") + (verbose ? " --verbose" : ""));
    ASSERT_EQ(run.exit_code, 0) << run.output;
    for (const char* context_line : {"\nRun on (", "\nparbench_json_schema: ", "\ngit_sha: "}) {
      EXPECT_EQ(("\n" + run.error).find(context_line) != std::string::npos, verbose)
          << "verbose " << verbose << ", " << context_line << " in:\n" << run.error;
    }
    EXPECT_EQ(json["context"]["parbench_json_schema"], std::string(parbench::kJsonSchemaVersion)) << "verbose " << verbose;
    EXPECT_TRUE(json["context"].contains("git_sha"));
  }
}

// On a machine without a GPU, a run sized for GPUs says so before it starts, naming its heaviest
// training step and how to get a CPU-sized run; the cpu preset's own run says nothing.
TEST(CliOptions, RunsSizedForGpusAreNamedSo) {
  using parbench::gpu_sized_note;
  using parbench::parsed_options;
  EXPECT_EQ(gpu_sized_note(parsed_options({}, /*has_gpu=*/false)), "");
  EXPECT_EQ(gpu_sized_note(parsed_options({"--models=tinycnn,tinygpt,gpt2-small"}, false)), "");
  EXPECT_EQ(gpu_sized_note(parsed_options({"--preset=tutorial"}, false)),
            "--preset=tutorial is sized for GPUs: its heaviest training step (resnet50 at batch 120 of 128x128 images) "
            "is 0.96 TFLOP, which on this CPU may take very long; for a CPU-sized run use --preset=cpu");
  EXPECT_NE(gpu_sized_note(parsed_options({"--preset=default"}, false)).find("--preset=default is sized for GPUs"),
            std::string::npos);
  const auto language = gpu_sized_note(parsed_options({"--models=gpt2-medium"}, false));
  EXPECT_EQ(language.rfind("this run is sized for GPUs: its heaviest training step (gpt2-medium at batch 8 of 64-token "
                           "sequences) is ",
                           0),
            0u)
      << language;
  EXPECT_NE(language.find("for a CPU-sized run use --preset=cpu with a smaller model, --batch, --image or --seq"),
            std::string::npos)
      << language;
  EXPECT_NE(gpu_sized_note(parsed_options({"--batch=256", "--image=128"}, false)).find("resnet50 at batch 256 of 128x128"),
            std::string::npos);
}

TEST(Cli, ARunSizedForGpusSaysSoOnTheCpuBeforeItStarts) {
  if (parbench::visible_gpu_count() > 0) GTEST_SKIP() << "the CPU's note: GPUs are visible";
  // A listing starts nothing, and says so as a run would.
  const auto tutorial = run_parbench("--preset=tutorial --benchmark_list_tests=true");
  EXPECT_EQ(tutorial.exit_code, 0) << tutorial.output;
  EXPECT_EQ(tutorial.error.rfind("parbench: --preset=tutorial is sized for GPUs: ", 0), 0u) << tutorial.error;
  EXPECT_NE(tutorial.error.find("for a CPU-sized run use --preset=cpu\n"), std::string::npos) << tutorial.error;
  const auto cpu = run_parbench("--preset=cpu --benchmark_list_tests=true");
  EXPECT_EQ(cpu.exit_code, 0) << cpu.output;
  EXPECT_EQ(cpu.error.find("sized for GPUs"), std::string::npos) << cpu.error;
}

}  // namespace
