// The busy-time profile of a case is taken in a companion process, never in the process that
// times: a Kineto/CUPTI session, once opened, goes on costing every later kernel launch of its
// process (docs/METRICS.md, "Busy and bubble fractions", has the measurement). The companion is
// this binary again, with the same arguments and a hidden flag, started at the first case to
// profile and fed cases one at a time, each as its fields (fields_json in benchmarks/cases/cases.h,
// as the ranks of a distributed case get theirs): it builds the case from them alone, never from
// a case matrix of its own, and prepares it as the timing process does
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

  // The profile of case `case_name`, whose fields are `fields` (fields_json's, as JSON text on
  // one line); empty where it could not be taken (the reason is printed on stderr), or where the
  // companion built a case of another name from them. Starts the companion on first use; a
  // companion that died or hung is ended and not started again.
  CaseProfile profile(const std::string& case_name, const std::string& fields);

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

// The companion's side: reads cases' fields from stdin, one case a line, builds each with
// case_from_fields (`options`, `visible_gpus`: this process's), and answers each with one JSON line
// on stdout, {"case": its name, "busy_seconds": [...] or null, "trace": "path" or ""} or
// {"error": "..."}; returns 0 at the end of its input.
int serve_profiles(const Options& options, int visible_gpus);

}  // namespace parbench
