#include "cli_support.h"

#include <algorithm>

namespace kvfuzz::cli {

std::vector<const EngineInfo*> select_engines(std::string_view spec) {
  std::vector<const EngineInfo*> selected;
  const bool honest = spec == "all" || spec == "every";
  const bool mutants = spec == "mutants" || spec == "every";
  if (honest || mutants) {
    for (const EngineInfo& info : engine_registry()) {
      if (info.mutant ? mutants : honest) selected.push_back(&info);
    }
    return selected;
  }
  size_t start = 0;
  while (start <= spec.size()) {
    const size_t comma = std::min(spec.find(',', start), spec.size());
    const std::string_view name = spec.substr(start, comma - start);
    const EngineInfo* info = find_engine(name);
    if (info == nullptr) {
      std::string names;
      for (const EngineInfo& e : engine_registry()) names += e.name + ", ";
      throw UsageError("--engine: unknown engine '" + std::string(name) + "'; expected one of " +
                       names + "or all, mutants, every (see kvfuzz list)");
    }
    selected.push_back(info);
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
  for (const auto& entry : fs::recursive_directory_iterator(path, ec)) {
    if (entry.is_regular_file() && entry.path().extension() == ".json") {
      files.push_back(entry.path());
    }
  }
  if (ec) throw UsageError(path.string() + ": cannot list directory (" + ec.message() + ")");
  std::sort(files.begin(), files.end());
  return files;
}

}  // namespace kvfuzz::cli
