#include "benchmarks/distributed_runner.h"

namespace parbench {

// Placeholder until the launcher lands (in progress).
void run_distributed_case(benchmark::State& state, const CaseSpec& spec, const Options& options) {
  state.SkipWithError("ddp launcher not built yet");
}

}  // namespace parbench
