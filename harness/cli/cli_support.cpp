#include "cli_support.h"

#include <charconv>
#include <optional>
#include <system_error>

#include "corpus/fixture_files.h"
#include "kvfuzz/engine_spec.h"
#include "kvfuzz/fixture_io.h"

namespace kvfuzz::cli {

std::shared_ptr<const EngineInfo> select_engine(std::string_view spec) {
  try {
    return resolve_engine(spec);
  } catch (const EngineSpecError& e) {
    throw UsageError(e.what());
  }
}

std::vector<std::shared_ptr<const EngineInfo>> select_engines(std::string_view spec) {
  try {
    return resolve_engines(spec);
  } catch (const EngineSpecError& e) {
    throw UsageError(e.what());
  }
}

std::vector<std::filesystem::path> find_fixtures(const std::filesystem::path& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::is_regular_file(path, ec)) return {path};
  if (!fs::is_directory(path, ec)) {
    throw UsageError(path.string() + ": no such fixture file or directory");
  }
  try {
    return fixtures_below(path);
  } catch (const FixtureError& e) {
    throw UsageError(e.what());
  }
}

std::string property_list(std::string_view last) {
  std::string names;
  for (size_t i = 0; i < kProperties.size(); ++i) {
    if (i > 0) names += i + 1 == kProperties.size() ? last : ", ";
    names += kProperties[i].name;
  }
  return names;
}

Property select_property(std::string_view name) {
  if (const std::optional<Property> property = parse_property(name)) return *property;
  throw UsageError("--property: unknown property '" + std::string(name) + "'; expected one of " +
                   property_list(", "));
}

uint64_t parse_seed(const std::string& text) {
  uint64_t seed = 0;
  const char* end = text.data() + text.size();
  const auto [stop, error] = std::from_chars(text.data(), end, seed);
  if (text.empty() || error != std::errc() || stop != end) {
    throw UsageError("--seed: expected an integer in [0, 18446744073709551615], got '" + text +
                     "'");
  }
  return seed;
}

}  // namespace kvfuzz::cli
