// A directory under $TMPDIR (or /tmp), removed with everything in it.
#pragma once

#include <string>
#include <vector>

namespace parbench {

// --fit=batch's probe directories (benchmarks/advise/fit.cpp); like the ranks' results
// directories (kRanksDirectoryPrefix), a killed run's are removed at a later run's start.
inline constexpr const char* kFitDirectoryPrefix = "parbench-fit";

// The names in directory `path`, "." and ".." left out, in the order readdir gives them; none
// where it cannot be read.
std::vector<std::string> directory_entries(const std::string& path);

// Removes `path` and everything in it, subdirectories too; symbolic links are removed, not
// followed.
void remove_plain_directory(const std::string& path);

// Removes the directories "<prefix>-<pid>-XXXXXX" under $TMPDIR (or /tmp) that no process owns:
// those a killed run left behind. A TemporaryDirectory's owner holds a lock on it (flock) for as
// long as it exists; a directory whose lock can be taken has no owner. The <pid> in the name does
// not decide: a process of another PID namespace sharing the folder (a container sharing /tmp)
// may have any pid. Returns how many it removed.
int remove_stale_temporary_directories(const std::string& prefix);

// POSIX calls, not std::filesystem: libtorch.so exports its own copies of some
// std::filesystem functions, the linker binds to those, and remove_all crashes.
class TemporaryDirectory {
 public:
  // "<$TMPDIR>/<prefix>-<this process's id>-XXXXXX", locked by this process until it is removed
  // (remove_stale_temporary_directories); throws std::runtime_error.
  explicit TemporaryDirectory(const std::string& prefix);
  ~TemporaryDirectory();
  TemporaryDirectory(const TemporaryDirectory&) = delete;
  TemporaryDirectory& operator=(const TemporaryDirectory&) = delete;

  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
  int lock_ = -1;  // the directory, open and flocked; -1 where the file system has no locks
};

}  // namespace parbench
