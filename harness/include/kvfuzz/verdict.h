// What judging a run concludes: the kinds of failure, the first divergence and the
// status of every row. The comparator (judge/compare.h) and the properties produce it;
// every entry point prints it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "kvfuzz/rows.h"

namespace kvfuzz {

// The runner gives every token fed to the engine exactly one row, tagged with where it
// came from (op, chunk, token). So a missing or an extra row can only mean one of two
// things: the engine returned the wrong number of rows for a chunk (engine_error, from the
// runner's shape check), or it reported a token at the wrong position, which leaves a
// missing row at the right key and an extra row at the reported one (wrong_position).
enum class FailureKind {
  engine_error,    // the engine threw, or returned a wrongly shaped chunk
  wrong_position,  // the engine reported a token at another (seq, epoch, pos) than the program's
  not_finite,      // NaN or Inf where the reference is finite
  mismatch,        // |got - expected| above the tolerance
  race,            // a kernel checker saw a data race (an engine error of that kind)
  barrier_divergence,  // a kernel checker saw a block meet at two barriers
};

inline constexpr FailureKind kFailureKinds[] = {
    FailureKind::engine_error, FailureKind::wrong_position, FailureKind::not_finite,
    FailureKind::mismatch,     FailureKind::race,           FailureKind::barrier_divergence};

std::string_view failure_kind_name(FailureKind kind);

// The failure kind of an engine error: a hazard's own kind, else engine_error.
FailureKind failure_kind_of(EngineErrorKind kind);
// Whether the kind is an engine error (a hazard's kinds too): a call that failed, not a row.
constexpr bool is_engine_error(FailureKind kind) {
  return kind == FailureKind::engine_error || kind == FailureKind::race ||
         kind == FailureKind::barrier_divergence;
}

// Where in a model a divergence lies (model scenarios only; an attention scenario's row is
// one attention row, `none`). The model level compares a whole forward: its logits, and to
// locate a failure each layer's reported position, attention output and hidden state.
enum class ModelSite {
  none,       // an attention scenario's row
  logits,     // a logits row (dim: the vocabulary id)
  position,   // the position the engine reported for the token (at `layer`, or the model's)
  attention,  // a layer's attention output (q_head, dim: the value within the head)
  hidden,     // a layer's hidden state after its MLP (dim: the value within the row)
  engine,     // an engine error (at `layer`, or while the model was set up: layer -1)
};

std::string_view model_site_name(ModelSite site);

struct Divergence {
  FailureKind kind = FailureKind::mismatch;
  RowKey key;
  RowOrigin origin;
  int q_head = 0;
  int dim = 0;
  double got = 0, expected = 0, error = 0, bound = 0;
  // The output dtype the engine declares (its rows' precision): what the precision hint
  // counts ulps in.
  DType output = DType::f32;
  int64_t key_lo = 0, key_hi = 0;  // keys the row should see (none at model level: hi < lo)
  std::string detail;              // engine error text, or what the engine reported instead
  // A mismatch explained better than by rounding (judge/position_hypothesis.h: a key rotated
  // at a wrong position); the report prints it instead of its precision hint.
  std::string hypothesis;
  // Model scenarios: where in the model, and the layer (-1: the logits, or no layer).
  ModelSite site = ModelSite::none;
  int layer = -1;
  // A logits row: its five largest logits, (vocabulary id, value), on each side.
  std::vector<std::pair<int, double>> top_got, top_expected;
};

// How one expected row fared, in slot (program) order.
enum class RowStatus {
  ok,        // every value within its bound
  unjudged,  // within its bound, but the bound is at least the largest visible |v|: the
             // scores are too large for f32 accumulation to say anything finer than "finite"
  failed,    // any failure kind
  not_run,   // after an engine error: the engine never produced it
};

struct Verdict {
  bool pass = true;
  std::optional<Divergence> first;
  int rows_compared = 0;
  int rows_failed = 0;
  int rows_unjudged = 0;
  // The largest share of its arithmetic bound a judged value used, over the rows that
  // passed: (|got - expected| - the output rounding's half ulp, which is modelled exactly)
  // / bound. How close an honest engine comes to failing; 0 when no row was judged.
  double bound_used = 0;
  std::vector<RowStatus> status;  // one per slot
};

}  // namespace kvfuzz
