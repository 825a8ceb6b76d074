// The run's environment, written into the JSON context (docs/JSON.md).
#pragma once

#include "benchmarks/options.h"

#include <string>
#include <utility>
#include <vector>

namespace parbench {

inline constexpr const char* kJsonSchemaVersion = "1.3.0";

// Key/value pairs describing the build, the devices and the command line.
std::vector<std::pair<std::string, std::string>> run_context(const Options& options);

// Adds run_context() to Google Benchmark's context.
void add_run_context(const Options& options);

}  // namespace parbench
