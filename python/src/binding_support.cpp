#include "binding_support.h"

#include <string>
#include <vector>

#include "kvfuzz/check.h"
#include "kvfuzz/orchestrate.h"

namespace nb = nanobind;

namespace kvfuzz::python {

const EngineDeclarations& EngineHandle::declarations(bool fork) {
  if (declared) return *declared;
  // In a forked child, as `kvfuzz list` asks (probe_declarations_isolated): an engine that
  // crashes, aborts or hangs while it is made or asked is a RuntimeError naming how its
  // child ended, not the end of Python. fork false (a debugger) asks here.
  if (fork) {
    declared = with_forked_children(
        [&] { return probe_declarations_isolated(*info, Isolation{}.timeout); });
  } else {
    declared = interruptible([&] { return probe_declarations(*info); });
  }
  return *declared;
}

void raise_if_interrupted() {
  if (!interrupted()) return;
  clear_interrupted();
  PyErr_SetNone(PyExc_KeyboardInterrupt);
  throw nb::python_error();
}

Property property_named(const std::string& name) {
  if (const auto p = parse_property(name)) return *p;
  std::string names;
  for (const PropertyInfo& info : kProperties) {
    names += (names.empty() ? "" : ", ") + std::string(info.name);
  }
  throw nb::value_error(("property: expected one of " + names + ", got '" + name + "'").c_str());
}

GeneratorOptions generator_options(EngineHandle* engine, int max_tokens, int max_head_dim,
                                   int max_q_heads, int max_sequences, int max_ops) {
  std::vector<NamedDeclarations> engines;
  if (engine != nullptr) engines.push_back({engine->info->name, engine->declarations()});
  try {
    return generator_options_from_declarations(engines, SizeCaps{.max_tokens = max_tokens,
                                                                 .max_head_dim = max_head_dim,
                                                                 .max_q_heads = max_q_heads,
                                                                 .max_sequences = max_sequences,
                                                                 .max_ops = max_ops});
  } catch (const DeclarationError& e) {
    throw nb::value_error(e.what());
  }
}

}  // namespace kvfuzz::python
