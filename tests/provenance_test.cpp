// What a run records about where it ran (docs/JSON.md, 1.3.0): NVML's driver version and GPU
// settings (through a fake libnvidia-ml.so.1 built with the tests, and with none), the
// NCCL_*/CUDA_*/TORCH_* environment, what parbench set itself, and each rank's host. And the
// root cause a rank hands torchrun ($TORCHELASTIC_ERROR_FILE, docs/DISTRIBUTED.md).
#include "benchmarks/launch/temporary_directory.h"
#include "benchmarks/output/context.h"
#include "tests/parbench_process.h"

#include <gtest/gtest.h>

#include <dlfcn.h>
#include <unistd.h>

#include <array>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <fstream>

namespace parbench {
namespace {

constexpr double kDeadline = 120;

const std::vector<std::string> kQuickRun = {"--preset=cpu", "--models=tinycnn", "--batch=2", "--image=16",
                                            "--warmup=1", "--repetitions=1", "--iterations=2", "--allreduce=off"};

// The context of a quick CPU run of `strategies` with `environment` added to the test's.
nlohmann::json run_context(const std::string& strategies, std::map<std::string, std::string> environment) {
  TemporaryDirectory dir("parbench-provenance-test");
  const auto out = dir.file("run.json");
  auto arguments = kQuickRun;
  arguments.push_back("--strategies=" + strategies);
  arguments.push_back("--benchmark_out=" + out);
  environment["CUDA_VISIBLE_DEVICES"] = "";
  environment["OMP_NUM_THREADS"] = "1";
  ParbenchProcess parbench(arguments, environment);
  const auto run = parbench.wait(kDeadline);
  EXPECT_EQ(run.exit_code, 0) << run.err;
  return read_json(out).at("context");
}

std::string this_host() {
  std::array<char, 256> host{};
  gethostname(host.data(), host.size() - 1);
  return host.data();
}

TEST(Provenance, AFakeNvmlsSettingsTheEnvironmentAndTheRanksHostsAreRecorded) {
  for (const char* name : {"NCCL_NVLS_ENABLE", "TORCH_SYMM_MEM_DISABLE_MULTICAST", "NVSHMEM_DISABLE_NVLS"}) {
    unsetenv(name);  // so that parbench sets it
  }
  const auto context = run_context("single,ddp", {{"LD_LIBRARY_PATH", FAKE_NVML_DIR},
                                                  {"NCCL_DEBUG", "WARN"},
                                                  {"TORCH_SHOW_CPP_STACKTRACES", "1"},
                                                  {"GLOO_SOCKET_IFNAME", "lo"},
                                                  {"MKL_NUM_THREADS", "3"}});
  // The CPU's threads (1.5.0): the variables as given, and the threads LibTorch computes with.
  EXPECT_EQ(context.at("omp_num_threads"), "1");
  EXPECT_EQ(context.at("mkl_num_threads"), "3");
  // LibTorch's own choice from both variables and the cores; a positive count in any case.
  EXPECT_GE(std::stoi(context.at("intra_op_threads").get<std::string>()), 1);
  EXPECT_EQ(context.at("parbench_json_schema"), kJsonSchemaVersion);
  EXPECT_EQ(context.at("nvml"), "ok");
  EXPECT_EQ(context.at("driver_version"), "555.42.06-fake");
  const auto gpus = nlohmann::json::parse(context.at("gpu_settings").get<std::string>());
  ASSERT_EQ(gpus.size(), 1u) << gpus.dump();
  const auto& gpu = gpus.at(0);
  EXPECT_EQ(gpu.at("name"), "Fake GPU");
  EXPECT_EQ(gpu.at("pci_bus_id"), "00000000:17:00.0");
  EXPECT_TRUE(gpu.at("cuda_index").is_null()) << "no CUDA device is visible to match it with";
  EXPECT_EQ(gpu.at("sm_clock_mhz"), 1755);
  EXPECT_EQ(gpu.at("sm_clock_max_mhz"), 1980);
  EXPECT_EQ(gpu.at("memory_clock_max_mhz"), 2619);
  EXPECT_TRUE(gpu.at("applications_sm_clock_mhz").is_null()) << "the fake says not supported";
  EXPECT_DOUBLE_EQ(gpu.at("power_limit_w").get<double>(), 700.0);
  EXPECT_EQ(gpu.at("persistence_mode"), true);

  const auto environment = nlohmann::json::parse(context.at("environment").get<std::string>());
  EXPECT_EQ(environment.at("NCCL_DEBUG"), "WARN");
  EXPECT_EQ(environment.at("TORCH_SHOW_CPP_STACKTRACES"), "1");
  EXPECT_EQ(environment.at("CUDA_VISIBLE_DEVICES"), "");
  EXPECT_EQ(environment.at("NCCL_NVLS_ENABLE"), "0");
  EXPECT_EQ(environment.at("GLOO_SOCKET_IFNAME"), "lo");  // 1.7.0
  EXPECT_FALSE(environment.contains("OMP_NUM_THREADS")) << "only NCCL_*, GLOO_*, CUDA_* and TORCH_* are recorded";
  EXPECT_EQ(environment.at("NVSHMEM_DISABLE_NVLS"), "1");
  EXPECT_EQ(nlohmann::json::parse(context.at("environment_set_by_parbench").get<std::string>()),
            nlohmann::json(
                {{"NCCL_NVLS_ENABLE", "0"}, {"TORCH_SYMM_MEM_DISABLE_MULTICAST", "1"}, {"NVSHMEM_DISABLE_NVLS", "1"}}));
  EXPECT_EQ(nlohmann::json::parse(context.at("rank_hosts").get<std::string>()),
            nlohmann::json({this_host(), this_host()}));
  // Each rank's launch (1.7.0): parbench's own launcher gives no node rank, so the host order does.
  const auto ranks = nlohmann::json::parse(context.at("rank_launch").get<std::string>());
  ASSERT_EQ(ranks.size(), 2u) << ranks.dump();
  for (int rank = 0; rank < 2; ++rank) {
    const auto& facts = ranks.at(rank);
    EXPECT_EQ(facts.at("rank"), rank);
    EXPECT_EQ(facts.at("host"), this_host());
    EXPECT_EQ(facts.at("node_rank"), 0);
    EXPECT_EQ(facts.at("node_rank_from"), "host order");
    const auto& variables = facts.at("variables");
    EXPECT_EQ(variables.at("RANK"), std::to_string(rank));
    EXPECT_EQ(variables.at("WORLD_SIZE"), "2");
    EXPECT_EQ(variables.at("MASTER_ADDR"), "127.0.0.1");
    EXPECT_EQ(variables.at("TORCHELASTIC_USE_AGENT_STORE"), "True");
    EXPECT_EQ(variables.at("NCCL_DEBUG"), "WARN");
    EXPECT_EQ(variables.at("GLOO_SOCKET_IFNAME"), "lo");
    EXPECT_FALSE(variables.contains("CUDA_VISIBLE_DEVICES")) << "launcher and network variables only";
  }
  // The process that wrote the file was started by no launcher.
  EXPECT_EQ(context.at("launcher_environment"), "{}");
}

TEST(Provenance, WithoutNvmlItIsRecordedAsUnavailableAndTheUsersSettingIsKept) {
  TemporaryDirectory empty("parbench-no-nvml");
  unsetenv("MKL_NUM_THREADS");
  const auto context = run_context("single", {{"LD_LIBRARY_PATH", empty.path()},
                                              {"NCCL_NVLS_ENABLE", "1"},
                                              {"TORCH_SYMM_MEM_DISABLE_MULTICAST", "0"},
                                              {"NVSHMEM_DISABLE_NVLS", "0"}});
  EXPECT_EQ(context.at("mkl_num_threads"), "unset");
  // A machine with NVIDIA's driver installed finds it through the loader's cache.
  void* real = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (real != nullptr) {
    dlclose(real);
    EXPECT_EQ(context.at("nvml"), "ok");
  } else {
    EXPECT_EQ(context.at("nvml").get<std::string>().rfind("unavailable: libnvidia-ml.so.1: cannot open shared object file", 0),
              0u)
        << context.at("nvml");
    EXPECT_EQ(context.at("driver_version"), "unknown");
    EXPECT_EQ(context.at("gpu_settings"), "[]");
  }
  EXPECT_EQ(nlohmann::json::parse(context.at("environment").get<std::string>()).at("NCCL_NVLS_ENABLE"), "1");
  EXPECT_EQ(context.at("environment_set_by_parbench"), "{}") << "the user's own values are kept";
  EXPECT_EQ(context.at("rank_hosts"), "[]") << "no distributed case ran";
  EXPECT_EQ(context.at("rank_launch"), "[]") << "no distributed case ran";
}

TEST(Provenance, AnNvmlWithoutADriverIsRecordedAsUnavailable) {
  const auto context = run_context("single", {{"LD_LIBRARY_PATH", FAKE_NVML_DIR}, {"FAKE_NVML_INIT_FAILS", "1"}});
  EXPECT_EQ(context.at("nvml"), "unavailable: nvmlInit_v2 failed (no driver loaded?)");
  EXPECT_EQ(context.at("driver_version"), "unknown");
  EXPECT_EQ(context.at("gpu_settings"), "[]");
}

// ---- The root cause for torchrun ----------------------------------------------------------

// The error file a rank left, checked against the format torch.distributed.elastic reads.
nlohmann::json read_error_file(const std::string& path) {
  const auto error = read_json(path);
  const auto& message = error.at("message");
  EXPECT_TRUE(message.at("message").is_string());
  const auto timestamp = message.at("extraInfo").at("timestamp").get<std::string>();
  EXPECT_FALSE(timestamp.empty());
  for (const char digit : timestamp) EXPECT_TRUE(std::isdigit(static_cast<unsigned char>(digit))) << timestamp;
  EXPECT_NEAR(std::stod(timestamp), static_cast<double>(std::time(nullptr)), 300);
  EXPECT_EQ(message.at("extraInfo").at("py_callstack"), message.at("message")) << "what torchrun's summary shows";
  return error;
}

// What git says of the source folder now, or "" where git cannot be asked.
std::string git_output(const std::string& arguments) {
  std::string output;
  std::array<char, 256> buffer{};
  FILE* pipe = popen(("git -C '" PARBENCH_SOURCE_DIR "' " + arguments + " 2>/dev/null").c_str(), "r");
  if (pipe == nullptr) return "";
  while (fgets(buffer.data(), buffer.size(), pipe)) output += buffer.data();
  if (pclose(pipe) != 0) return "";
  return output;
}

// The commit is read when the binary is built, not when it runs: a copy carried to another
// machine (no checkout there, or another one) still names its own source.
TEST(Provenance, ACopyOfTheBinaryRunAwayFromTheCheckoutNamesTheCommitItWasBuiltFrom) {
  auto head = git_output("rev-parse --verify -q HEAD");
  if (head.empty()) GTEST_SKIP() << "the source folder is not a git checkout here";
  head.pop_back();  // the newline
  const bool dirty = !git_output("status --porcelain --untracked-files=no").empty();
  TemporaryDirectory dir("parbench-provenance-copy");
  const auto copy = dir.file("parbench"), out = dir.file("run.json");
  std::string command = "cp '" PARBENCH_BINARY "' '" + copy + "' && cd '" + dir.path() +
                        "' && GIT_DIR=/nonexistent GIT_CEILING_DIRECTORIES=/ CUDA_VISIBLE_DEVICES= OMP_NUM_THREADS=1 '" +
                        copy + "' --strategies=single";
  for (const auto& argument : kQuickRun) command += " " + argument;
  command += " --benchmark_out='" + out + "' >/dev/null 2>&1";
  ASSERT_EQ(std::system(command.c_str()), 0) << command;
  const auto context = read_json(out).at("context");
  EXPECT_EQ(context.at("git_sha"), head);
  EXPECT_EQ(context.at("git_dirty"), dirty ? "true" : "false");
}

TEST(ElasticErrorFile, ARankThatFailsNamesTheCauseAndAnEarlierCauseIsKept) {
  TemporaryDirectory dir("parbench-elastic-test");
  const auto error_file = dir.file("error.json");
  auto environment = torchrun_environment(0, 2, free_port());  // rank 1 never comes
  environment["CUDA_VISIBLE_DEVICES"] = "";
  environment["TORCHELASTIC_ERROR_FILE"] = error_file;
  ParbenchProcess parbench({"--strategies=ddp", "--models=tinycnn", "--batch=2", "--image=16", "--dist-timeout=2"},
                           environment);
  const auto run = parbench.wait(kDeadline);
  EXPECT_EQ(run.exit_code, 1) << run.err;
  const auto message = read_error_file(error_file).at("message").at("message").get<std::string>();
  EXPECT_EQ(message.rfind("parbench: rank 0: ", 0), 0u) << message;
  EXPECT_NE(message.find("rank 1 did not join the rendezvous"), std::string::npos) << message;

  // A second failure of the same rank keeps the first, the root cause.
  environment["TORCHELASTIC_ERROR_FILE"] = error_file;
  ParbenchProcess again({"--batch=0"}, environment);
  EXPECT_EQ(again.wait(kDeadline).exit_code, 2);
  EXPECT_EQ(read_error_file(error_file).at("message").at("message").get<std::string>(), message);
}

TEST(ElasticErrorFile, ABadCommandLineUnderTorchrunNamesItself) {
  TemporaryDirectory dir("parbench-elastic-test");
  const auto error_file = dir.file("error.json");
  auto environment = torchrun_environment(1, 2, free_port());
  environment["TORCHELASTIC_ERROR_FILE"] = error_file;
  ParbenchProcess parbench({"--batch=0"}, environment);
  const auto run = parbench.wait(kDeadline);
  EXPECT_EQ(run.exit_code, 2) << run.err;
  const auto message = read_error_file(error_file).at("message").at("message").get<std::string>();
  EXPECT_NE(run.err.find(message + "\n"), std::string::npos) << "the file and stderr differ: " << message;
  EXPECT_NE(message.find("--batch"), std::string::npos) << message;
}

}  // namespace
}  // namespace parbench
