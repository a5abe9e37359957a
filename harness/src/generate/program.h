// The program of one scenario: a long context's first prefills, then a few steps (an
// append, a run of decodes, a batched step, resets, a truncate, a fork with a rollback, a
// window run), each drawing the same choices whichever kind it is, then now and then a
// batched decode run at split edges (attention scenarios only), then an append that
// reaches the filter's minimum context. The chunk lengths are aimed at edges
// (chunk_lengths.h). The program's tokens stay within a budget that keeps rows, table,
// pool and a model's work small. Its choices come after every fixed-arity piece: their
// number depends on the program.
#pragma once

#include <vector>

#include "generate/bounds.h"
#include "generate/model_choices.h"
#include "generate/token_data.h"
#include "kvfuzz/choice_source.h"
#include "kvfuzz/scenario.h"

namespace kvfuzz {

// Few steps first; `model` null for attention scenarios. Token ids come from `ids`.
std::vector<Op> pick_program(ChoiceSource& c, const Bounds& b, const Layout& l, int sequences,
                             TokenIds& ids, const ModelChoices* model);

}  // namespace kvfuzz
