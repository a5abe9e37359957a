// A Python whole-model engine as a kvfuzz::ModelEngine (kvfuzz/model_engine.h; docs/python.md,
// "Whole models"): a class that says `whole_model = True`, made with a
// kvfuzz.ModelEngineConfig, whose step(chunks) is given each chunk's vocabulary ids
// (kvfuzz.ModelChunk) and returns (positions, logits[token][vocab]) per chunk. reset,
// truncate, fork, the declarations and new_case are an attention engine's.
#pragma once

#include <nanobind/nanobind.h>

#include <memory>

#include "kvfuzz/engine.h"
#include "py_calls.h"

namespace kvfuzz::python {

// The make_model of a Python engine's EngineInfo, over its factory and idle engines.
ModelEngineFactory python_model_factory(std::shared_ptr<nanobind::object> factory,
                                        std::shared_ptr<IdleEngines> idle);

}  // namespace kvfuzz::python
