// What a process of this binary needs to start another one of itself: the launcher's ranks and
// the profile companion (benchmarks/run/profile_companion.h) run the same binary and arguments.
#pragma once

#include <string>
#include <vector>

namespace parbench {

// This binary's path (/proc/self/exe).
std::string self_binary();

// This process's own arguments after argv[0], exactly as given.
std::vector<std::string> self_arguments();

}  // namespace parbench
