// Strict parsing of numbers from flags, options and environment variables: the whole text or nothing.
#pragma once

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>

namespace parbench {

// What `convert` (std::stoll's or std::stod's shape) reads from the whole of `text`, or nullopt
// (empty, trailing characters, out of range).
template <typename Number, typename Convert>
std::optional<Number> parse_in_full(const std::string& text, Convert convert) {
  size_t used = 0;
  Number value{};
  try {
    value = convert(text, &used);
  } catch (const std::exception&) {
    return std::nullopt;
  }
  if (used == 0 || used != text.size()) return std::nullopt;
  return value;
}

// The whole number `text` spells in full, or nullopt.
inline std::optional<int64_t> parse_whole_number(const std::string& text) {
  return parse_in_full<int64_t>(text, [](const std::string& digits, size_t* used) { return std::stoll(digits, used); });
}

// The floating-point number `text` spells in full ("inf" and "nan" included), or nullopt.
inline std::optional<double> parse_full_number(const std::string& text) {
  return parse_in_full<double>(text, [](const std::string& number, size_t* used) { return std::stod(number, used); });
}

}  // namespace parbench
