#include "benchmarks/launch/temporary_directory.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <vector>

namespace parbench {
namespace {

constexpr int kCreateAttempts = 8;  // a directory taken by a concurrent clean-up is made again

std::string temporary_parent() {
  const char* tmpdir = std::getenv("TMPDIR");
  return tmpdir != nullptr && *tmpdir != '\0' ? tmpdir : "/tmp";
}

int open_directory(const std::string& path) { return open(path.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC); }

// Whether `fd`, open on `path`, is still the directory there.
bool still_at(int fd, const std::string& path) {
  struct stat held {}, now {};
  return fstat(fd, &held) == 0 && stat(path.c_str(), &now) == 0 && held.st_dev == now.st_dev && held.st_ino == now.st_ino;
}

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

// The lock is on the directory itself (its own open file description, not inherited across exec),
// so that there is no moment when the directory exists without it: a clean-up that takes the lock
// between mkdtemp and this process's flock removes the directory, and this process, finding it
// gone or locked, makes another.
TemporaryDirectory::TemporaryDirectory(const std::string& prefix) {
  const auto parent = temporary_parent();
  for (int attempt = 0; attempt < kCreateAttempts; ++attempt) {
    std::string pattern = parent + "/" + prefix + "-" + std::to_string(getpid()) + "-XXXXXX";
    if (mkdtemp(pattern.data()) == nullptr) {
      throw std::runtime_error("could not create a temporary directory in " + parent + ": " + std::strerror(errno));
    }
    const int fd = open_directory(pattern);
    if (fd < 0) continue;  // already removed by a clean-up
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
      const int error = errno;
      close(fd);
      if (error == EWOULDBLOCK) continue;  // a clean-up holds it and is removing it
      // A file system without flock (some network ones): no clean-up can take a lock there
      // either, so none removes this directory while it is in use.
      path_ = pattern;
      return;
    }
    if (still_at(fd, pattern)) {
      path_ = pattern;
      lock_ = fd;
      return;
    }
    close(fd);  // a clean-up removed it before the lock was taken
  }
  throw std::runtime_error("could not create a temporary directory in " + parent +
                           ": each one made was removed at once by another run's clean-up");
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
    const auto path = parent + "/" + name;
    struct stat info {};
    if (lstat(path.c_str(), &info) != 0 || !S_ISDIR(info.st_mode) || info.st_uid != geteuid()) continue;
    const int fd = open_directory(path);
    if (fd < 0) continue;
    // Held while it is removed: its owner, were it making it now, finds it locked and makes another.
    if (flock(fd, LOCK_EX | LOCK_NB) == 0 && still_at(fd, path)) {
      remove_plain_directory(path);
      ++removed;
    }
    close(fd);
  }
  return removed;
}

TemporaryDirectory::~TemporaryDirectory() {
  remove_plain_directory(path_);
  if (lock_ >= 0) close(lock_);
}

}  // namespace parbench
