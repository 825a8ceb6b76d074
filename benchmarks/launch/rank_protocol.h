// What parbench's launcher (benchmarks/launch/launcher.h) and the ranks it starts
// (benchmarks/run/rank_worker.h) agree on: the hidden flags, the files of a launch's results
// directory, and how a timeout in seconds is held.
#pragma once

#include "core/text.h"

#include <algorithm>
#include <chrono>
#include <string>

namespace parbench {

inline constexpr const char* kWorkerFlag = "--parbench-worker=";
inline constexpr const char* kResultsFlag = "--parbench-results=";
inline constexpr const char* kResultFile = "result.json";  // rank 0's RankedRun
// A launch's results directory under $TMPDIR: "<prefix>-<launcher's pid>-XXXXXX"
// (benchmarks/launch/temporary_directory.h).
inline constexpr const char* kRanksDirectoryPrefix = "parbench-ranks";
inline constexpr const char* kCaseFile = "case.json";      // the case's fields, written before the ranks start

// A failing rank's one-line reason.
inline std::string error_file(const std::string& dir, int rank) { return dir + "/error." + std::to_string(rank); }
// Written by a rank that finished its case (its measurements handed in, the world left) just
// before it exits 0: a rank that exits 0 without it quit early, and fails the case at once.
inline std::string done_file(const std::string& dir, int rank) { return dir + "/done." + std::to_string(rank); }

inline std::chrono::milliseconds timeout_of(double seconds) {
  return std::max(std::chrono::milliseconds(1), std::chrono::milliseconds(static_cast<int64_t>(seconds * 1e3)));
}

}  // namespace parbench
