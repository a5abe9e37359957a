// The two kinds of engine from outside the build, as resolve_engine (kvfuzz/engine_spec.h)
// makes them. Each returns an EngineInfo named `spec` whose factory makes independent
// engines, or throws EngineSpecError with one line naming the spec and what went wrong.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "kvfuzz/engine.h"
#include "kvfuzz/engine_spec.h"

namespace kvfuzz::doors {

// plugin:PATH[:NAME]. Loads the library (once per path, kept loaded for the process) and
// checks its table: the symbol, the ABI version, the engine names, the function pointers
// every engine needs and those its capabilities announce.
std::shared_ptr<const EngineInfo> plugin_engine(const std::string& spec, const std::string& path,
                                                const std::optional<std::string>& name);

// exec:COMMAND. Starts the command once and checks its hello; each engine the factory
// makes is a process of its own.
std::shared_ptr<const EngineInfo> exec_engine(const std::string& spec, const std::string& command);

}  // namespace kvfuzz::doors
