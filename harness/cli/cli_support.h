// Pieces shared by the kvfuzz subcommands: engine and property selection, fixture
// discovery, errors.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "kvfuzz/engine.h"
#include "kvfuzz/property.h"

namespace kvfuzz::cli {

// Bad input on the command line: printed as one line, exit status 2.
struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// "all" (every honest engine), "mutants", "every" (both), an engine name, plugin:PATH[:NAME],
// exec:COMMAND, or a comma-separated list of these (kvfuzz/engine_spec.h says where a list
// is cut, since paths and commands may hold commas). Throws UsageError naming the choices.
std::vector<std::shared_ptr<const EngineInfo>> select_engines(std::string_view spec);

// The --engine help of the commands that take several engines.
inline constexpr const char* kEnginesHelp =
    "Engines: a name (see kvfuzz list), 'all' (honest), 'mutants', 'every', plugin:PATH[:NAME], "
    "exec:COMMAND, or a comma-separated list of these (plugin:a.so,plugin:b.so,paged); a comma "
    "inside a plugin path or exec command stays in it unless plugin:, exec: or a name follows";

// One engine by its spec (a name, plugin:..., exec:...). Throws UsageError.
std::shared_ptr<const EngineInfo> select_engine(std::string_view spec);

// A fixture file, or every *.json below a directory (fixtures_below). Throws UsageError.
std::vector<std::filesystem::path> find_fixtures(const std::filesystem::path& path);

// The property names of kProperties, comma-separated, `last` before the last one:
// property_list(" or ") is "prefix, schedule, layout, poison, reset or batch".
std::string property_list(std::string_view last);

// A property by its name (--property). Throws UsageError naming the choices.
Property select_property(std::string_view name);

// A seed given on the command line: a decimal uint64, nothing else (no sign, no
// wrap-around, no trailing text). Throws UsageError.
uint64_t parse_seed(const std::string& text);

// Exit statuses shared by every subcommand.
constexpr int kExitPass = 0;
constexpr int kExitMismatch = 1;
constexpr int kExitBadInput = 2;

}  // namespace kvfuzz::cli
