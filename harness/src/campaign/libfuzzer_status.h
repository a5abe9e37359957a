// libFuzzer's status lines, read by `kvfuzz campaign` for its progress line and plots:
//   fork mode:  "#1234: cov: 812 ft: 2304 corp: 96 exec/s 410 oom/timeout/crash: 0/0/2
//                time: 31s job: 7 dft_time: 0"
//   one process: "#4096 pulse  cov: 812 ft: 2304 corp: 96/12Kb exec/s: 410 rss: 60Mb"
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace kvfuzz {

struct LibFuzzerStatus {
  int64_t executions = 0;
  int64_t coverage = 0;
  int64_t features = 0;
  int64_t corpus = 0;
  int64_t executions_per_second = 0;
  int64_t ooms = 0, timeouts = 0, crashes = 0;  // fork mode only
};

// Nothing for lines that are not status lines.
std::optional<LibFuzzerStatus> parse_libfuzzer_status(std::string_view line);

}  // namespace kvfuzz
