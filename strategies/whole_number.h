// Strict parsing of whole numbers from flags and environment variables.
#pragma once

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>

namespace parbench {

// The number `text` spells in full, or nullopt (empty, trailing characters, out of range).
inline std::optional<int64_t> parse_whole_number(const std::string& text) {
  size_t used = 0;
  int64_t value = 0;
  try {
    value = std::stoll(text, &used);
  } catch (const std::exception&) {
    return std::nullopt;
  }
  if (used == 0 || used != text.size()) return std::nullopt;
  return value;
}

}  // namespace parbench
