// A directory of plain files under $TMPDIR (or /tmp), removed with everything in it.
#pragma once

#include <string>

namespace parbench {

// Removes `path`, a directory of plain files, and the files in it.
void remove_plain_directory(const std::string& path);

// POSIX calls, not std::filesystem: libtorch.so exports its own copies of some
// std::filesystem functions, the linker binds to those, and remove_all crashes.
class TemporaryDirectory {
 public:
  explicit TemporaryDirectory(const std::string& prefix);  // throws std::runtime_error
  ~TemporaryDirectory();
  TemporaryDirectory(const TemporaryDirectory&) = delete;
  TemporaryDirectory& operator=(const TemporaryDirectory&) = delete;

  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

}  // namespace parbench
