// The run's environment, written into the JSON context (docs/JSON.md).
#pragma once

#include "benchmarks/options.h"

#include <string>
#include <utility>
#include <vector>

namespace parbench {

inline constexpr const char* kJsonSchemaVersion = "1.5.0";

// Key/value pairs describing the build, the devices and the command line.
std::vector<std::pair<std::string, std::string>> run_context(const Options& options);

// The hosts of a distributed case's ranks, by rank. The run's largest world gives `rank_hosts`.
void note_rank_hosts(const std::vector<std::string>& hosts);

// The context known only once the cases have run: `rank_hosts`, a JSON array (docs/JSON.md).
// Safe from any thread.
std::vector<std::pair<std::string, std::string>> late_run_context();

}  // namespace parbench
