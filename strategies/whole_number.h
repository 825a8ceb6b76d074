// Strict parsing of numbers from flags, options and environment variables: the whole text or nothing.
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

// The floating-point number `text` spells in full ("inf" and "nan" included), or nullopt (empty,
// trailing characters, out of range).
inline std::optional<double> parse_full_number(const std::string& text) {
  size_t used = 0;
  double value = 0;
  try {
    value = std::stod(text, &used);
  } catch (const std::exception&) {
    return std::nullopt;
  }
  if (used == 0 || used != text.size()) return std::nullopt;
  return value;
}

}  // namespace parbench
