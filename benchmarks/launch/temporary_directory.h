// A directory under $TMPDIR (or /tmp), removed with everything in it.
#pragma once

#include <string>
#include <vector>

namespace parbench {

// The names in directory `path`, "." and ".." left out, in the order readdir gives them; none
// where it cannot be read.
std::vector<std::string> directory_entries(const std::string& path);

// Removes `path` and everything in it, subdirectories too; symbolic links are removed, not
// followed.
void remove_plain_directory(const std::string& path);

// Removes the directories "<prefix>-<pid>-*" under $TMPDIR (or /tmp) whose process <pid> has
// ended: those a killed run left behind (TemporaryDirectory names its directories so). Returns
// how many it removed.
int remove_stale_temporary_directories(const std::string& prefix);

// POSIX calls, not std::filesystem: libtorch.so exports its own copies of some
// std::filesystem functions, the linker binds to those, and remove_all crashes.
class TemporaryDirectory {
 public:
  // "<$TMPDIR>/<prefix>-<this process's id>-XXXXXX"; throws std::runtime_error.
  explicit TemporaryDirectory(const std::string& prefix);
  ~TemporaryDirectory();
  TemporaryDirectory(const TemporaryDirectory&) = delete;
  TemporaryDirectory& operator=(const TemporaryDirectory&) = delete;

  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

}  // namespace parbench
