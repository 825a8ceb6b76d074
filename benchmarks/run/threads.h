// Threads per device (docs/METRICS.md, "Threads per device"): every strategy computes with the
// same CPU threads per device, so that on a shared host single does not take all the cores one
// case and each of two ranks all of them the next (the cpu preset's --threads-per-device=auto).
// A rank gets threads_per_device intra-op threads; a case of D devices in one process, D times as
// many; the inter-op pool threads_per_device, set once per process.
#pragma once

#include "benchmarks/cases/cases.h"

#include <vector>

namespace parbench {

// The CPUs this process may run on (its affinity mask), at least 1.
int usable_cores();

// The most devices (ranks) a case that runs uses: 1 where none does.
int devices_in_run(const std::vector<CaseSpec>& cases);

// --threads-per-device resolved: kThreadsPerDeviceAuto gives max(1, cores / devices); 0 (off) and
// a count stay as they are.
int resolve_threads_per_device(int requested, int cores, int devices);

// Where `threads_per_device` > 0: this process's intra-op threads for work spread over `devices`
// devices in it (threads_per_device x devices). Nothing where it is 0 (off) or not yet resolved.
void apply_threads_per_device(int threads_per_device, int devices);

// The inter-op pool's size, threads_per_device where > 0: LibTorch allows it once per process,
// before any inter-op work; a later call changes nothing.
void set_interop_threads_once(int threads_per_device);

}  // namespace parbench
