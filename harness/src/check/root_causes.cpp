#include "kvfuzz/root_causes.h"

#include <stdexcept>

#include "corpus/fixture_files.h"
#include "corpus/fixture_names.h"
#include "kvfuzz/fixture_io.h"

namespace kvfuzz {

std::string KnownBug::state_line() const {
  if (!still_failing && !judged) {
    return "known, not judged: " + fixture.string() +
           " (no engine of the run can be given it: outside their supports)";
  }
  std::string line = still_failing ? "known, still failing: " : "known, now passing: ";
  line += fixture.string();
  if (!failing_on.empty()) line += " (on " + failing_on + ")";
  if (seen > 0) {
    line += ", found again " + std::to_string(seen) + (seen == 1 ? " time" : " times");
  }
  return line;
}

RootCauses::RootCauses(const std::vector<std::filesystem::path>& known) {
  const auto add = [&](const std::filesystem::path& file) {
    KnownBug bug;
    bug.fixture = file;
    bug.scenario = load_fixture(file.string());
    bug.cause = scenario_hash(bug.scenario);
    known_.push_back(std::move(bug));
  };
  for (const std::filesystem::path& path : known) {
    std::error_code error;
    if (std::filesystem::is_directory(path, error)) {
      for (const std::filesystem::path& file : fixtures_below(path)) add(file);
    } else if (std::filesystem::is_regular_file(path, error)) {
      add(path);
    } else {
      throw std::invalid_argument("known: " + path.string() +
                                  ": expected a fixture file or a folder of fixtures");
    }
  }
}

int RootCauses::still_failing() const {
  int n = 0;
  for (const KnownBug& bug : known_) n += bug.still_failing ? 1 : 0;
  return n;
}

Settled RootCauses::settle(std::string_view engine, const Scenario& shrunk, size_t id, int count) {
  const std::string hash = scenario_hash(shrunk);
  for (size_t k = 0; k < known_.size(); ++k) {
    if (known_[k].cause != hash) continue;
    known_[k].seen += count;
    return {Settled::Kind::known, k};
  }
  for (const Cause& cause : causes_) {
    if (cause.engine == engine && cause.hash == hash)
      return {Settled::Kind::same_cause, cause.first};
  }
  causes_.push_back({std::string(engine), hash, id});
  return {Settled::Kind::new_cause, id};
}

}  // namespace kvfuzz
