// ddp's options, read from a case's RunConfig::options: declared in strategies/ddp.cpp and read
// there, by zero (which buckets its stage 1 and 2 gradients as ddp does; a zero case holds no
// bucket option, so at ddp's default) and by --advise's rank profiles (strategies/prediction.h).
#pragma once

#include "strategies/strategy.h"

namespace parbench {

// Each under its declared field; the defaults are the declarations'
// (Strategies.OptionStructsDefaultToTheirDeclarations checks).
struct DdpOptions {
  double bucket_mib = 25.0;  // "bucket_mib": gradient bucket size in MiB
  bool overlap = true;       // "overlap": on (all-reduces start during backward) or off (after it)
};

inline DdpOptions ddp_options(const RunConfig& config) {
  const DdpOptions defaults;
  DdpOptions options;
  options.bucket_mib = option_number(config, "bucket_mib", defaults.bucket_mib);
  options.overlap = option_choice(config, "overlap", defaults.overlap ? "on" : "off") == "on";
  return options;
}

}  // namespace parbench
