// Being a rank: of parbench's own launcher (hidden flags, the case's fields in the results
// directory) or of an external one (torchrun, srun, mpirun: RANK, WORLD_SIZE, ...).
#pragma once

#include "benchmarks/config/options.h"
#include "benchmarks/launch/rank_results.h"
#include "strategies/distributed/world.h"

#include <functional>
#include <optional>
#include <string>

namespace parbench {

// ---- Being a rank of parbench's launcher ---------------------------------------------------

struct WorkerRequest {
  std::string case_name;   // --parbench-worker=CASE, checked against the case its fields build
  std::string result_dir;  // --parbench-results=DIR, holding the case's fields (case.json)
};

// Takes the hidden flags parbench's launcher gives its ranks out of argv.
std::optional<WorkerRequest> take_worker_flags(int* argc, char** argv);

// Runs one case as one rank (its place from the environment the launcher set) and returns 0;
// rank 0 writes <result_dir>/result.json. A failing rank writes its reason to
// <result_dir>/error.<rank> and stderr and exits 1 at once: unwinding could hang in a stuck
// collective. The case is the one <result_dir>/case.json describes (benchmarks/launch/launcher.h), a
// train case's or an all-reduce case's fields. Its test hooks are benchmarks/config/test_hooks.h's.
int run_worker(const WorkerRequest& request, Options options, int visible_gpus);

// ---- Being a rank of an external launcher ----------------------------------------------------

// This process's place when torchrun, srun or mpirun started it, with options.gpus set to the
// world size; nullopt otherwise. Throws UsageError for bad variables, a --gpus that is not the
// world size, or a LOCAL_RANK with no GPU of that number.
std::optional<RankInfo> external_launch(Options& options, int visible_gpus);

// At the end of an externally launched run: leaves the world with the other ranks. Returns
// the exit code: 1 if a distributed case failed on this rank (its process group is then not
// trusted, so the later ones were skipped), else 0.
int finish_external_launch();

// Whether an external launcher started this process as one rank (external_launch said so).
bool launched_externally();

// One distributed case as this externally launched rank: joins the world on the first one;
// throws (naming the rank) once a case has failed here, for this one and every later one.
RankedRun run_as_external_rank(int ranks, const std::function<RankedRun(World&)>& run_rank);

}  // namespace parbench
