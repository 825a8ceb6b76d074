#include "benchmarks/launch/temporary_directory.h"

#include <dirent.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <vector>

namespace parbench {
namespace {

std::string temporary_parent() {
  const char* tmpdir = std::getenv("TMPDIR");
  return tmpdir != nullptr && *tmpdir != '\0' ? tmpdir : "/tmp";
}

bool process_runs(pid_t pid) { return kill(pid, 0) == 0 || errno == EPERM; }

}  // namespace

std::vector<std::string> directory_entries(const std::string& path) {
  std::vector<std::string> names;
  if (DIR* dir = opendir(path.c_str())) {
    while (const dirent* entry = readdir(dir)) {
      const std::string name = entry->d_name;
      if (name != "." && name != "..") names.push_back(name);
    }
    closedir(dir);
  }
  return names;
}

TemporaryDirectory::TemporaryDirectory(const std::string& prefix) {
  const auto parent = temporary_parent();
  std::string pattern = parent + "/" + prefix + "-" + std::to_string(getpid()) + "-XXXXXX";
  if (mkdtemp(pattern.data()) == nullptr) {
    throw std::runtime_error("could not create a temporary directory in " + parent + ": " + std::strerror(errno));
  }
  path_ = pattern;
}

void remove_plain_directory(const std::string& path) {
  for (const auto& name : directory_entries(path)) {
    const auto child = path + "/" + name;
    struct stat info {};
    if (lstat(child.c_str(), &info) == 0 && S_ISDIR(info.st_mode)) {
      remove_plain_directory(child);
    } else {
      unlink(child.c_str());
    }
  }
  rmdir(path.c_str());
}

int remove_stale_temporary_directories(const std::string& prefix) {
  const auto parent = temporary_parent();
  const auto start = prefix + "-";
  int removed = 0;
  for (const auto& name : directory_entries(parent)) {
    if (name.rfind(start, 0) != 0) continue;
    // "<pid>-XXXXXX" after the prefix; anything else is not one of ours.
    const auto rest = name.substr(start.size());
    const auto dash = rest.find('-');
    if (dash == std::string::npos || dash == 0 || rest.size() - dash - 1 != 6) continue;
    const auto digits = rest.substr(0, dash);
    if (digits.find_first_not_of("0123456789") != std::string::npos || digits.size() > 9) continue;
    const auto pid = static_cast<pid_t>(std::stol(digits));
    if (pid <= 0 || process_runs(pid)) continue;
    const auto path = parent + "/" + name;
    struct stat info {};
    if (lstat(path.c_str(), &info) != 0 || !S_ISDIR(info.st_mode) || info.st_uid != geteuid()) continue;
    remove_plain_directory(path);
    ++removed;
  }
  return removed;
}

TemporaryDirectory::~TemporaryDirectory() { remove_plain_directory(path_); }

}  // namespace parbench
