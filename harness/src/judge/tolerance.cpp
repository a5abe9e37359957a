// The tolerance rule: how far an honest engine that accumulates in f32 may land from the
// double-precision reference on one output value. Derived below, once.
//
// Notation: u = 2^-24 (f32 unit roundoff), u_s = unit_roundoff(storage dtype),
// gamma_m = m u / (1 - m u) (Higham's bound for m chained roundings), n visible keys,
// d = head_dim, M = max |v| over the visible keys of the row's kv head, l_j = the exact
// logit of key j, and S >= scale * max_j sum_d |q_d||k_jd|, so |l_j| <= S. With RoPE the
// errors are relative per rotated pair, so S must also bound sum_pairs ||q_pair|| ||k_pair||;
// the reference passes S = scale ||q|| max_j ||k_j||, which bounds both (Cauchy-Schwarz).
//
// What is NOT in the bound: rounding q, k, v to the storage dtype. The token table is
// already rounded, engine and reference read the same numbers, so that rounding is
// modelled exactly instead of tolerated.
//
// 1. Logit error. Every computed logit is l_j + e_j with |e_j| <= delta:
//    * q.k in f32 (d products, d - 1 sums) and the scale (rounded to f32, one multiply):
//      gamma_{d+2} S.
//    * the max subtraction l_j - m in f32: |l_j - m| <= 2S, one rounding: 2u S.
//    * exp in f32 (<= 1 ulp, relative 2u), and once more for a flash engine's rescale or
//      split merge factor exp(m_i - m): each is a relative weight error, i.e. an absolute
//      logit error of 2u: 4u. (The rescale factor multiplies numerator and normaliser
//      alike, so only its rounding, not its value, reaches the output.)
//    * RoPE, rotation in f32 from double angles: cos and sin rounded, two products, one
//      sum: each rotated element is off by <= 3u (|a cos| + |b sin|) <= 3u ||pair||, a pair
//      by <= 3 sqrt(2) u ||pair||, for q and for k: 6 sqrt(2) u < 9u, times
//      sum_pairs ||q_pair|| ||k_pair|| <= S: 9u S.
//    * RoPE, the rotated k stored again in the dtype (the engine caches rotated keys):
//      u_s S.
//    * RoPE, an engine that computes the angle p * theta^(-2i/d) in f32: the frequency is
//      off by <= (3 + ln theta) u relative (pow, the division, and the exponent 2i/d
//      rounded when d is not a power of two), the product adds u, so the angle is off by
//      <= (4 + ln theta) p u radians; with theta <= 1e7 (ln theta < 16.2) that is <= 20 p u.
//      A pair turned by a wrong angle a moves by <= |a| ||pair||; q is at p and k at
//      j <= p: 2 * 20 p u S.
//    delta = S (gamma_{d+2} + 2u + [rope: 9u + u_s + 40 p u]) + 4u.
//
// 2. From logits to outputs. If every logit moves by at most delta, every softmax weight
//    w_j = e^{l_j} / sum_k e^{l_k} moves by a factor within [e^{-2 delta}, e^{2 delta}], so
//    |sum_j (w'_j - w_j) v_j| <= sum_j w_j |w'_j / w_j - 1| M <= (e^{2 delta} - 1) M.
//    Both results are convex combinations of values in [-M, M], so the term is also <= 2M.
//    With one visible key (n = 1) the weight is exactly 1 and the term is 0.
//
// 3. The weighted sum N = sum_j w_j v_j and normaliser W = sum_j w_j in f32, sequential
//    summation (Higham): |dN| <= gamma_n sum_j w_j |v_j| <= gamma_n W M (one product and
//    up to n - 1 sums per term), |dW| <= gamma_{n-1} W, so N / W is off by <= (2n + 4) u M
//    (the 4: the division, the final store, slack for second-order terms). Underflow adds
//    at most 2^-149 absolute per term: n 2^-149.
//
// bound = 2 * (min(e^{2 delta} - 1, 2) M + (2n + 4) u M + n 2^-149), and 0 when M = 0
// (every visible value is zero, so an honest engine's sums are exact zeros).
// The factor 2 is the safety margin; it is also exactly what an online-softmax engine
// that rescales at every key needs (its terms see up to 2n roundings instead of n).
//
// How this compares with real bugs: the bound is a few u times n M plus the logit term,
// i.e. ~1e-5 relative for small f32 rows (the worked example's row 3: n = 4, M = 16,
// S = 0 gives bound 3.8e-5), while a mutant is wrong by a fraction of M: a mask that
// restarts at the chunk gives 2 instead of 7.5 (error 5.5, ratio ~2e5). Long RoPE rows
// in bf16 are the loosest case (u_s = 2^-8 times S dominates delta); exact generated data
// (small integers, dyadic fractions, zero scores) keeps S and delta small so bugs stay loud.
#include "judge/tolerance.h"

#include <algorithm>
#include <cmath>

namespace kvfuzz {

namespace {

constexpr double kU = 0x1p-24;  // f32 unit roundoff: every engine accumulates in f32
constexpr double kSafety = 2.0;

double gamma(double m) {
  const double mu = m * kU;
  return mu < 1 ? mu / (1 - mu) : HUGE_VAL;
}

}  // namespace

double tolerance(const ToleranceInputs& in) {
  const double m = std::fabs(in.max_abs_value);
  if (!(m > 0)) return 0;  // also catches NaN: no row with a NaN value can pass
  const double n = std::max(1, in.visible_keys);
  const double d = std::max(1, in.head_dim);
  const double s = std::fabs(in.max_score_terms);

  double per_score = gamma(d + 2) + 2 * kU;
  if (in.rope) {
    const double p = static_cast<double>(std::max<int64_t>(0, in.position));
    per_score += 9 * kU + unit_roundoff(in.dtype) + 40 * p * kU;
  }
  const double delta = s * per_score + 4 * kU;

  // expm1(2) > 2, so from delta = 1 on (and for a NaN delta) the cap applies. With a single
  // visible key the weight is exp(0) / exp(0) = 1 exactly, whatever the logit's error.
  const double softmax_term =
      n == 1 ? 0 : (delta < 1 ? std::min(std::expm1(2 * delta), 2.0) : 2.0) * m;
  const double sum_term = (2 * n + 4) * kU * m + n * 0x1p-149;
  return kSafety * (softmax_term + sum_term);
}

}  // namespace kvfuzz
