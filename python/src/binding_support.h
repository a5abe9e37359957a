// What the extension's bindings share: an engine as Python holds it (kvfuzz._kvfuzz.Engine),
// Ctrl-C seen inside an engine raised again once the harness has unwound, property names,
// and the generator's options for an engine, as `kvfuzz check` makes them.
#pragma once

#include <nanobind/nanobind.h>

#include <memory>
#include <optional>
#include <string>

#include "kvfuzz/engine.h"
#include "kvfuzz/generator.h"
#include "kvfuzz/property.h"
#include "py_engine.h"

namespace kvfuzz::python {

// The EngineInfo every harness function takes, and its declarations, asked once
// (probe_declarations makes one engine for the smallest layout).
struct EngineHandle {
  std::shared_ptr<const EngineInfo> info;
  std::optional<EngineDeclarations> declared;

  const EngineDeclarations& declarations();
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

// The property of that name; ValueError naming the known ones for another.
Property property_named(const std::string& name);

// The generator's options for one engine (none: no declarations), by the function every
// door uses (generator_options_from_declarations, kvfuzz/orchestrate.h), with the caps a
// caller sets (0: the generator's own). Raises ValueError for a DeclarationError.
GeneratorOptions generator_options(EngineHandle* engine, int max_tokens, int max_head_dim,
                                   int max_q_heads, int max_sequences, int max_ops);

}  // namespace kvfuzz::python
