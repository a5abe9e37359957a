// A Python engine as a kvfuzz::Engine (docs/python.md, "The engine class"): an object with
// step(chunks), reset(seq), and optionally truncate(seq, keep) and fork(src, dst), made by a
// Python factory called with the engine's configuration. Its declarations are attributes
// (dicts, as in the exec protocol's hello): `numerics`, `supports`, `bitwise`, and
// `capabilities` (else truncate and fork are announced when the methods exist). A class
// saying `whole_model = True` runs whole models instead (py_model_engine.h).
//
// A Python exception inside the engine becomes an EngineError whose message carries the
// Python traceback, so that a check failure shows where in the engine it happened. A
// KeyboardInterrupt is not a finding: it is noted (interrupted()) and the binding that
// called into the judge raises it again once the harness has unwound.
#pragma once

#include <nanobind/nanobind.h>

#include <csignal>
#include <memory>
#include <string>

#include "kvfuzz/engine.h"

namespace kvfuzz::python {

// An EngineInfo named `name` whose factory calls `factory(config)` for every engine (or
// hands an idle engine the config through its new_case). A factory saying
// `whole_model = True` makes whole-model engines (EngineInfo::make_model, py_model_engine.h).
std::shared_ptr<const EngineInfo> python_engine_info(nanobind::object factory, std::string name);

// The Python exception being handled (a nanobind::python_error's) as text: its type, message
// and traceback, as Python prints them.
std::string format_python_error(const nanobind::python_error& error);

// Whether an engine call saw a KeyboardInterrupt since the last clear_interrupted().
bool interrupted();
void clear_interrupted();
// The flag itself, for a signal handler to set and run_check_plan to poll (CheckCallbacks::stop).
volatile std::sig_atomic_t* interrupted_flag();

}  // namespace kvfuzz::python
