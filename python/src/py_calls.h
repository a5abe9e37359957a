// What both Python engine wrappers (py_engine.cpp: attention, py_model_engine.cpp: whole
// models) do alike around a call into the engine object: a Python exception as an
// EngineError carrying its traceback, the declarations read from the object's attributes,
// and the shape of step's result checked before any value is read.
#pragma once

#include <nanobind/nanobind.h>

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "doors/exec_protocol.h"
#include "kvfuzz/engine.h"
#include "py_engine.h"

namespace kvfuzz::python {

// Calls `f`; a Python exception becomes an EngineError carrying its traceback. After Ctrl-C,
// every further call fails at once, so that the harness unwinds quickly.
template <typename F>
auto calling_python(std::string_view what, F&& f) -> decltype(f()) {
  if (*interrupted_flag()) throw EngineError("interrupted (KeyboardInterrupt)");
  try {
    return f();
  } catch (nanobind::python_error& e) {
    if (e.matches(PyExc_KeyboardInterrupt)) *interrupted_flag() = 1;
    throw EngineError(std::string(what) + " raised " + format_python_error(e));
  }
}

// The declarations an engine object carries (`capabilities`, `bitwise`, `numerics`,
// `supports`; numerics may be keyed by the layout's dtype), read by the exec protocol's own
// strict reader of hello's reply, so one definition says what a declaration may hold; its
// complaints name the attribute ("the engine's declarations: numerics.output: ...").
doors::HelloReply read_declarations(nanobind::handle engine, const Layout& layout);

// step's result as one (positions, values) pair per chunk: a sequence of `chunks` pairs,
// else an EngineError saying what arrived ("step returned a generator (...)"). `values`
// names the second element in messages ("out", "logits").
std::vector<std::pair<nanobind::object, nanobind::object>> step_pairs(nanobind::handle results,
                                                                      size_t chunks,
                                                                      std::string_view values);

// Engine objects whose class defines new_case(config), idle between uses: kvfuzz makes an
// engine for every case, property variant and shrink candidate (about 11 a case for all six
// properties), and such an object is handed the next one's config instead of being built
// again. Touched only with the GIL held.
using IdleEngines = std::vector<nanobind::object>;

// Shared holders whose deleters take the GIL: an EngineInfo's factories copy them, and the
// last copy may die on any thread.
std::shared_ptr<nanobind::object> held_by_cpp(nanobind::object object);
std::shared_ptr<IdleEngines> idle_engines();

// An engine for `config` (an EngineConfig or ModelEngineConfig, cast to Python): an idle one
// handed the config through new_case, else a new one from `factory`.
nanobind::object engine_object(nanobind::handle factory, IdleEngines& idle,
                               nanobind::handle config);

// Gives `engine` back to `idle` when its class defines new_case; drops it otherwise. Takes
// the GIL.
void release_engine(nanobind::object& engine, IdleEngines* idle);

}  // namespace kvfuzz::python
