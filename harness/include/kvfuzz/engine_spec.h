// Where an engine comes from, as every --engine option (and KVFUZZ_ENGINE for the fuzz
// targets) names it:
//
//   NAME                 a built-in engine (kvfuzz list)
//   plugin:PATH[:NAME]   an engine exported by a shared library through the C ABI
//                        (kvfuzz/engine_abi.h); NAME picks one when the library has several
//   exec:COMMAND         a process speaking JSON lines on stdin/stdout
//                        (docs/engine-protocol.md); COMMAND runs under /bin/sh -c
//
// Commands that judge several engines (replay, explain, check) take a list:
//
//   all | mutants | every   the honest built-in engines, the mutants, or both
//   SPEC,SPEC,...           any of these and the specs above, in order, each engine once
//
// A name ends at the next comma. A plugin: or exec: spec runs up to the next comma that
// starts another spec: one followed by plugin:, exec:, or a built-in name or group word
// that runs to the next comma or the end. Any other comma belongs to the path or command,
// so "exec:./engine --dims 1,2" is one engine and "plugin:a.so,plugin:b.so,paged" three.
//
// Every path leads to the same EngineInfo, so the runner, the properties, the shrinker and
// the corpus treat a user's engine exactly as a built-in one. The returned EngineInfo's
// name is the spec itself: what to pass to --engine to get the same engine again.
#pragma once

#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "kvfuzz/engine.h"

namespace kvfuzz {

// A spec that names no usable engine: an unknown name, a library that cannot be loaded, a
// missing symbol, an ABI version mismatch, a command that does not answer hello. One line,
// naming the spec and what was expected; the CLI exits with status 2.
struct EngineSpecError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Throws EngineSpecError. A plugin is loaded (and kept loaded) and an exec engine is
// started once to check its hello, so that a broken engine fails here, not mid-run.
std::shared_ptr<const EngineInfo> resolve_engine(std::string_view spec);

// A list cut into its specs by the rule above, group words kept as they are. Never fails:
// "paged,,flsh" gives "paged", "" and "flsh", which resolve_engines then refuses.
std::vector<std::string> split_engine_list(std::string_view list);

// Every engine of a list, in order, each once (by its spec). Throws EngineSpecError.
std::vector<std::shared_ptr<const EngineInfo>> resolve_engines(std::string_view list);

}  // namespace kvfuzz
