// Finding fixtures on disk: kvfuzz replay and the engine tests' corpus walk the same way.
#pragma once

#include <filesystem>
#include <vector>

namespace kvfuzz {

// Every regular *.json file below `dir`, however deep, sorted so that the order is the
// same on every machine. Throws FixtureError "PATH: cannot list directory (why)" when
// `dir` or a directory below it cannot be listed.
std::vector<std::filesystem::path> fixtures_below(const std::filesystem::path& dir);

}  // namespace kvfuzz
