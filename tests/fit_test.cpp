// "Will it fit" (--fit=batch, benchmarks/advise/fit.h): the search on its own, driven by a fake device
// that holds a known batch, and whole runs whose cases run out of memory above a batch the test
// sets (PARBENCH_TEST_OOM_ABOVE_BATCH), each probe a child process.
#include "benchmarks/advise/fit.h"
#include "benchmarks/launch/temporary_directory.h"
#include "tests/parbench_process.h"

#include <gtest/gtest.h>

#include <sys/resource.h>

#include <algorithm>
#include <fstream>
#include <functional>
#include <map>
#include <set>

namespace parbench {
namespace {

// The case name of a JSON entry: its run_name without Google Benchmark's suffixes.
std::string case_of(const nlohmann::json& entry) {
  const auto name = entry.at("run_name").get<std::string>();
  return name.substr(0, std::min(name.find("/iterations:"), name.find("/manual_time")));
}

// A device that holds `limit` samples: larger batches run out of memory. Records each batch probed.
struct FakeDevice {
  int64_t limit;
  std::vector<int64_t> probed;
  std::optional<int64_t> broken_at;  // a batch whose probe fails otherwise
  Probe operator()(int64_t batch) {
    probed.push_back(batch);
    if (broken_at && batch == *broken_at) return {ProbeResult::kFailed, "a rank died"};
    return {batch <= limit ? ProbeResult::kFits : ProbeResult::kOutOfMemory, ""};
  }
};

TEST(FitSearch, FindsTheLargestBatchAndShowsTheNextStepUpRunsOutOfMemory) {
  for (const int64_t limit : {1, 2, 37, 120, 121, 1000, 4095}) {
    for (const int64_t start : {1, 8, 120, 5000}) {
      FakeDevice device{limit, {}, std::nullopt};
      const auto search = search_largest_batch(start, 1, 65536, std::ref(device));
      EXPECT_EQ(search.failure, "") << "limit " << limit << " start " << start;
      EXPECT_EQ(search.largest_batch, limit) << "start " << start;
      ASSERT_TRUE(search.oom_batch) << "limit " << limit;
      EXPECT_EQ(*search.oom_batch, limit + 1);
      EXPECT_EQ(search.probes, static_cast<int>(device.probed.size()));
      // Both ends of the answer were probed: the found batch fits, the next one did not.
      EXPECT_NE(std::find(device.probed.begin(), device.probed.end(), limit), device.probed.end());
      EXPECT_NE(std::find(device.probed.begin(), device.probed.end(), limit + 1), device.probed.end());
      // Logarithmic: doubling or halving, then bisection.
      EXPECT_LE(search.probes, 2 * 14 + 2) << "limit " << limit << " start " << start;
    }
  }
}

TEST(FitSearch, ProbesMultiplesOfTheStepAlone) {
  FakeDevice device{37, {}, std::nullopt};
  const auto search = search_largest_batch(7, 4, 65536, std::ref(device));
  EXPECT_EQ(search.largest_batch, 36);
  EXPECT_EQ(search.oom_batch, 40);
  EXPECT_EQ(search.step, 4);
  for (const auto batch : device.probed) EXPECT_EQ(batch % 4, 0) << batch;
}

TEST(FitSearch, StopsAtTheCapWithoutAnOutOfMemoryBatch) {
  FakeDevice device{1 << 20, {}, std::nullopt};
  const auto search = search_largest_batch(100, 1, 1000, std::ref(device));
  EXPECT_EQ(search.failure, "");
  EXPECT_EQ(search.largest_batch, 1000);
  EXPECT_FALSE(search.oom_batch);
  for (const auto batch : device.probed) EXPECT_LE(batch, 1000);
}

TEST(FitSearch, SaysWhyWhenNothingFitsOrAProbeFails) {
  FakeDevice none{0, {}, std::nullopt};
  const auto nothing = search_largest_batch(64, 2, 65536, std::ref(none));
  EXPECT_EQ(nothing.failure, "out of memory even at batch 2, the smallest it can take");
  EXPECT_EQ(none.probed.back(), 2);

  FakeDevice broken{100, {}, 64};
  const auto failed = search_largest_batch(32, 1, 65536, std::ref(broken));
  EXPECT_EQ(failed.failure, "probing batch 64 failed: a rank died");
  EXPECT_EQ(broken.probed.back(), 64) << "the search stops at the failure";
}

TEST(FitSearch, OutOfMemoryMessagesAreRecognised) {
  EXPECT_TRUE(is_out_of_memory("CUDA out of memory. Tried to allocate 2.00 GiB"));
  EXPECT_TRUE(is_out_of_memory("rank 1: CUDA error: out of memory"));
  EXPECT_TRUE(is_out_of_memory("DefaultCPUAllocator: not enough memory: you tried to allocate 1 bytes. Out Of Memory"));
  EXPECT_FALSE(is_out_of_memory("NCCL error: unhandled system error"));
}

// A whole run: single and model_parallel (2 CPU devices) on a "device" that holds 37 samples per
// process. single's largest batch is 37; model_parallel's, in steps of its 2 devices, 36.
TEST(Fit, RunsEachCaseAtItsLargestBatchAndReportsTheSearch) {
  TemporaryDirectory dir("parbench-fit-test");
  ParbenchProcess parbench({"--preset=cpu", "--models=tinycnn", "--image=16", "--batch=8", "--warmup=1",
                            "--repetitions=2", "--iterations=1", "--strategies=single,model_parallel", "--fit=batch",
                            "--benchmark_out=" + dir.file("run.json"), "--benchmark_out_format=json"},
                           {{"CUDA_VISIBLE_DEVICES", ""}, {"PARBENCH_TEST_OOM_ABOVE_BATCH", "37"}});
  const auto run = parbench.wait(600);
  ASSERT_EQ(run.exit_code, 0) << run.err;
  const auto json = read_json(dir.file("run.json"));
  std::map<std::string, nlohmann::json> by_name;
  for (const auto& entry : json.at("benchmarks")) {
    if (entry.at("run_type") == "iteration") by_name[case_of(entry)] = entry;
  }
  const std::string single = "train/single/tinycnn/batch:37/image:16/precision:fp32/data:device/fit:batch";
  const std::string split = "train/model_parallel/tinycnn/batch:36/image:16/precision:fp32/data:device/gpus:2/fit:batch";
  ASSERT_TRUE(by_name.count(single)) << run.err;
  ASSERT_TRUE(by_name.count(split)) << run.err;
  EXPECT_EQ(by_name[single].at("fit_batch"), 37);
  EXPECT_EQ(by_name[single].at("fit_oom_batch"), 38);
  EXPECT_EQ(by_name[single].at("fit_step"), 1);
  EXPECT_EQ(by_name[single].at("batch"), 37);  // the timed case ran at the batch found
  EXPECT_EQ(by_name[split].at("fit_batch"), 36);
  EXPECT_EQ(by_name[split].at("fit_oom_batch"), 38);
  EXPECT_EQ(by_name[split].at("fit_step"), 2);
  EXPECT_GT(by_name[split].at("fit_probes"), 2);
  EXPECT_NE(run.err.find("batch 38: out of memory"), std::string::npos) << run.err;
  // Its fields say so, and name the batch found.
  EXPECT_EQ(by_name[single].at("fields").at("fit"), "batch");
  EXPECT_EQ(by_name[single].at("fields").at("batch"), 37);
}

// A probe that fails for another reason ends that case's search alone, as a failed case; the
// run goes on to the next case and exits 1.
TEST(Fit, AProbeThatFailsOtherwiseFailsItsCaseAlone) {
  TemporaryDirectory dir("parbench-fit-test");
  ParbenchProcess parbench({"--preset=cpu", "--models=tinycnn", "--image=16", "--batch=8", "--warmup=1",
                            "--repetitions=1", "--iterations=1", "--strategies=single,model_parallel", "--fit=batch",
                            "--fit-max-batch=64", "--benchmark_out=" + dir.file("run.json"),
                            "--benchmark_out_format=json"},
                           {{"CUDA_VISIBLE_DEVICES", ""},
                            {"PARBENCH_TEST_FAIL_CASE", "train/single/tinycnn/batch:16/image:16/precision:fp32/data:device"}});
  const auto run = parbench.wait(600);
  EXPECT_EQ(run.exit_code, 1) << run.err;
  const auto json = read_json(dir.file("run.json"));
  std::set<std::string> failed, ran;
  for (const auto& entry : json.at("benchmarks")) {
    const auto name = case_of(entry);
    if (entry.value("error_occurred", false)) {
      failed.insert(name);
      EXPECT_NE(entry.at("error_message").get<std::string>().find(
                    "--fit=batch: probing batch 16 failed: failing on purpose (PARBENCH_TEST_FAIL_CASE)"),
                std::string::npos)
          << entry.at("error_message");
    } else if (entry.at("run_type") == "iteration") {
      ran.insert(name);
      // Nothing ran out of memory below the cap: the cap is the answer, with no out-of-memory batch.
      EXPECT_EQ(entry.at("fit_batch"), 64);
      EXPECT_FALSE(entry.contains("fit_oom_batch"));
    }
  }
  EXPECT_EQ(failed, std::set<std::string>{"train/single/tinycnn/batch:8/image:16/precision:fp32/data:device/fit:batch"});
  EXPECT_EQ(ran, std::set<std::string>{"train/model_parallel/tinycnn/batch:64/image:16/precision:fp32/data:device/gpus:2/fit:batch"});
  // The failure decides the exit status; the last line still says the cap was reached.
  EXPECT_EQ(run.err.substr(run.err.rfind('\n', run.err.size() - 2) + 1),
            "parbench: incomplete: 1 case reached --fit-max-batch=64 without running out of memory: the largest "
            "batch that fits is at least that, not found (raise --fit-max-batch)\n");
}

// A search that reaches --fit-max-batch did not find what was asked, the largest batch that fits:
// the case runs at the cap, and the run says so on its last line and exits 3.
TEST(Fit, ReachingTheCapExits3AndSaysSo) {
  TemporaryDirectory dir("parbench-fit-test");
  ParbenchProcess parbench({"--preset=cpu", "--models=tinycnn", "--image=16", "--batch=4", "--warmup=1",
                            "--repetitions=1", "--iterations=1", "--strategies=single", "--fit=batch", "--fit-max-batch=8",
                            "--benchmark_out=" + dir.file("run.json"), "--benchmark_out_format=json"},
                           {{"CUDA_VISIBLE_DEVICES", ""}});
  const auto run = parbench.wait(600);
  EXPECT_EQ(run.exit_code, 3) << run.err;
  EXPECT_EQ(run.err.substr(run.err.rfind('\n', run.err.size() - 2) + 1),
            "parbench: incomplete (exit status 3): 1 case reached --fit-max-batch=8 without running out of memory: the "
            "largest batch that fits is at least that, not found (raise --fit-max-batch)\n");
  size_t repetitions = 0;
  const auto json = read_json(dir.file("run.json"));
  for (const auto& entry : json.at("benchmarks")) {
    if (entry.at("run_type") != "iteration") continue;
    ++repetitions;
    EXPECT_FALSE(entry.value("error_occurred", false)) << entry.dump();
    EXPECT_EQ(entry.at("fit_batch"), 8) << entry.dump();
    EXPECT_FALSE(entry.contains("fit_oom_batch"));
  }
  EXPECT_EQ(repetitions, 1u);
}

// A probe ended by a signal is said to be, by the signal's name: never "exited 137", which a probe
// that exits with code 137 would also read as.
TEST(FitProbe, AProbeKilledByASignalIsNamedSo) {
  TemporaryDirectory dir("parbench-fit-test");
  const auto killed = run_child("/bin/sh", {"-c", "kill -KILL $$"}, dir.file("killed.log"));
  ASSERT_TRUE(killed.finished);
  EXPECT_EQ(describe_end(killed), "was killed by signal 9 (SIGKILL)");
  const auto terminated = run_child("/bin/sh", {"-c", "kill -TERM $$"}, dir.file("terminated.log"));
  EXPECT_EQ(describe_end(terminated), "was killed by signal 15 (SIGTERM)");
  const auto exited = run_child("/bin/sh", {"-c", "exit 137"}, dir.file("exited.log"));
  EXPECT_EQ(describe_end(exited), "exited with code 137");
}

// On CPU devices the probes take host memory: each is bounded by half of MemAvailable.
TEST(FitHostBound, IsHalfOfMemAvailable) {
  const auto bound = host_memory_bound("MemTotal:       24000000 kB\nMemFree:         1000000 kB\n"
                                       "MemAvailable:   20971520 kB\nBuffers:          100000 kB\n");
  EXPECT_EQ(bound.bytes, uint64_t{20971520} * 1024 / 2);
  EXPECT_EQ(bound.text, "10.0 GiB (half of MemAvailable, 20.0 GiB)");
  for (const std::string without : {"MemTotal:       24000000 kB\n", "MemAvailable: lots\n", ""}) {
    const auto none = host_memory_bound(without);
    EXPECT_EQ(none.bytes, 0u) << without;
    EXPECT_EQ(none.text, "none (no MemAvailable in /proc/meminfo)") << without;
  }
}

TEST(FitHostBound, AFailedHostAllocationIsRecognised) {
  EXPECT_TRUE(is_host_allocation_failure("[enforce fail at alloc_cpu.cpp:121] data. DefaultCPUAllocator: not enough "
                                         "memory: you tried to allocate 4294967296 bytes."));
  EXPECT_TRUE(is_host_allocation_failure("std::bad_alloc"));
  EXPECT_TRUE(is_host_allocation_failure("mmap: Cannot allocate memory"));
  EXPECT_FALSE(is_host_allocation_failure("Expected all tensors to be on the same device"));
}

// The bound reaches the probe as its RLIMIT_DATA; without one the probe's is as this process's.
TEST(FitProbe, AProbeIsGivenItsDataLimit) {
  TemporaryDirectory dir("parbench-fit-test");
  const auto limited = dir.file("limited.log");
  ASSERT_TRUE(run_child("/bin/sh", {"-c", "ulimit -d"}, limited, uint64_t{512} << 20).finished);
  std::ifstream limited_log(limited);
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(limited_log), {}), "524288\n");  // KiB
  rlimit own{};
  ASSERT_EQ(getrlimit(RLIMIT_DATA, &own), 0);
  const auto unlimited = dir.file("unlimited.log");
  ASSERT_TRUE(run_child("/bin/sh", {"-c", "ulimit -d"}, unlimited).finished);
  std::ifstream unlimited_log(unlimited);
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(unlimited_log), {}),
            own.rlim_cur == RLIM_INFINITY ? "unlimited\n" : std::to_string(own.rlim_cur / 1024) + "\n");
}

// A whole run on CPU devices, its MemAvailable read from a file (PARBENCH_TEST_MEMINFO): each
// probe may take 2 GiB, half of it. tinycnn at 2048x2048 takes some 180 MB a sample, so a batch of
// about 8 fails to allocate: that is out of memory, and the search ends there instead of at
// --fit-max-batch=16, which the host's own memory would let it reach.
TEST(Fit, OnCpuDevicesTheSearchStopsAtTheHostMemoryBound) {
  TemporaryDirectory dir("parbench-fit-test");
  const auto meminfo = dir.file("meminfo");
  std::ofstream(meminfo) << "MemTotal:       16777216 kB\nMemAvailable:    4194304 kB\n";
  ParbenchProcess parbench({"--preset=cpu", "--models=tinycnn", "--image=2048", "--batch=4", "--warmup=1",
                            "--repetitions=1", "--iterations=1", "--strategies=single", "--fit=batch",
                            "--fit-max-batch=16", "--benchmark_out=" + dir.file("run.json"), "--benchmark_out_format=json"},
                           {{"CUDA_VISIBLE_DEVICES", ""}, {"PARBENCH_TEST_MEMINFO", meminfo}});
  const auto run = parbench.wait(600);
  ASSERT_EQ(run.exit_code, 0) << run.err;
  const std::string bound = "2.0 GiB (half of MemAvailable, 4.0 GiB)";
  EXPECT_NE(run.err.find("parbench: fit on CPU devices: host-memory bound " + bound +
                         ": a batch that needs more counts as out of memory\n"),
            std::string::npos)
      << run.err;
  EXPECT_NE(run.err.find(": out of memory (over the host-memory bound of " + bound + ")\n"), std::string::npos) << run.err;
  size_t repetitions = 0;
  const auto json = read_json(dir.file("run.json"));
  for (const auto& entry : json.at("benchmarks")) {
    if (entry.at("run_type") != "iteration") continue;
    ++repetitions;
    EXPECT_FALSE(entry.value("error_occurred", false)) << entry.dump();
    EXPECT_LT(entry.at("fit_batch").get<int>(), 16) << entry.dump();
    EXPECT_EQ(entry.at("fit_oom_batch").get<int>(), entry.at("fit_batch").get<int>() + 1) << entry.dump();
  }
  EXPECT_EQ(repetitions, 1u);
}

TEST(Fit, RefusesAdviseBesideIt) {
  ParbenchProcess parbench({"--preset=cpu", "--models=tinycnn", "--fit=batch", "--advise=1"}, {{"CUDA_VISIBLE_DEVICES", ""}});
  const auto run = parbench.wait(60);
  EXPECT_EQ(run.exit_code, 2);
  EXPECT_NE(run.err.find("parbench: --fit=batch and --advise run one at a time"), std::string::npos) << run.err;
}

}  // namespace
}  // namespace parbench
