#include "binding_support.h"

#include <algorithm>
#include <string>

namespace nb = nanobind;

namespace kvfuzz::python {

const EngineDeclarations& EngineHandle::declarations() {
  if (!declared) declared = interruptible([&] { return probe_declarations(*info); });
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
  GeneratorOptions options;
  if (engine != nullptr) {
    const EngineDeclarations& d = engine->declarations();
    options.truncate = d.capabilities.truncate;
    options.fork = d.capabilities.fork;
    options.supports = d.supports;
  }
  const auto cap = [](int limit, int& most, int& typical) {
    if (limit <= 0) return;
    most = std::min(most, limit);
    typical = std::min(typical, limit);
  };
  if (max_tokens > options.max_epoch_tokens) {
    options.long_context = LongContextOptions{max_tokens};
  } else {
    cap(max_tokens, options.max_epoch_tokens, options.typical_epoch_tokens);
  }
  cap(max_head_dim, options.max_head_dim, options.typical_head_dim);
  cap(max_q_heads, options.max_q_heads, options.typical_q_heads);
  // As `kvfuzz check` refuses it (harness/cli/cmd_check.cpp): no head_dim can be drawn.
  const EngineSupports& can = options.supports;
  const int most_dim = std::min(can.max_head_dim > 0 ? can.max_head_dim : 128,
                                options.long_context ? 16 : options.max_head_dim);
  if (can.head_dim_multiple > most_dim) {
    throw nb::value_error(("the engine's head_dim must be a multiple of " +
                           std::to_string(can.head_dim_multiple) + ", but is at most " +
                           std::to_string(most_dim) + " here (max_head_dim; long contexts: 16)")
                              .c_str());
  }
  if (max_sequences > 0) options.max_sequences = std::min(options.max_sequences, max_sequences);
  if (max_ops > 0) options.max_ops = std::min(options.max_ops, max_ops);
  return options;
}

}  // namespace kvfuzz::python
