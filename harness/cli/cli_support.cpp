#include "cli_support.h"

#include <algorithm>
#include <charconv>

#include "kvfuzz/engine_spec.h"

namespace kvfuzz::cli {

std::shared_ptr<const EngineInfo> select_engine(std::string_view spec) {
  try {
    return resolve_engine(spec);
  } catch (const EngineSpecError& e) {
    throw UsageError(e.what());
  }
}

std::vector<std::shared_ptr<const EngineInfo>> select_engines(std::string_view spec) {
  std::vector<std::shared_ptr<const EngineInfo>> selected;
  const bool honest = spec == "all" || spec == "every";
  const bool mutants = spec == "mutants" || spec == "every";
  if (honest || mutants) {
    for (const EngineInfo& info : engine_registry()) {
      if (info.mutant ? mutants : honest) selected.push_back(select_engine(info.name));
    }
    return selected;
  }
  if (spec.starts_with("plugin:") || spec.starts_with("exec:")) return {select_engine(spec)};
  size_t start = 0;
  while (start <= spec.size()) {
    const size_t comma = std::min(spec.find(',', start), spec.size());
    const std::string_view name = spec.substr(start, comma - start);
    if (name.starts_with("plugin:") || name.starts_with("exec:")) {
      throw UsageError("--engine: '" + std::string(name) +
                       "' in a list; expected plugin:PATH[:NAME] or exec:COMMAND alone, as the "
                       "whole --engine value");
    }
    if (find_engine(name) == nullptr) {
      throw UsageError(
          "--engine: unknown engine '" + std::string(name) + "'; expected one of " +
          engine_names() +
          ", all, mutants, every, plugin:PATH[:NAME] or exec:COMMAND (see kvfuzz list)");
    }
    selected.push_back(select_engine(name));
    start = comma + 1;
  }
  return selected;
}

std::vector<std::filesystem::path> find_fixtures(const std::filesystem::path& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::is_regular_file(path, ec)) return {path};
  if (!fs::is_directory(path, ec)) {
    throw UsageError(path.string() + ": no such fixture file or directory");
  }
  std::vector<fs::path> files;
  const auto cannot_list = [&](const fs::path& where) {
    return UsageError(where.string() + ": cannot list directory (" + ec.message() + ")");
  };
  // The error_code overloads throughout: an unreadable subdirectory is bad input, not a crash.
  fs::recursive_directory_iterator it(path, ec), end;
  if (ec) throw cannot_list(path);
  for (; it != end; it.increment(ec)) {
    if (ec) break;
    if (it->is_regular_file(ec) && it->path().extension() == ".json") files.push_back(it->path());
  }
  if (ec) throw cannot_list(it == end ? path : it->path());
  std::sort(files.begin(), files.end());
  return files;
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
