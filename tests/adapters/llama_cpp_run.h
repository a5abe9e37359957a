// Runs a model scenario through a model engine directly (the program op by op, as a server
// is driven) and measures its logits against reference_transformer at the same (sequence,
// epoch, position): what test_llama_cpp.cpp asserts on, before the harness's own model
// door judges such engines.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "kvfuzz/model_engine.h"
#include "kvfuzz/rows.h"
#include "kvfuzz/scenario.h"

namespace kvfuzz::test {

struct ModelEngineMeasure {
  int rows = 0;             // rows the reference has
  int missing = 0;          // reference rows the engine returned no logits for
  int wrong_positions = 0;  // rows whose reported position is not the program's
  // max |got - expected| over every logit of every row, divided by the rms of all the
  // reference's logits (infinite for a non-finite logit).
  double max_relative_error = 0;
  std::string error;  // the engine threw: its message
  std::string worst;  // where max_relative_error was seen
};

ModelEngineMeasure measure_model_engine(const Scenario& scenario, const ModelEngineFactory& make);

// The same measure of kvfuzz's own cached forward (run_transformer) with the built-in
// engine `engine` in every layer: how far honest f32 arithmetic with the layout's dtype moves
// this scenario's logits, the yardstick of an ill-conditioned scenario (large scores over
// spread-out values amplify every rounding).
double own_forward_error(const Scenario& scenario, const char* engine);

}  // namespace kvfuzz::test
