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
//    * exp in f32 (<= 1 ulp, relative 2u; step 12 for a coarser one), and once more for a
//      flash engine's rescale or split merge factor exp(m_i - m): each is a relative weight
//      error, i.e. an absolute logit error of 2u: 4u. (The rescale factor multiplies
//      numerator and normaliser alike, so only its rounding, not its value, reaches the
//      output.)
//    * RoPE, rotation in f32 from double angles: cos and sin rounded, two products, one
//      sum: each rotated element is off by <= 3u (|a cos| + |b sin|) <= 3u ||pair||, a pair
//      by <= 3 sqrt(2) u ||pair||, for q and for k: 6 sqrt(2) u < 9u, times
//      sum_pairs ||q_pair|| ||k_pair|| <= S: 9u S.
//    * RoPE with cos/sin tables rounded to a dtype t (numerics.rope_tables: HF transformers
//      and vLLM cast them to the model dtype, flash_attn_with_kvcache takes them in q's),
//      the products and the sum perhaps rounded to t as well (a rotation computed in the
//      model dtype): an element is off by <= 3 u_t (|a cos| + |b sin|) more, a pair by
//      3 sqrt(2) u_t ||pair||, q and k: 9 u_t S more. (Step 5's boundary test widens by
//      the same 3 u_t (|a| + |b|) per element.)
//    * RoPE, the rotated k stored again in the dtype (the engine caches rotated keys):
//      u_s S.
//    * RoPE, an engine that computes the angle p * theta^(-2i/d) in f32: the frequency is
//      off by <= (3 + ln theta) u relative (pow, the division, and the exponent 2i/d
//      rounded when d is not a power of two), the product adds u, so the angle is off by
//      <= (4 + ln theta) p u radians; with theta <= 1e7 (ln theta < 16.2) that is <= 20 p u.
//      A pair turned by a wrong angle a moves by <= |a| ||pair||; q is at p and k at
//      j <= p: 2 * 20 p u S. (Not for an engine that declares rope_angles_exact.)
//    delta = S (gamma_{d+2} + 2u + [rope: 9u + 9 u_t + u_s + 40 p u]) + 4u.
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
// The bound above is the default: an engine that declares nothing. The declared numerics
// (EngineNumerics) change it as follows; each deterministic effect is modelled by the
// reference, and only arithmetic noise is tolerated.
//
// 4. Softmax term with the row's own spread. For any constant c, sum_j (w'_j - w_j) c = 0,
//    so out' - out = sum_j (w'_j - w_j)(v_j - out) and the term of step 2 is at most
//    (e^{2 delta} - 1) D with D = sum_j w_j |v_j - out| (the reference's weights and row,
//    per value dim, the largest over the dims). D <= 2M, and D is small when the weights
//    sit on a few keys or the values agree, which is exactly where large scores (large
//    delta) happen: such rows stay judged. Used whenever the reference supplies D.
//
// 5. Rotated keys cached in the storage dtype (rotated_keys_in_storage = true; and every
//    key in a quantized format under RoPE, below). The
//    reference rounds its rotated keys to the dtype too, so the u_s S term of step 1 goes.
//    What remains is the boundary: the engine rotates in f32, off by at most
//    e = (4 + 20 p) u (|a| + |b|) on an element of the pair (a, b) (step 1's rotation and
//    angle errors), and when round(x - e) != round(x + e) it may store the neighbour of the
//    reference's value: off by at most 2e + spacing. The reference adds, per key,
//    scale * sum over such elements of |q_d| (2e + spacing) to that key's logit error and
//    passes the largest (rotated_key_ambiguity). Declared false (keys cached unrotated or
//    in f32): no rounding and no u_s term. f32 storage: nothing to round. Rotated queries
//    rounded to the storage dtype (rotated_queries_in_storage, as a kernel handed
//    pre-rotated f16 q and k computes) are modelled the same way; a boundary element's
//    error reaches every logit through at most ||err_q|| max_j ||k_j|| (Cauchy-Schwarz),
//    added to rotated_key_ambiguity. A key in a quantized format (fp8, a ggml block, an
//    affine group) is stored after its rotation and dtype rounding: its element may read
//    back as anything the format makes of inputs within [round(x - e), round(x + e)]
//    (kv_format.h's round_trip_reach: fp8 element by element; a block or group whole, its
//    scale included), err_jd the width of that.
//
// 6. Score accumulation in f16 (score_accumulation = f16): the q.k products and sums round
//    to u16 = 2^-11. The worst case gamma_{d+2}(u16) S is ~d u16 S, as large as a bug for
//    d = 128; real rounding errors are independent and of either sign, so the
//    probabilistic bound of Higham and Mary ("A new approach to probabilistic rounding
//    error analysis", SIAM J. Sci. Comput. 2019) is used, as the model level does: an inner
//    product of m terms is off by at most lambda sqrt(m) u16 sum |q||k| with probability
//    >= 1 - 2 exp(-lambda^2 / 2); lambda = 8 gives 2.5e-14 per dot product, so a run of
//    10^9 dot products sees an excess with probability < 1e-4. Storage wider than f16 is
//    also rounded to f16 on the way in: 2 u16 S more.
//
// 7. Value accumulation in f16 (value_accumulation = f16): each key's contribution to the
//    running sum costs at most three f16 roundings (the product, the sum, a rescale), each
//    at most u16 A relative to the normalised row, A = sum_j w_j |v_j| <= M (a partial sum
//    of P v, divided by the final normaliser, is at most that). Probabilistic as in 6: the
//    sum term of step 3 becomes lambda sqrt(3n) u16 A + 4 u16 M. The three roundings per key
//    already count what the safety factor 2 stands for elsewhere, so it is not applied to
//    this term, nor to step 8's (whose lambda is its margin). (Long f16 sums that
//    stagnate, adding terms below half an ulp of the sum, err systematically and fail:
//    that is a real precision bug of such a kernel.)
//
// 8. P rounded to a dtype before P.V (numerics.p, as FlashAttention-2 rounds P to the
//    input dtype; its normaliser sums the unrounded P). Each weight gets a relative error
//    r_j, |r_j| <= u_p, so the row moves by sum_j w_j r_j v_j, or by sum_j w_j r_j
//    (v_j - out) (to first order) when the normaliser sums the rounded P; |v_j| <= M and
//    |v_j - out| <= 2M, so 2M covers both conventions below. A key
//    whose logit is the maximum has P = exp(0) = 1 exactly in every tile (its own tile's
//    running max is its logit), so it contributes nothing; the others contribute at most
//    2 u_p M times their weight: worst case 2 u_p M p_weight_mass. That is M/128 for bf16,
//    larger than a bug that moves one key's weight in a long context. Keys whose P lands
//    in different cells of the P dtype round independently; keys in one cell alike. So,
//    by Hoeffding's inequality over cells (coefficients 2 u_p M W_c, W_c the cell's weight):
//    |error| <= 2 lambda u_p M sqrt(sum_c W_c^2) with probability >= 1 - 2 exp(-lambda^2 / 2),
//    lambda = 8 again. The term is the smaller of the two. A P below the dtype's smallest
//    normal is off by at most half the subnormal spacing in absolute terms, against a
//    normaliser >= 1: lambda sqrt(count) spacing / 2 M more. (A tile engine rounds P
//    relative to its running max, not the global one; its P's are then larger, never
//    subnormal where the global ones are normal, and its relative errors obey the same
//    bound.)
//
// 9. Output rounded to a dtype (numerics.output): the engine's unrounded value is within
//    the bound of the reference and then rounds to its cell's representative. So a
//    returned value is accepted when |got - expected| <= bound + spacing / 2 at the largest
//    magnitude the unrounded value can have, |expected| + bound (accepted_error). This is
//    the exact rounding model with its half-ulp boundary: a value an honest engine cannot
//    return (one cell further) fails.
//
// 10. Split partials combined by log-sum-exp (numerics.split_combine_lse: FlashAttention-2's
//    combine, FlashInfer's merge_states, vLLM's merge_attn_states). Each split s keeps its
//    output normalised, O_s, and lse_s = m_s + log l_s in f32; the combine takes
//    L = log(sum_s exp(lse_s - max)) + max and weights exp(lse_s - L). With exact lse's the
//    weights sum to 1 and the logit errors of the splits' own keys are step 2's (they move
//    whole splits' weights, renormalised by L). What is new is rounding at the magnitude
//    of the scores: |lse_s|, |L| <= Λ = S + delta + ln n (|m_s| <= S + delta, 1 <= l_s <=
//    n), and each is off by u Λ for its scaled max, u Λ for its sum, and a log's error
//    (__logf: 2^-21 absolute plus 3 ulps, <= 8u + 3u ln n); L also by gamma_k for the sum of
//    k <= n exponentials; lse_s - L rounds once more (u 2Λ) and its exp by 2u. So each
//    weight is off by a factor e^{±eps}, eps <= 8u (Λ + 4) + n u, the weights no longer sum
//    to 1, and the step-4 argument (a constant moves nothing) fails: the row moves by up to
//    sum_s w_s |e^{eps_s} - 1| |O_s| <= expm1(eps) A, A = sum_j w_j |v_j| >= sum_s w_s |O_s|.
//    An f32 engine meets it at scores in the hundreds, an f16 one at scores in the
//    thousands (three keys scoring 16384 merge to 1 - 2^-10 against an exact 1). Partials
//    stored in a narrower dtype t (numerics.split_partials: FlashInfer and vLLM merge
//    partials in the model dtype) are each off by u_t |O_s| (and, unnormalised, their
//    normalisers as much), plus half a subnormal spacing: 2 u_t A + spacing_t(0) more. Both
//    with the safety factor: combine = 2 (expm1(eps) A + [2 u_t A + spacing_t(0)]). The term
//    is charged to every row of an engine that declares it, split or not.
//
// 11. P normalised before it is rounded (numerics.p_normalised: vLLM's paged attention,
//    ONNX Runtime's Attention in f16): P_j = round_p(exp(s_j - m) / l) multiplies v_j and
//    nothing divides afterwards. Step 8 holds with the normalised weights for the cells
//    (the reference pools w_j, not exp(s_j - m)) and with every key counted, the largest
//    too: its P is no longer exactly 1. The error of a cell is r_c W_c v_j with |v_j| <= M,
//    inside step 8's 2 u_p M. vLLM divides by l + 1e-6: every weight shrinks by up to 1e-6
//    relative, the row by 1e-6 A, doubled for safety and charged to P rounding (with or
//    without `p`). The f32 arithmetic of the normalisation (each weight off by (n + 3) u)
//    is inside step 3's sums term.
//
// 12. A coarse exp (numerics.exp_ulps = k > 1: torch's CPU flash attention computes
//    exp(s - m) with Vectorized<float>::fexp_u20, up to 940 ulps off, 1.12e-4 relative,
//    measured against exp in double over 3e6 arguments in [-87, 0]; only the scalar tail
//    of a row uses std::exp). Each weight is off by a factor within 1 +- 2ku, which step 1
//    takes as a logit error of 2ku in place of exp's 2u; numerator and normaliser see the
//    same exp, so step 4's argument holds. What step 8 no longer has is the key at the
//    max with P = 1 exactly: exp(0) itself is off (fexp_u20 gives 0.99995), P still
//    rounds to 1 in bf16 and f16 while the normaliser sums the unrounded 0.99995, so that
//    key's P is off by up to 2ku relative: 2 (2ku) M more (2M: both normaliser
//    conventions, as in step 8). Near underflow such exps may return up to 2^-125 where
//    the exact value is below 2^-126 (fexp_u20 builds 2^n from the exponent bits, wrong
//    below n = -126): n 2^-125 M more in the sums, doubled. With k = 1024 the logit term
//    grows by ~1.2e-4 and the P term by 2.4e-4 M: an eighth of bf16's half ulp (2^-9
//    relative) and about f16's (2^-12), so such an engine is still judged to within an
//    ulp or two of its output dtype.
//
// 13. The attention features (Layout: softcap, alibi, sinks). Each adds arithmetic of its
//    own to every logit; what is deterministic (the tanh, the bias, the sink's place in the
//    softmax) the reference computes exactly, and only the f32 noise is tolerated:
//    * soft cap, c tanh(s / c): the engine's s' = s + e is off by step 1's error e (the
//      dot product and RoPE parts of delta, before the max subtraction); s' / c rounds
//      (u |s'| / c), and c tanh moves that by its slope sech^2 times c. The slope is
//      largest at the smallest |s| of the row, s_min, and at least (|s| - e - u |s'|) / c
//      from 0 between the two arguments: the error is at most
//      sech^2(max(0, s_min - e - u (S + e)) / c) (e + u (S + e)), which shrinks as every
//      key of a row saturates (a row of huge scores under a cap stays judged). tanhf is off
//      by a few ulps of a value below 1 (4u, times c), the product by c rounds (u c), and
//      the max subtraction now spans the capped logits (2u c): 7u c more.
//    * ALiBi, slope (k - q): the slope rounded to f32, the product, the sum with the score
//      (u each, of at most B = the largest |bias| over the row's keys), and the max
//      subtraction now spans up to 2S + B: 5u B. Kernels that build the bias in the model
//      dtype (not modelled) would need more.
//    * a sink logit z: its exp(z - m) sees the rounding of z - m, |z - m| <= |z| + S + B:
//      u (|z| + S + B). The sink is a term of the normaliser with value 0: n counts it
//      (steps 2 and 3: a row with one key and a sink no longer has weight exactly 1), and
//      the reference adds w_sink |0 - out| to D (step 4's constant argument then holds over
//      the keys and the sink, whose weights sum to 1).
//    For the log-sum-exp combine (step 10) the scores reach S + B + |z|.
//    Key by key (the reference, with a soft cap): key j's logit is off by at most
//    delta_j = sech^2(max(0, |s_j| - r) / c) r + rest, r = e + u (S + e), rest the terms
//    above that are not the score's. w'_j / w_j = e^{eta_j} / sum_k w_k e^{eta_k} with
//    |eta_k| <= delta_k, so |w'_j / w_j - 1| <= max(e^{delta_j} Z' - 1, 1 - e^{-delta_j} / Z'')
//    with Z' = 1 / sum_k w_k e^{-delta_k} and Z'' = sum_k w_k e^{delta_k} (the sink a key of
//    value 0), and step 4's term becomes sum_j w_j that bound |v_j - out|, per value dim.
//    A key that saturates the cap has a tiny delta_j; a key far below the others' scores
//    has a tiny weight: a row of huge scores under a cap stays judged.
//    The same key-by-key term serves step 5's rotated keys in a quantized format (fp8 or
//    a ggml block format under RoPE): a block whose f16 scale the engine's rotation may
//    round either way moves every element of it by up to an f16 step, so one such key may
//    carry a logit error far above the others'. Its own a_j = scale sum_d |q_d| err_jd joins
//    r for that key alone (without a cap, delta_j = r + a_j + rest), where the row-wide
//    term gives every key the largest; a_j on the row's dominant key moves the row little,
//    and a rare ambiguous block no longer leaves the row unjudged (issue 27: 452 of 24,885
//    rows unjudged with the row-wide term on 300 cases of block keys under RoPE).
//
// 14. A query quantized to K's ggml blocks (numerics.query_blocks, with K in q8_0, q4_0,
//    q4_1, q5_0 or q5_1: ggml's CPU kernels convert q to the K type's vec_dot_type, q8_0 or
//    q8_1, before the integer dot products). The reference quantizes its q the same way
//    (query_blocks.h), so what it models is the engine's q exactly but for two things: an
//    element whose quant ggml's x86 quantizer (x * 127 / amax) and its ARM one (x * (1 / d))
//    round apart (both to nearest, ties to even; ggml's scalar fallback, ties away, is not
//    modelled), off by f16(d) times the difference (and, for q8_1,
//    the block sum those quants give). That reaches a logit by at most scale ||e|| ||k||
//    (Cauchy-Schwarz), added as step 5's query ambiguity is. For q8_1 (q4_1 and q5_1 keys)
//    ggml's dot product is sum_b (d_k d_q sum q_k q_q + m_b s_b) with s_b = f16(d * sum),
//    where the dequantized key times the quantized query has m_b f16(d) sum: the reference
//    (its plain form) adds sum_b m_b (s_b - f16(d) sum) to each key's score, m_b the
//    least element the key's block reads back (its stored minimum exactly), so that too is
//    modelled, not tolerated. The integer sums are exact; the scales' products and the f32
//    sum over blocks are inside step 1's gamma_{d+2} S.
//    Under RoPE the engine quantizes its own rotation of q (step 5's reach e, after its
//    dtype rounding where it declares rotated queries in storage): each value may read back
//    within a width w_d of the reference's (query_blocks_reach: the quantizer's steps at
//    the corners of the elements' and amax's ranges), and each q8_1 block's s moves with
//    the unrounded d even where no quant does. Key j's score then moves by at most
//    sum_d w_d (|k_jd| + err_jd) + sum_b reach_b |m_jb|, which joins that key's own
//    ambiguity (step 13's key by key term), not the row's.
//
// How this compares with real bugs: the bound is a few u times n M plus the logit term,
// i.e. ~1e-5 relative for small f32 rows (the worked example's row 3: n = 4, M = 16,
// S = 0 gives bound 3.8e-5), while a mutant is wrong by a fraction of M: a mask that
// restarts at the chunk gives 2 instead of 7.5 (error 5.5, ratio ~2e5). For declared
// numerics the bound grows to the noise of that arithmetic (bf16 P: up to M/128; bf16
// output: half a bf16 ulp more), still far below a fraction of M.
#include "judge/tolerance.h"

#include <algorithm>
#include <cmath>

namespace kvfuzz {

namespace {

constexpr double kU = 0x1p-24;  // f32 unit roundoff
constexpr double kU16 = 0x1p-11;
constexpr double kSafety = 2.0;
constexpr double kLambda = 8.0;  // the probabilistic bounds' lambda (steps 6 to 8)

double gamma(double m) {
  const double mu = m * kU;
  return mu < 1 ? mu / (1 - mu) : HUGE_VAL;
}

// Step 1, and step 6 for f16 score accumulation: the relative part of the logit error.
double per_score_error(const ToleranceInputs& in, double d) {
  const EngineNumerics& num = in.numerics;
  double per_score = 2 * kU;
  if (num.score_accumulation == DType::f16) {
    per_score += kLambda * std::sqrt(d + 2) * kU16 + (in.dtype == DType::f32 ? 2 * kU16 : 0);
  } else {
    per_score += gamma(d + 2);
  }
  if (in.rope) {
    const double p = static_cast<double>(std::max<int64_t>(0, in.position));
    // Step 5: a declared caching is modelled by the reference (or absent), not tolerated.
    const double stored = num.rotated_keys_in_storage.has_value() ? 0 : unit_roundoff(in.dtype);
    // An engine that declares its angles computed in double has no angle error to speak of.
    const double angles = num.rope_angles_exact.value_or(false) ? 0 : 40 * p * kU;
    const double tables = num.rope_tables == DType::f32 ? 0 : 9 * unit_roundoff(num.rope_tables);
    per_score += 9 * kU + tables + stored + angles;
  }
  return per_score;
}

// A of steps 7, 10 and 11 when the reference gave it, M otherwise.
double magnitude(const ToleranceInputs& in, double m) {
  return in.value_magnitude >= 0 ? std::min(in.value_magnitude, m) : m;
}

// Step 12: the relative error of the softmax's exp, 1 ulp (2u) unless declared coarser.
double exp_error(const EngineNumerics& numerics) {
  return 2 * kU * std::max(1, numerics.exp_ulps);
}

// Step 8: P rounded before P.V, and step 11's epsilon of a normalising engine; step 12's
// key at the max, whose coarse exp(0) rounds to P = 1 while the normaliser keeps it.
double p_rounding_term(const ToleranceInputs& in, double m, double n) {
  const double epsilon = in.numerics.p_normalised ? kSafety * 1e-6 * magnitude(in, m) : 0;
  if (!in.numerics.p) return epsilon;
  const double max_key =
      in.numerics.exp_ulps > 1 ? std::min(2 * exp_error(in.numerics) * m, 2 * m) : 0;
  const DType p = *in.numerics.p;
  const double u_p = unit_roundoff(p);
  const double worst = 2 * u_p * m * in.p_weight_mass;
  const double likely = 2 * kLambda * u_p * m * in.p_weight_spread;
  const double subnormal =
      kLambda * std::sqrt(static_cast<double>(in.p_subnormal_keys)) * dtype_spacing(p, 0) / 2 * m;
  return std::min(worst, likely) + std::min(subnormal, n * dtype_spacing(p, 0) / 2 * m) + epsilon +
         max_key;
}

// Step 10: split partials combined by log-sum-exp, or stored in a narrower dtype.
double combine_term(const ToleranceInputs& in, double m, double n, double s, double delta) {
  const EngineNumerics& num = in.numerics;
  const double a = magnitude(in, m);
  double term = 0;
  if (num.split_combine_lse) {
    const double eps = 8 * kU * (s + delta + std::log(n) + 4) + n * kU;
    term += std::min(std::expm1(eps), 2.0) * a;
  }
  if (num.split_partials != DType::f32) {
    term += 2 * unit_roundoff(num.split_partials) * a + dtype_spacing(num.split_partials, 0);
  }
  return kSafety * term;
}

// Step 13, the soft cap: the score error e (the dot product's, RoPE's) through the cap.
double capped_score_error(const ToleranceInputs& in, double s, double e) {
  if (!(in.softcap > 0)) return e;
  const double c = in.softcap;
  const double reach = e + kU * (s + e);
  const double x = std::max(0.0, std::fabs(in.min_abs_score) - reach) / c;
  const double sech = x > 350 ? 0 : 1 / std::cosh(x);
  return sech * sech * reach + 7 * kU * c;
}

// Step 13's score error before the cap, e: the dot product's and RoPE's.
double raw_score_error(const ToleranceInputs& in, double s) {
  return s * per_score_error(in, std::max(1, in.head_dim)) + in.rotated_key_ambiguity;
}

// Step 13: the logit error the features add beside the score's (ALiBi, the sink).
double feature_logit_error(const ToleranceInputs& in, double s) {
  const double bias = std::fabs(in.alibi_reach);
  double error = 0;
  error += 5 * kU * bias;
  if (in.sink) error += kU * (std::fabs(*in.sink) + s + bias);
  return error;
}

}  // namespace

BoundParts tolerance_parts(const ToleranceInputs& in) {
  const double m = std::fabs(in.max_abs_value);
  BoundParts parts;
  if (!(m > 0)) return parts;  // also catches NaN: no row with a NaN value can pass
  // Step 13: a sink is one more term of the softmax.
  const double n = std::max(1, in.visible_keys) + (in.sink ? 1 : 0);
  const double s = std::fabs(in.max_score_terms);
  const double score_error = capped_score_error(in, s, raw_score_error(in, s));
  const double delta = score_error + exp_error(in.numerics) + 2 * kU + feature_logit_error(in, s);

  // Step 4: the row's own spread D when known, M otherwise. D is computed from double
  // weights, which underflow below 2^-1022: each key may hide up to 2^-1022 * 2M of it, so
  // that much is added back (negligible, but it keeps a huge delta from multiplying an
  // underflowed zero). From delta ~ 354 on (and for a NaN delta) the growth is infinite and
  // the cap 2M applies. With a single visible key the weight is exp(0) / exp(0) = 1
  // exactly, whatever the logit's error.
  const double spread =
      in.value_deviation >= 0 ? std::min(in.value_deviation + n * 0x1p-1021 * m, 2 * m) : m;
  const double growth = std::expm1(2 * delta);
  double softmax_term = n == 1 ? 0 : (growth < HUGE_VAL ? std::min(growth * spread, 2 * m) : 2 * m);
  if (in.keywise_softmax >= 0 && n > 1) {  // steps 5 and 13, key by key
    softmax_term = std::min(softmax_term, in.keywise_softmax + n * 0x1p-1021 * m);
  }
  if (in.numerics.value_accumulation == DType::f16) {
    const double a = magnitude(in, m);
    const double f16_sums = kLambda * std::sqrt(3 * n) * kU16 * a + 4 * kU16 * m;
    parts.sums = f16_sums;
  } else {
    parts.sums = kSafety * ((2 * n + 4) * kU * m + n * 0x1p-149);
  }
  if (in.numerics.exp_ulps > 1) parts.sums += kSafety * n * 0x1p-125 * m;  // step 12
  parts.logit_error = delta;
  parts.softmax = kSafety * softmax_term;
  parts.p_rounding = p_rounding_term(in, m, n);
  const double reach = s + std::fabs(in.alibi_reach) + (in.sink ? std::fabs(*in.sink) : 0);
  parts.combine = combine_term(in, m, n, reach, delta);
  return parts;
}

KeyErrors key_errors(const ToleranceInputs& in, double keys_own) {
  const double s = std::fabs(in.max_score_terms);
  const double e = std::max(0.0, raw_score_error(in, s) - keys_own);
  return {
      .reach = e + kU * (s + e),
      .rest = 7 * kU * in.softcap + exp_error(in.numerics) + 2 * kU + feature_logit_error(in, s),
      .softcap = in.softcap};
}

double KeyErrors::of(double abs_score, double own_ambiguity) const {
  const double r = reach + own_ambiguity * (1 + kU);
  if (!(softcap > 0)) return r + rest;
  const double t = std::max(0.0, abs_score - r) / softcap;
  const double sech = t > 350 ? 0 : 1 / std::cosh(t);
  return sech * sech * r + rest;
}

double tolerance(const ToleranceInputs& in) {
  return tolerance_parts(in).total();
}

bool needs_value_magnitude(const EngineNumerics& numerics) {
  return numerics.value_accumulation == DType::f16 || numerics.split_combine_lse ||
         numerics.split_partials != DType::f32 || numerics.p_normalised;
}

double accepted_error(double bound, double expected, DType output) {
  if (output == DType::f32) return bound;  // the final f32 store is in step 3
  return bound + dtype_spacing(output, std::fabs(expected) + bound) / 2;
}

}  // namespace kvfuzz
