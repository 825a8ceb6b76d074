// Text helpers below every other layer (models, strategies, benchmarks use them).
#pragma once

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

}  // namespace parbench
