// parbench's options from a command line written as strings, for tests (argv[0] added).
#pragma once

#include "benchmarks/config/options.h"

#include <string>
#include <vector>

namespace parbench {

// Throws UsageError as parse_options does; Google Benchmark's flags are set aside.
inline Options parsed_options(std::vector<std::string> arguments, bool has_gpu) {
  arguments.insert(arguments.begin(), "parbench");
  std::vector<char*> argv;
  for (auto& argument : arguments) argv.push_back(argument.data());
  std::vector<char*> benchmark_args;
  return parse_options(static_cast<int>(argv.size()), argv.data(), has_gpu, &benchmark_args);
}

}  // namespace parbench
