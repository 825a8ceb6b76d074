// Test hooks: the environment variables that only tests set (docs/DISTRIBUTED.md, "Test
// hooks"). This file is the one place that reads them; production code calls it once at each
// point where a hook acts, and does nothing there while the hook is unset (the default: parbench
// sets none itself, and no hook survives into a rank unless a test put it in the environment).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace parbench {

class Strategy;
class World;

namespace test_hooks {

// A rank of parbench's launcher before it joins its world: PARBENCH_TEST_ABSENT_RANK=<rank>
// never joins (it sleeps until it is killed).
void before_joining(int rank);

// The same rank once joined, before its case (and a rank of an external launcher once it has
// joined its world, in its first distributed case): PARBENCH_TEST_FAIL_RANK=<rank> exits with
// code 3, PARBENCH_TEST_QUIT_RANK=<rank> exits with code 0 as a return from main would (exit
// handlers run), PARBENCH_TEST_HANG_RANK=<rank> reports the progress "a hang on purpose
// (PARBENCH_TEST_HANG_RANK)" and hangs, busy (its watchdog runs).
void after_joining(World& world);

// A rank after its timed steps: PARBENCH_TEST_SAVE_WEIGHTS=DIR saves the whole model's parameters,
// then their gradients (Strategy::parameters_for_check, gradients_for_check: gathered where the
// strategy shards them), to DIR/rank<r>.pt (tests compare ranks with each other and with
// single-device training).
void after_timed_steps(const Strategy& strategy, int rank);

// A rank building its case's model: PARBENCH_TEST_SLOW_MODEL_BUILD_MS=MS sleeps that long first,
// as building a large model on the host does.
void while_building_model();

// A case that runs in this process, at its set-up: PARBENCH_TEST_FAIL_CASE=NAME throws for the
// case registered as NAME, as an exception or an out-of-memory error would.
void at_case_setup(const std::string& case_name);

// The same case, given its batch per process (RunConfig::batch_size):
// PARBENCH_TEST_OOM_ABOVE_BATCH=N throws an out-of-memory error above N, as a device that holds
// N samples' activations would (--fit=batch's tests).
void at_case_batch(int64_t batch_size);

// PARBENCH_TEST_STALL_MS=MS: how long to stall the second timed iteration of every repetition of a
// case run in this process, inside the timed region; 0 where unset.
int stall_ms();

// PARBENCH_TEST_NVML_DEVICE=<index>: the NVML device that CPU devices sample for their clocks
// (the fake libnvidia-ml.so.1 of tests/fake_nvml.cpp); nullopt where unset or empty.
std::optional<unsigned> nvml_device();

// PARBENCH_TEST_DEVICE_GIB=G: the capacity --advise takes each device to have, in GiB, in place of
// the GPU's (CPU stand-ins have none): a case predicted to need more is flagged as not fitting.
std::optional<double> device_gib();

// PARBENCH_TEST_MEMINFO=FILE: the file --fit=batch reads in place of /proc/meminfo for its bound on
// CPU devices' probes (a MemAvailable the test chooses); nullopt where unset or empty.
std::optional<std::string> meminfo_file();

}  // namespace test_hooks
}  // namespace parbench
