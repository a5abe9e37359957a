#include "campaign/libfuzzer_status.h"

#include <cctype>
#include <charconv>
#include <string>

namespace kvfuzz {

namespace {

// The integer right after `key` (and any spaces), if the line has it.
std::optional<int64_t> number_after(std::string_view line, std::string_view key) {
  const size_t at = line.find(key);
  if (at == std::string_view::npos) return std::nullopt;
  size_t i = at + key.size();
  while (i < line.size() && line[i] == ' ') ++i;
  int64_t value = 0;
  const auto [end, error] = std::from_chars(line.data() + i, line.data() + line.size(), value);
  if (error != std::errc() || end == line.data() + i) return std::nullopt;
  return value;
}

}  // namespace

std::optional<LibFuzzerStatus> parse_libfuzzer_status(std::string_view line) {
  if (!line.starts_with("#")) return std::nullopt;
  const auto executions = number_after(line, "#");
  const auto coverage = number_after(line, " cov:");
  if (!executions || !coverage) return std::nullopt;
  LibFuzzerStatus status;
  status.executions = *executions;
  status.coverage = *coverage;
  status.features = number_after(line, " ft:").value_or(0);
  status.corpus = number_after(line, " corp:").value_or(0);
  status.executions_per_second =
      number_after(line, " exec/s:").value_or(number_after(line, " exec/s").value_or(0));
  if (const size_t at = line.find("oom/timeout/crash:"); at != std::string_view::npos) {
    std::string_view rest = line.substr(at + 18);
    while (!rest.empty() && rest.front() == ' ') rest.remove_prefix(1);
    int64_t* fields[3] = {&status.ooms, &status.timeouts, &status.crashes};
    for (int64_t* field : fields) {
      const auto [end, error] = std::from_chars(rest.data(), rest.data() + rest.size(), *field);
      if (error != std::errc()) break;
      rest.remove_prefix(static_cast<size_t>(end - rest.data()));
      if (!rest.empty() && rest.front() == '/') rest.remove_prefix(1);
    }
  }
  return status;
}

}  // namespace kvfuzz
