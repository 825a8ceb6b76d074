// The busy-time profile of a case is taken in a companion process, never in the process that
// times: a Kineto/CUPTI session, once opened, goes on costing every later kernel launch of its
// process (docs/METRICS.md, "Busy and bubble fractions", has the measurement). The companion is
// this binary again, with the same arguments and a hidden flag, started at the first case to
// profile and fed case names one at a time: it prepares the case as the timing process does
// (set-up, warm-up, graph capture), profiles one step (and, with --trace, traces another), frees
// the GPUs and answers. The timing process
// asks before it prepares a case, so the two never hold a case's memory at once.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <optional>
#include <string>
#include <vector>

namespace parbench {

struct CaseProfile;
struct CaseSpec;
struct Options;

inline constexpr const char* kProfileCompanionFlag = "--parbench-profile-companion";

// How long the companion may take over one case (set-up, warm-up, capture and the profiled
// step) before it is given up: far beyond any case's set-up.
inline constexpr std::chrono::seconds kCompanionCaseTimeout{300};

class ProfileCompanion {
 public:
  ProfileCompanion() = default;
  ~ProfileCompanion();
  ProfileCompanion(const ProfileCompanion&) = delete;
  ProfileCompanion& operator=(const ProfileCompanion&) = delete;

  // The profile of case `case_name` (cases.h); empty where it could not be taken (the reason is
  // printed on stderr). Starts the companion on first use; a companion that died or hung is
  // ended and not started again.
  CaseProfile profile(const std::string& case_name);

  // Ends the companion: closes its input and reaps it.
  void stop();

 private:
  bool start();
  pid_t pid_ = -1;
  int to_companion_ = -1, from_companion_ = -1;
  bool given_up_ = false;
};

// Takes the hidden flag out of argv; true if this process is a companion.
bool take_profile_companion_flag(int* argc, char** argv);

// The companion's side: reads case names from stdin, one a line, and answers each with one JSON
// line on stdout, {"busy_seconds": [...] or null, "trace": "path" or ""} or {"error": "..."};
// returns 0 at the end of its input.
// `cases`: the run's cases, as the timing process built them.
int serve_profiles(const std::vector<CaseSpec>& cases, const Options& options);

}  // namespace parbench
