// The few statistics the harness computes itself (the verdict, the ranks' results, the stall
// and noise rules), in one place so that each means the same everywhere.
#pragma once

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

namespace parbench {

// The median of `values` (the mean of the middle two for an even count); `values` must not be empty.
inline double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const size_t middle = values.size() / 2;
  return values.size() % 2 == 1 ? values[middle] : (values[middle - 1] + values[middle]) / 2;
}

inline double mean(const std::vector<double>& values) {
  return std::accumulate(values.begin(), values.end(), 0.0) / static_cast<double>(values.size());
}

// The sample standard deviation (n - 1) of at least two values around their `mean`.
inline double sample_stddev(const std::vector<double>& values, double mean) {
  double squares = 0;
  for (const double value : values) squares += (value - mean) * (value - mean);
  return std::sqrt(squares / static_cast<double>(values.size() - 1));
}

}  // namespace parbench
