// What the extension's bindings share: an engine as Python holds it (kvfuzz._kvfuzz.Engine),
// Ctrl-C seen inside an engine raised again once the harness has unwound, property names,
// and the generator's options for an engine, as `kvfuzz check` makes them.
#pragma once

#include <nanobind/nanobind.h>
#include <unistd.h>

#include <chrono>
#include <memory>
#include <optional>
#include <string>

#include "fork_guard.h"
#include "kvfuzz/engine.h"
#include "kvfuzz/generator.h"
#include "kvfuzz/property.h"
#include "py_engine.h"
#include "sigint_guard.h"

namespace kvfuzz::python {

// The EngineInfo every harness function takes, and its declarations, asked once
// (probe_declarations makes one engine for the smallest layout).
struct EngineHandle {
  std::shared_ptr<const EngineInfo> info;
  std::optional<EngineDeclarations> declared;

  // Probed once, in a forked child unless `fork` is false (binding_support.cpp).
  const EngineDeclarations& declarations(bool fork = true);
};

// After the harness unwound from an engine call that saw Ctrl-C: raise it in Python.
void raise_if_interrupted();

// Runs `f`, which may call into engines; when one of them saw Ctrl-C, raises it afterwards,
// however `f` ended.
template <typename F>
auto interruptible(F&& f) -> decltype(f()) {
  try {
    auto result = f();
    raise_if_interrupted();
    return result;
  } catch (const nanobind::python_error&) {
    throw;
  } catch (...) {
    raise_if_interrupted();
    throw;
  }
}

// A timeout given in seconds from Python.
inline std::chrono::milliseconds seconds_to_ms(double seconds) {
  return std::chrono::milliseconds(static_cast<long>(seconds * 1000.0));
}

// Runs `work`, which forks children that call the engine (kvfuzz/orchestrate.h, Isolation),
// with the GIL released and each fork bracketed as os.fork() brackets its own
// (WorkersForkGuard: the child keeps the GIL, runs the Python engine and _exits), Ctrl-C
// passed on (SigintGuard); then raises KeyboardInterrupt if one came.
template <class Work>
auto with_forked_children(Work&& work) {
  std::optional<decltype(work())> result;
  {
    SigintGuard sigint;
    WorkersForkGuard guard;
    try {
      result.emplace(work());
    } catch (...) {
      if (guard.in_worker()) ::_exit(70);  // a child never returns into Python
      throw;
    }
    if (guard.in_worker()) ::_exit(70);
  }
  raise_if_stopped();
  return std::move(*result);
}

// The property of that name; ValueError naming the known ones for another.
Property property_named(const std::string& name);

// The generator's options for one engine (none: no declarations), by the function every
// door uses (generator_options_from_declarations, kvfuzz/orchestrate.h), with the caps a
// caller sets (0: the generator's own). Raises ValueError for a DeclarationError.
GeneratorOptions generator_options(EngineHandle* engine, int max_tokens, int max_head_dim,
                                   int max_q_heads, int max_sequences, int max_ops);

}  // namespace kvfuzz::python
