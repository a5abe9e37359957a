// What the benchmarks share: the median they report (docs/BENCHMARKS.md quotes medians)
// and the flags of the timed ones.
#pragma once

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <vector>

namespace kvfuzz::bench {

// The middle value (the mean of the two middle ones for an even count); 0 for none.
inline double median(std::vector<double> values) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  return n % 2 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}

// --seconds S (time per measurement) and --repeats R (measurements per median); nothing
// when argv holds anything else, so that a mistyped flag is an error, not a default.
struct TimedRuns {
  double seconds = 1;
  int repeats = 5;
};

inline std::optional<TimedRuns> parse_timed_runs(int argc, char** argv) {
  TimedRuns runs;
  for (int i = 1; i < argc; i += 2) {
    if (i + 1 >= argc) return std::nullopt;
    if (std::strcmp(argv[i], "--seconds") == 0) {
      runs.seconds = std::atof(argv[i + 1]);
    } else if (std::strcmp(argv[i], "--repeats") == 0) {
      runs.repeats = std::atoi(argv[i + 1]);
    } else {
      return std::nullopt;
    }
  }
  if (runs.seconds <= 0 || runs.repeats < 1) return std::nullopt;
  return runs;
}

}  // namespace kvfuzz::bench
