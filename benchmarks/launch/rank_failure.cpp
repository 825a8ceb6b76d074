#include "benchmarks/launch/rank_failure.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <sstream>

namespace parbench {
namespace {

std::string gib_text(double gib) {
  char text[32];
  std::snprintf(text, sizeof text, "%.2f", gib);
  return text;
}

std::string lowered(std::string text) {
  std::transform(text.begin(), text.end(), text.begin(), [](unsigned char c) { return std::tolower(c); });
  return text;
}

// A rank that waited for another, or lost its connection to one that ended: not the cause.
bool is_consequence(const std::string& reason) {
  const auto text = lowered(reason);
  for (const char* words : {"no progress for", "connection reset", "connection closed", "broken pipe",
                            "socket timeout", "the other ranks", "aborted"}) {
    if (text.find(words) != std::string::npos) return true;
  }
  return false;
}

constexpr const char* kOnGpu = "on GPU ";

}  // namespace

bool is_out_of_memory(const std::string& message) { return lowered(message).find("out of memory") != std::string::npos; }

std::string launcher_gpu_text(const std::map<int, double>& gib_by_gpu) {
  std::string text;
  for (const auto& [gpu, gib] : gib_by_gpu) text += (text.empty() ? "" : ",") + std::to_string(gpu) + ":" + gib_text(gib);
  return text;
}

std::map<int, double> launcher_gpu_from_text(const std::string& text) {
  std::map<int, double> gib_by_gpu;
  std::stringstream entries(text);
  std::string entry;
  while (std::getline(entries, entry, ',')) {
    const auto colon = entry.find(':');
    if (colon == std::string::npos) continue;
    try {
      size_t used = 0;
      const int gpu = std::stoi(entry.substr(0, colon), &used);
      if (used != colon || gpu < 0) continue;
      const auto value = entry.substr(colon + 1);
      const double gib = std::stod(value, &used);
      if (used != value.size() || !(gib >= 0)) continue;
      gib_by_gpu[gpu] = gib;
    } catch (const std::exception&) {
    }
  }
  return gib_by_gpu;
}

std::string out_of_memory_reason(int gpu, std::optional<double> launcher_gib, const std::string& message) {
  std::string text = kOnGpu + std::to_string(gpu) + ": out of memory";
  if (launcher_gib) text += ", the launching process holds " + gib_text(*launcher_gib) + " GiB there";
  return text + " (" + message + ")";
}

bool is_root_cause(const RankFailure& failure) {
  return is_out_of_memory(failure.reason) || !is_consequence(failure.reason);
}

const RankFailure& root_cause(const std::vector<RankFailure>& failures) {
  for (const auto& failure : failures) {
    if (is_out_of_memory(failure.reason)) return failure;
  }
  for (const auto& failure : failures) {
    if (is_root_cause(failure)) return failure;
  }
  return failures.front();
}

std::string describe_rank_failure(const RankFailure& failure) {
  const bool placed = failure.reason.rfind(kOnGpu, 0) == 0;
  const auto place = failure.place.empty() ? std::string() : " (" + failure.place + ")";
  return "rank " + std::to_string(failure.rank) + place + (placed || failure.ended_without_reason ? " " : ": ") +
         failure.reason;
}

std::string launcher_holding_note(const std::map<int, double>& gib_by_gpu) {
  std::string text;
  for (const auto& [gpu, gib] : gib_by_gpu) {
    if (gib >= 1.0) text += (text.empty() ? "" : ", ") + gib_text(gib) + " GiB on GPU " + std::to_string(gpu);
  }
  return text.empty() ? "" : "; the launching process holds " + text;
}

}  // namespace parbench
