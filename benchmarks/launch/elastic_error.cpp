#include "benchmarks/launch/elastic_error.h"

#include <nlohmann/json.hpp>

#include <fcntl.h>
#include <unistd.h>

#include <cstdlib>
#include <ctime>

namespace parbench {

void record_failure_for_launcher(const std::string& message) noexcept {
  const char* path = std::getenv("TORCHELASTIC_ERROR_FILE");
  if (path == nullptr || *path == '\0') return;
  try {
    // torchrun's summary shows py_callstack where there is one: parbench's is its message.
    const auto text_message = "parbench: " + message;
    const nlohmann::json error = {
        {"message",
         {{"message", text_message},
          {"extraInfo",
           {{"py_callstack", text_message},
            {"timestamp", std::to_string(static_cast<long long>(std::time(nullptr)))}}}}}};
    const auto text = error.dump();
    // O_EXCL: a later failure of the same rank (the watchdog's after a case's) keeps the first.
    const int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0) return;
    [[maybe_unused]] const auto written = write(fd, text.data(), text.size());
    close(fd);
  } catch (...) {
    // Already failing: the rank's own message on stderr still names the cause.
  }
}

}  // namespace parbench
