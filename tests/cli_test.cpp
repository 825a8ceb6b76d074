// The parbench binary end to end: a short CPU run's JSON, and bad input.
#include "benchmarks/temporary_directory.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <set>

namespace {

struct Run {
  int exit_code = -1;
  std::string output;  // stdout and stderr
  std::string error;   // stderr alone
};

Run run_parbench(const std::string& arguments) {
  const std::string stderr_path = "/tmp/parbench_stderr_" + std::to_string(getpid());
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
  unlink(stderr_path.c_str());
  return run;
}

bool exists(const std::string& path) { return access(path.c_str(), F_OK) == 0; }

const char* kSmallRun = "--preset=cpu --models=tinycnn --batch=4 --image=16 --warmup=1 --repetitions=3 --iterations=2";

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
                          "tf32_matmul", "host", "argv", "preset", "timer"}) {
    EXPECT_TRUE(context.contains(key)) << key;
  }
  EXPECT_EQ(context["parbench_json_schema"], "1.0.0");
  EXPECT_EQ(context["preset"], "cpu");

  int single_runs = 0, aggregates = 0;
  bool pipeline_skipped = false;
  for (const auto& benchmark : json["benchmarks"]) {
    const auto name = benchmark["name"].get<std::string>();
    if (name.rfind("train/pipeline/", 0) == 0) {
      // Two devices are needed; this machine may have none.
      if (benchmark.value("error_occurred", false)) {
        pipeline_skipped = true;
        EXPECT_NE(benchmark["error_message"].get<std::string>().find("needs 2 GPUs"), std::string::npos);
      }
      continue;
    }
    // Google Benchmark appends the fixed iteration count and the timing mode.
    ASSERT_EQ(benchmark["run_name"].get<std::string>(),
              "train/single/tinycnn/batch:4/image:16/precision:fp32/data:device/iterations:2/manual_time");
    ASSERT_FALSE(benchmark.value("error_occurred", false)) << benchmark.dump();
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
  }
  EXPECT_EQ(single_runs, 3);
  EXPECT_GE(aggregates, 3);  // mean, median, stddev (and cv)
  if (std::stoi(context["gpu_count"].get<std::string>()) < 2) EXPECT_TRUE(pipeline_skipped);
}

TEST(Cli, CudaGraphCasesAreNamedAndSkippedWithTheirReasons) {
  parbench::TemporaryDirectory dir("parbench-cli-test");
  const auto out = dir.file("graph.json");
  const auto run = run_parbench(std::string(kSmallRun) + " --strategies=single,model_parallel,pipeline" +
                                " --split-sizes=2 --schedules=gpipe --cuda-graph=off,on" +
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
  // Strategies that cannot be captured run without a graph only.
  const std::string single = "train/single/tinycnn/batch:4/image:16/precision:fp32/data:device";
  const auto model_parallel = "train/model_parallel/tinycnn/batch:4/image:16/precision:fp32/data:device" + gpus;
  const auto pipeline = "train/pipeline/tinycnn/batch:4/image:16/precision:fp32/data:device" + gpus;
  EXPECT_EQ(names, (std::set<std::string>{single + "/iterations:2/manual_time",
                                          single + "/graph:on/iterations:2/manual_time",
                                          model_parallel + "/iterations:2/manual_time",
                                          pipeline + "/split:2/schedule:gpipe/iterations:2/manual_time"}));

  // Asked for graphs alone, such a strategy is listed as skipped, with the reason.
  const auto only = run_parbench(std::string(kSmallRun) + " --strategies=pipeline --cuda-graph=on" +
                                 " --benchmark_out=" + out + " --benchmark_out_format=json");
  ASSERT_EQ(only.exit_code, 0) << only.output;
  std::ifstream only_file(out);
  const auto skipped = nlohmann::json::parse(only_file)["benchmarks"];
  ASSERT_FALSE(skipped.empty());
  for (const auto& benchmark : skipped) {
    EXPECT_EQ(benchmark["run_name"], pipeline + "/graph:on/iterations:2/manual_time");
    const auto reason = benchmark["error_message"].get<std::string>();
    EXPECT_NE(reason.find("pipeline cannot be captured in a CUDA graph (single, ddp can)"), std::string::npos) << reason;
  }
}

struct BadInput {
  std::string arguments;
  std::string expected;  // a phrase the one-line error must contain
};

void PrintTo(const BadInput& input, std::ostream* os) { *os << input.arguments; }

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
                      BadInput{"--gpus=64", "more GPUs than"},
                      BadInput{"--split-sizes=0", "at least 1"},
                      BadInput{"--schedules=zigzag", "tutorial, gpipe, 1f1b"},
                      BadInput{"--cuda-graph=yes", "on, off"},
                      BadInput{"'--cut=stem,layer9|head'", "unknown stage 'layer9'"},
                      BadInput{"--preset=fast", "default, tutorial, cpu"},
                      BadInput{"--colour=blue", "unknown option --colour"}),
    [](const auto& info) { return "case" + std::to_string(info.index); });

TEST(Cli, UnwritableOutputPathIsRejectedUpFront) {
  const auto run = run_parbench("--benchmark_out=/nonexistent-dir/run.json --benchmark_out_format=json");
  EXPECT_EQ(run.exit_code, 2);
  EXPECT_NE(run.error.find("cannot write --benchmark_out=/nonexistent-dir/run.json"), std::string::npos) << run.error;
}

TEST(Cli, HelpListsEveryOption) {
  const auto run = run_parbench("--help");
  EXPECT_EQ(run.exit_code, 0);
  for (const char* option : {"--preset", "--models", "--strategies", "--batch", "--image", "--precision", "--data",
                             "--loss", "--gpus", "--warmup", "--steps", "--repetitions", "--iterations", "--timer",
                             "--cuda-graph", "--split-sizes", "--schedules", "--cut", "--bucket-mib", "--overlap", "--scaling",
                             "--dist-timeout"}) {
    EXPECT_NE(run.output.find(option), std::string::npos) << option;
  }
}

}  // namespace
