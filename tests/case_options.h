// Strategy options set by hand, as a case from the matrix holds them (RunConfig::options, by the
// option's field): set_option(config, "split", 2), set_option(config, "schedule", "gpipe").
#pragma once

#include "strategies/strategy.h"

#include <cstdint>
#include <string>

namespace parbench {

inline void set_option(RunConfig& config, const std::string& field, const std::string& value) {
  config.options[field] = value;
}

inline void set_option(RunConfig& config, const std::string& field, int64_t value) {
  config.options[field] = std::to_string(value);
}

}  // namespace parbench
