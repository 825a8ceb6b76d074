// The run's environment, written into the JSON context (docs/JSON.md).
#pragma once

#include "benchmarks/config/options.h"

#include <map>
#include <string>
#include <utility>
#include <vector>

namespace parbench {

inline constexpr const char* kJsonSchemaVersion = "1.17.0";

// --version: "parbench VERSION", then the commit it was built from, whether tracked files had
// changes then, and the LibTorch, CUDA and NCCL versions it was built with ("none" without
// CUDA), one "key: value" a line under the JSON context's keys.
std::string version_text();

// Key/value pairs describing the build, the devices and the command line.
std::vector<std::pair<std::string, std::string>> run_context(const Options& options);

// The hosts of a distributed case's ranks, by rank, and each rank's launch_facts() (RankInfo's
// launch). The run's largest world gives `rank_hosts` and `rank_launch`.
void note_rank_hosts(const std::vector<std::string>& hosts, const std::vector<std::string>& launches = {});

// The context known only once the cases have run: `rank_hosts` and `rank_launch`, JSON arrays
// (docs/JSON.md). Safe from any thread.
std::vector<std::pair<std::string, std::string>> late_run_context();

// This process's launch as a rank, as JSON text (docs/JSON.md, `rank_launch`): its host, its node
// rank where the launcher says it (GROUP_RANK, torchrun's; SLURM_NODEID, srun's), and its
// launcher, rendezvous and network variables (launcher_variables() and every NCCL_* and GLOO_*).
std::string launch_facts();

// The launcher's and the rendezvous' variables in this process's environment: MASTER_ADDR,
// MASTER_PORT, torchrun's (RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, GROUP_RANK, ROLE_RANK,
// ..., TORCHELASTIC_*), Open MPI's OMPI_COMM_WORLD_* and SLURM's job, node and task variables.
std::map<std::string, std::string> launcher_variables();

}  // namespace parbench
