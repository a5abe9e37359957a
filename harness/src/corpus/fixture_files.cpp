// Finding fixtures on disk (corpus/fixture_files.h).
#include "corpus/fixture_files.h"

#include <algorithm>
#include <string>
#include <system_error>

#include "kvfuzz/fixture_io.h"

namespace kvfuzz {

std::vector<std::filesystem::path> fixtures_below(const std::filesystem::path& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const auto cannot_list = [&](const fs::path& where) {
    return FixtureError(where.string() + ": cannot list directory (" + ec.message() + ")");
  };
  // The error_code overloads throughout: an unreadable subdirectory is bad input, not a crash.
  fs::recursive_directory_iterator it(dir, ec), end;
  if (ec) throw cannot_list(dir);
  std::vector<fs::path> files;
  for (; it != end; it.increment(ec)) {
    if (ec) break;
    if (it->is_regular_file(ec) && it->path().extension() == ".json") files.push_back(it->path());
  }
  if (ec) throw cannot_list(it == end ? dir : it->path());
  std::sort(files.begin(), files.end());
  return files;
}

}  // namespace kvfuzz
