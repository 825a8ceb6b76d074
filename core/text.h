// Text helpers below every other layer (models, strategies, benchmarks use them).
#pragma once

#include <cstdio>
#include <string>
#include <utility>

namespace parbench {

// The items of `items`, each written by `write`, with `separator` between them: "a, b, c".
template <typename Items, typename Write>
std::string joined(const Items& items, const std::string& separator, Write&& write) {
  std::string text;
  bool first = true;
  for (const auto& item : items) {
    if (!first) text += separator;
    text += write(item);
    first = false;
  }
  return text;
}

// Strings (or anything a std::string can be built from), joined with `separator`.
template <typename Items>
std::string joined(const Items& items, const std::string& separator = ", ") {
  return joined(items, separator, [](const auto& item) { return std::string(item); });
}

// `value` as printf's %g writes it: 25, 2.5, 0.0001.
inline bool starts_with(const std::string& text, const std::string& prefix) { return text.rfind(prefix, 0) == 0; }

inline std::string format_number(double value) {
  char text[32];
  std::snprintf(text, sizeof text, "%g", value);
  return text;
}

}  // namespace parbench
