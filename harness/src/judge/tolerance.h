// The tolerance rule, written once. Its derivation is in tolerance.cpp.
#pragma once

#include <cstdint>
#include <optional>

#include "kvfuzz/dtype.h"
#include "kvfuzz/engine.h"
#include "kvfuzz/rows.h"

namespace kvfuzz {

struct ToleranceInputs {
  DType dtype = DType::f32;
  EngineNumerics numerics = {};  // what the engine declares (defaults: f32 throughout)
  int visible_keys = 1;          // n: keys the row attends to
  int head_dim = 1;              // terms in each q.k dot product
  double max_abs_value = 0;      // M: max |v| over the visible keys of this row's kv head
  double max_score_terms = 0;    // S >= scale * max_j sum_d |q_d| |k_jd| over visible keys j;
                                 // the reference passes scale * ||q|| * max_j ||k_j||
  // D: max over the value dims of sum_j w_j |v_jd - out_d|, the weights' mean absolute
  // deviation of the values around the row. Negative: unknown, M is used.
  double value_deviation = -1;
  // A: max over the value dims of sum_j w_j |v_jd|, the weights' mean magnitude of the
  // values (<= M). Negative: unknown, M is used.
  double value_magnitude = -1;
  bool rope = false;
  int64_t position = 0;  // absolute position of the query (RoPE angle error grows with it)
  // With rotated keys cached in the storage dtype and modelled by the reference: the
  // largest logit error over the visible keys from rotated elements that lie so close to a
  // rounding boundary of the storage dtype that the engine's f32 rotation may round them
  // to the neighbour (scale * sum_d |q_d| * (2 e_d + spacing)).
  double rotated_key_ambiguity = 0;
  // With P rounded (numerics.p): the weights of the keys whose P is not exactly 1, pooled
  // by the cell of the P dtype their P rounds into. p_weight_spread = sqrt(sum over cells
  // of (cell weight)^2), p_weight_mass = their total weight, p_subnormal_keys = keys whose
  // P is below the P dtype's smallest normal.
  double p_weight_spread = 0;
  double p_weight_mass = 0;
  int p_subnormal_keys = 0;
  // The attention features (tolerance.cpp, step 13): the soft cap (0: none) and the smallest
  // |score| it sees, the largest |ALiBi bias| over the visible keys, the row's sink logit.
  double softcap = 0;
  double min_abs_score = 0;  // with a soft cap: the smallest |scale q.k| over the keys
  double alibi_reach = 0;
  std::optional<double> sink = std::nullopt;
  // The softmax term key by key (steps 5 and 13), which the reference computes from
  // key_errors() and its weights where keys' logit errors differ: under a soft cap, and
  // where rotated keys are ambiguous one by one. Negative: the row-wide term of step 4.
  double keywise_softmax = -1;
};

// Each key's logit error, key by key (steps 5 and 13): a key whose score is s_j and whose
// own rotated-key ambiguity is a_j (beyond what every key shares) has a logit error of at
// most of(|s_j|, a_j): with a soft cap sech^2(max(0, |s_j| - r) / cap) r + rest, without
// r + rest, r = reach + a_j (1 + u).
struct KeyErrors {
  double reach = 0;    // the shared score error before the cap, with the division's rounding
  double rest = 0;     // every logit's error beside it (tanh, exp, ALiBi, the sink's)
  double softcap = 0;  // 0: none
  double of(double abs_score, double own_ambiguity) const;
};
// `keys_own`: the part of in.rotated_key_ambiguity that is the keys' own (the largest
// a_j), which the shared reach leaves out.
KeyErrors key_errors(const ToleranceInputs& in, double keys_own = 0);

// Largest |engine - reference| an honest engine with the declared numerics may show on one
// value of the row before its output is rounded. Never negative; zero when every visible
// value is zero.
double tolerance(const ToleranceInputs& in);
// The same bound in its parts (their total() is tolerance(in)).
BoundParts tolerance_parts(const ToleranceInputs& in);
// Whether the bound for these numerics reads ToleranceInputs::value_magnitude (A), which
// the reference then computes (steps 7, 10, 11 of tolerance.cpp).
bool needs_value_magnitude(const EngineNumerics& numerics);

// The largest |got - expected| accepted for one value: the bound, plus, for an engine that
// rounds its rows to a narrower dtype, half that dtype's spacing at the largest magnitude
// the unrounded value may have (the rounding cell's own half-ulp boundary).
double accepted_error(double bound, double expected, DType output);

}  // namespace kvfuzz
