#include "benchmarks/temporary_directory.h"

#include <dirent.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <stdexcept>

namespace parbench {

TemporaryDirectory::TemporaryDirectory(const std::string& prefix) {
  const char* tmpdir = std::getenv("TMPDIR");
  const std::string parent = tmpdir != nullptr && *tmpdir != '\0' ? tmpdir : "/tmp";
  std::string pattern = parent + "/" + prefix + "-XXXXXX";
  if (mkdtemp(pattern.data()) == nullptr) {
    throw std::runtime_error("could not create a temporary directory in " + parent + ": " + std::strerror(errno));
  }
  path_ = pattern;
}

void remove_plain_directory(const std::string& path) {
  if (DIR* dir = opendir(path.c_str())) {
    while (const dirent* entry = readdir(dir)) {
      const std::string name = entry->d_name;
      if (name != "." && name != "..") unlink((path + "/" + name).c_str());
    }
    closedir(dir);
  }
  rmdir(path.c_str());
}

TemporaryDirectory::~TemporaryDirectory() { remove_plain_directory(path_); }

}  // namespace parbench
