// The model-level tolerance: how far an honest cached forward (f32 arithmetic, q/k/v
// rounded to the layout's dtype, an honest f32-accumulating engine per layer) may land from
// the double-precision full-prefix reference, on one logit, one attention output value and
// one hidden value of every layer. Derived here, once.
//
// Why not a worst-case bound like tolerance.cpp's. At attention level the engine and the
// reference read the same rounded numbers, so only f32 accumulation is tolerated and a
// worst-case (Higham) bound is tiny. At model level the reference is exact and the engine's
// q, k, v are rounded to f16/bf16 (unit roundoff u_s = 2^-11, 2^-8): that rounding is the
// dominant error and it compounds through the layers. Worst-case propagation (every
// rounding error aligned with the top singular vector of every weight matrix, every logit
// error of a softmax pushing the same way, Cauchy-Schwarz at every dot product) gives, for
// bf16 with head_dim 16, an attention-output bound of ~0.1 max|v| in the FIRST layer and
// O(1) after two: as large as what a cache bug does, so it would judge nothing. Real
// rounding errors are not aligned: they are independent, of either sign, and their effect
// grows like sqrt(terms) rather than terms (Higham & Mary, "A new approach to probabilistic
// rounding error analysis", SIAM J. Sci. Comput. 2019: an inner product of n terms is off by
// at most lambda sqrt(n) u sum|x||y| with probability >= 1 - 2 exp(-lambda^2 (1-u)^2 / 2)).
//
// So the bound is probabilistic, and measured on the scenario itself rather than composed
// from norms: model_math.h's Perturbation re-runs the double reference K times, each time
// adding independent uniform noise in [-1, 1) times the largest error an honest cached
// forward makes at every place where it rounds:
//   * q, k, v: rounded to the dtype, |err| <= u_s |x|                     (qkv = u_s)
//   * every matrix-vector product and RMSNorm in f32: sqrt(fan_in) u rms(out), the
//     probabilistic inner-product error with sum|x||w| ~ rms(out) (random weights)
//                                                                      (projection = u)
//   * RoPE: cos/sin rounding 9u per rotated pair; an engine computing the angle in f32:
//     40 p u (both as tolerance.cpp derives them), relative to the head's rms
//   * the rotated k stored again in the dtype: u_s |x|                (k_store, RoPE only)
//   * the attention output of one head: f32 softmax and weighted sum, (2 sqrt(n) + 4) u M
//     with M the largest visible |v| (tolerance.cpp's sum term, probabilistic form)
// Each perturbed run is one sample of "what an honest engine could have computed"; the
// samples' deviation from the exact reference propagates through every later layer, the
// cache (a key's perturbation reaches every later row that sees it) and the LM head exactly
// as the engine's rounding does, to first order (every step of the model is smooth: no
// argmax, no branch). The uniform relative noise overstates round-to-nearest (whose
// relative error is uniform only for mantissas near 1, smaller elsewhere).
//
// Per row and per quantity (each layer's attention output, each layer's hidden state, the
// logits) sigma_row is the root mean square of the deviation over the row's values and the
// K = 8 samples (a row's values share their scale, so pooling them makes sigma stable with
// few samples). Eight samples still leave a few rows in a hundred with sigma_row low by 2x
// (chi-square with few effective degrees of freedom), so each quantity also gets a
// scenario-wide relative spread rho (all rows and samples pooled: thousands of terms) and
//     sigma = sqrt(sigma_row^2 + (rho * rms(reference values of the row))^2)
//     bound = lambda * sigma + floor * rms(reference values of the row)
// lambda = 16: the engine's own error is one more draw of the same linearised process, a sum
// of many independent roundings, so near-Gaussian per value; the largest of up to ~10^5
// values compared in a long run is ~4.5 sigma; a value whose own sigma is above its row's
// (lm_head columns of larger norm, a head with larger values) costs up to ~2x; and the
// estimate of sigma is within ~1.5x of the truth. 4.5 * 2 * 1.5 = 13.5 < 16. The floor,
// 2^-14 of the row's rms, covers what the random model cannot: f32 errors that are
// systematic rather than random (an exp() always 1 ulp high, a summation order that drifts
// one way), at worst n u for f32 sums of n = 2^10 terms (longer ones, up to limits.h's
// ffn of 4096, rely on their modelled sqrt(n) u term); it only matters for f32 layouts,
// where sigma is ~1e-7 relative.
//
// Measured (tests/model/test_model.cpp: 162 generated and 27 hand-built checks, f32, f16 and
// bf16, RoPE, windows, GQA, truncate and fork): honest engines reach at most 0.24 of the
// logits bound (about 4 sigma) and 0.38 of a layer's bound; over 150 larger generated
// scenarios (the generator's default sizes, 1 to 3 layers, width up to 64, x 3 dtypes x 3
// engines) at most 0.41 of the logits bound and 0.54 of a layer's. Every attention mutant
// that fails at the logits exceeds the bound by at least 16x (bf16; f16 ~100x, f32 ~10^3x
// and more): a cache bug moves an attention output by a fraction of the values themselves,
// O(1) against a rounding noise of O(u_s). Mutants whose only symptom is a position (no
// RoPE: the values are right) fail on the reported position instead.
//
// Declared numerics (EngineNumerics, for a whole-model engine such as llama.cpp as for an
// attention engine in every layer). Each declaration is one more place where an honest
// engine rounds, so one more independent noise term of the same kind, at that place, with
// that dtype's unit roundoff u_d (the f32 defaults add nothing, so an engine declaring
// nothing is judged exactly as before):
//   * rotated_queries_in_storage (RoPE): the rotated q rounded to the dtype, u_s |x|, as
//     the rotated k is (q_store; llama.cpp's CPU matmul converts q to f16 for an f16 cache)
//   * score_accumulation f16: each q.k summed in f16, the probabilistic inner-product
//     bound 2 sqrt(head_dim) u_d scale sum|q_i k_i| on the score (score_sum)
//   * p: every softmax weight rounded, |delta w_j| <= u_d w_j. Applied to the weights
//     themselves, so the output error sum_j delta_j w_j v_j is modelled exactly, not
//     bounded (p_round); a worst case, u_d M, would be ~0.05 % of M for f16, as large as
//     the f16 rounding of q/k/v that dominates the bound anyway
//   * value_accumulation f16: P.V's running sums rounded at every key. Each partial sum,
//     scaled by the final normaliser, is at most M (the weights seen so far sum to <= 1,
//     also for an online softmax's rescaled partial sums), so each rounding moves the
//     output by at most u_d M and n of them by ~sqrt(n) u_d M: the attention term's form
//     (2 sqrt(n) + 4) u M with u_d in place of u (the 2 covers the rescaling products)
//   * output: the attention rows (an attention engine) or the logits (a whole-model
//     engine) rounded to the dtype, u_d |x| (attention_round, logits_round); split
//     partials stored in a dtype are one more such rounding of the attention rows
//   * rope_tables: cos/sin and the rotation rounded to the dtype, 9 u_d per rotated pair
//     more, as tolerance.cpp derives it (rope)
//   * exp_ulps: a coarse exp moves every weight by up to exp_ulps 2^-23 relative, added to
//     p_round
//   * p_normalised: the weights' rounding is the p term's either way; split_combine_lse's
//     merge weights (off by about u times the largest score, tolerance.cpp step 10) get no
//     term of their own: model scenarios have no score spreads, so u |score| stays below
//     the f32 terms above
//   * query_blocks with K in a ggml block format: each q element off by up to its q8_0
//     block's error (q_blocks, below)
//   * activations (a whole-model engine: a torch model loaded in bf16 or f16): its weights
//     are rounded to the dtype, which the reference does too, exactly (model_check.cpp:
//     rounded_weights), and every value it computes rounds to the dtype at each place:
//     each product (o, gate, up, down, the LM head), each norm and the SwiGLU product
//     twice (transformers' RMSNorm rounds the normalised row and then its product with the
//     gain; silu(gate) rounds before the product with up), both residual sums, the
//     attention output (attention_round), and q, k and v where the cache's dtype is finer
//     than the activations' (else the qkv term is that rounding): u_d |x| per rounding,
//     relative noise (activations, activations_qkv; reference_forward.cpp's
//     activation_roundings). Measured (tests/model/test_model_activations.cpp): the built-in
//     cached model computing in bf16 or f16 passes at most 0.30 of the logits bound, and
//     fails every scenario over an f32 cache when it does not declare it (logits 12x to 270x
//     the bound); transformers' MistralForCausalLM in bf16 at most 0.32 over 40 cases
//     (adapters/transformers). Its two cache mutants computing in bf16 fail on every scenario
//     they fail in f32 (6 of 6 each), at least 3.0x the bound (medians 5.0x and 7.0x).
// rotated_keys_in_storage and rope_angles_exact add nothing: the k_store and
// rope_per_position terms above are always on, so both answers are covered.
//
// The cache's ggml block formats (Layout::k_format, v_format: llama.cpp's --cache-type-k
// and -v). The reference stays exact, unquantized: an engine's k differs from the
// reference's by its f32 rounding, and quantization is not continuous (an element near a
// rounding edge stores a whole step apart), so "the reference's own blocks" would not be
// what an honest engine stores. Quantization is one more place where the engine rounds,
// with a known largest error per element: each stored key element (after RoPE) and value
// element moves by up to its largest error in its block (reference_forward.h,
// ggml_block_errors: half a step, q8_0 amax/254, q5_1 range/62, q4_1 range/30, q5_0 amax/32
// and q4_0 amax/16, up to a whole step for the few elements q4_0 and q5_0 clamp; the f16
// scale's rounding besides), uniform noise as for every other rounding. The errors of a
// quantizer are the textbook case of the uniform model: a block's elements land anywhere
// within their step. Its noise dominates the others, and 8 samples of it left a few rows'
// sigma low by 2x and more (kQuantizedSamples): such scenarios take 32. First order holds only
// while softmax weighs keys smoothly: at a score spread's scale (2^8 and more times the model's
// own) it picks one key, and which one a block's error decides, a jump of O(1) in the logits (an
// honest llama.cpp over q8_0 at scale 512 failed by 1.5x its bound), so validate.cpp keeps a
// quantized model scenario's scale within 8 / sqrt(head_dim). Measured:
// tests/model/test_model_kv_blocks.cpp.
//
// Measured both ways (tests/model/test_model_engines.cpp, the built-in whole-model engines
// over generated f32 and f16 model scenarios): the honest model-cached, model-cached-f16 (P
// rounded to f16) and model-cached-f16acc (P.V summed in f16) reach at most 0.17 of the
// logits bound. In f32 layouts, where nothing else rounds to f16, the declarations matter
// most: declared, the two f16 engines reach 0.12 and 0.015 of the bound; the same engines
// declaring f32 numerics fail 11 of 12 scenarios (0.62x to 2.6x the narrower bound at
// least). In f16 layouts the rounding of q/k/v to f16 dominates and P's adds little. Their
// truncate and fork mutants, computing with the same declared numerics, exceed the bound by
// 8.7x to 315x at the logits (or fail on a reported position); the f32 mutants by 7.7x and
// 88x. The attention engines with declared numerics (flash-bf16, flash-f16,
// contiguous-f16acc), judged at model level since the same terms model them, passed 60
// generated cases of `kvfuzz check --model`.
//
// Cost: K + 1 reference passes per check (K = 8, 32 with a quantized cache); they do not depend on
// the engine, nor on the schedule, pages or poison, so the K perturbed ones are cached
// (model_tolerance.h).
#include "model_tolerance.h"

#include <algorithm>
#include <cmath>
#include <list>
#include <tuple>
#include <utility>

#include "kvfuzz/dtype.h"
#include "kvfuzz/kv_format.h"
#include "kvfuzz/prng.h"
#include "model/model_math.h"
#include "model/reference_forward.h"

namespace kvfuzz::model {

namespace {

constexpr double kU = 0x1p-24;  // f32 unit roundoff
constexpr int kSamples = 8;
// With a quantized cache (its noise dominates every other term): 8 samples left a row's
// sigma low enough for an honest engine to reach 0.88 of its bound (an mlx-lm
// QuantizedKVCache scenario, affine4 in groups of 128; kvfuzz's own engines 0.82 on it),
// 32 gave 0.54 there.
constexpr int kQuantizedSamples = 32;
constexpr double kLambda = 16;
constexpr double kFloor = 0x1p-14;

double rms(const std::vector<double>& x) {
  double sum = 0;
  for (double v : x) sum += v * v;
  return x.empty() ? 0.0 : std::sqrt(sum / static_cast<double>(x.size()));
}

// Accumulates squared deviations of one quantity of one row over the samples.
struct Spread {
  double sum = 0;
  double count = 0;
  void add(const std::vector<double>& got, const std::vector<double>& expected) {
    const size_t n = std::min(got.size(), expected.size());
    for (size_t i = 0; i < n; ++i) {
      const double e = got[i] - expected[i];
      sum += e * e;
    }
    count += static_cast<double>(n);
  }
  double sigma() const { return count > 0 ? std::sqrt(sum / count) : 0.0; }
};

// A relative spread: squared deviations over squared reference values, summed over rows.
struct Ratio {
  double deviation = 0, reference = 0;
  void add(const Spread& spread, const std::vector<double>& values) {
    deviation += spread.sum;
    // Each value counted once per sample, as the deviations are.
    const double samples = values.empty() ? 0 : spread.count / static_cast<double>(values.size());
    for (double v : values) reference += v * v * samples;
  }
  double value() const { return reference > 0 ? std::sqrt(deviation / reference) : 0.0; }
};

struct RowSpread {
  std::vector<Spread> attention, hidden;
  Spread logits;
};

}  // namespace

namespace {

// What the bounds depend on (model_tolerance.h).
struct BoundsKey {
  std::optional<ModelConfig> model;
  Layout layout;                                                         // page_size 0
  std::vector<std::tuple<int, int, int64_t, std::vector<int>>> streams;  // seq, epoch, first row
  EngineNumerics numerics;
  bool whole_model = false;
  bool operator==(const BoundsKey&) const = default;
};

BoundsKey bounds_key(const Scenario& scenario, const ModelNumerics& declared) {
  BoundsKey key{scenario.model, scenario.layout, {}, declared.numerics, declared.whole_model};
  key.layout.page_size = 0;
  for (const LogicalStream& s : logical_streams(scenario)) {
    key.streams.emplace_back(s.seq, s.epoch, s.first_row, s.tokens);
  }
  return key;
}

struct BoundsCache {
  std::list<std::pair<BoundsKey, std::map<RowKey, RowBounds>>> entries;  // most recent first
  ModelBoundsCacheStats stats;
};

BoundsCache& bounds_cache() {
  thread_local BoundsCache cache;
  return cache;
}

std::map<RowKey, RowBounds> compute_bounds(const Scenario& scenario,
                                           const TransformerWeights& weights,
                                           const std::map<RowKey, TransformerRow>& reference,
                                           const ModelNumerics& declared);

}  // namespace

std::map<RowKey, RowBounds> model_bounds(const Scenario& scenario,
                                         const TransformerWeights& weights,
                                         const std::map<RowKey, TransformerRow>& reference,
                                         const ModelNumerics& declared) {
  BoundsKey key = bounds_key(scenario, declared);
  BoundsCache& cache = bounds_cache();
  for (auto it = cache.entries.begin(); it != cache.entries.end(); ++it) {
    if (!(it->first == key)) continue;
    ++cache.stats.hits;
    cache.entries.splice(cache.entries.begin(), cache.entries, it);
    return cache.entries.front().second;
  }
  ++cache.stats.misses;
  auto bounds = compute_bounds(scenario, weights, reference, declared);
  cache.entries.emplace_front(std::move(key), bounds);
  if (cache.entries.size() > kModelBoundsCacheEntries) cache.entries.pop_back();
  return bounds;
}

ModelBoundsCacheStats model_bounds_cache_stats() {
  return bounds_cache().stats;
}

void clear_model_bounds_cache() {
  bounds_cache() = BoundsCache{};
}

namespace {

std::map<RowKey, RowBounds> compute_bounds(const Scenario& scenario,
                                           const TransformerWeights& weights,
                                           const std::map<RowKey, TransformerRow>& reference,
                                           const ModelNumerics& declared) {
  const double us = unit_roundoff(scenario.layout.dtype);
  const EngineNumerics& numerics = declared.numerics;
  // A declared dtype's unit roundoff; nothing for f32, which the f32 terms already cover.
  const auto beyond_f32 = [](DType d) { return d == DType::f32 ? 0.0 : unit_roundoff(d); };
  const bool rope = scenario.layout.rope_theta.has_value();
  const uint64_t seed = scenario.model ? scenario.model->seed : 0;

  std::map<RowKey, RowSpread> spreads;
  const int samples = scenario.layout.quantized_kv() ? kQuantizedSamples : kSamples;
  for (int k = 0; k < samples; ++k) {
    Perturbation p;
    uint64_t state = seed + 0x6D6F64656Cull * static_cast<uint64_t>(k + 1);
    p.seed = splitmix64(state);
    p.qkv = us;
    p.projection = kU;
    p.rope = 9 * kU + 9 * beyond_f32(numerics.rope_tables);
    p.rope_per_position = 40 * kU;
    p.k_store = rope ? us : 0;
    p.attention = kU + beyond_f32(numerics.value_accumulation);
    p.q_store = rope && numerics.rotated_queries_in_storage.value_or(false) ? us : 0;
    p.score_sum = beyond_f32(numerics.score_accumulation);
    // A coarse exp (exp_ulps) is one more relative error of every weight, as P's rounding.
    p.p_round = (numerics.p ? beyond_f32(*numerics.p) : 0) +
                (numerics.exp_ulps > 1 ? numerics.exp_ulps * 0x1p-23 : 0);
    (declared.whole_model ? p.logits_round : p.attention_round) = beyond_f32(numerics.output);
    p.attention_round += beyond_f32(numerics.split_partials);
    // A whole model computing in a narrower dtype (activations): one rounding at each place
    // (more at some: activation_roundings), the attention output's among them.
    if (declared.whole_model) {
      p.activations = beyond_f32(numerics.activations);
      p.activations_qkv = p.activations > us ? p.activations : 0;
      p.attention_round += p.activations;
    }
    p.k_stored = scenario.layout.k_format;
    p.v_stored = scenario.layout.v_format;
    p.stored_dtype = scenario.layout.dtype;
    p.q_blocks = is_ggml_block(scenario.layout.k_format.quant) && numerics.query_blocks;
    const auto sample = evaluate_reference(scenario, weights, &p);
    for (const auto& [key, row] : sample) {
      const auto ref = reference.find(key);
      if (ref == reference.end()) continue;
      RowSpread& s = spreads[key];
      s.attention.resize(row.attention.size());
      s.hidden.resize(row.hidden.size());
      for (size_t l = 0; l < row.attention.size() && l < ref->second.attention.size(); ++l) {
        s.attention[l].add(row.attention[l], ref->second.attention[l]);
      }
      for (size_t l = 0; l < row.hidden.size() && l < ref->second.hidden.size(); ++l) {
        s.hidden[l].add(row.hidden[l], ref->second.hidden[l]);
      }
      s.logits.add(row.logits, ref->second.logits);
    }
  }

  // The scenario-wide relative spread of each quantity: sum of squared deviations over sum of
  // squared reference values, over every row and sample ([layer] for attention and hidden,
  // then the logits at [layers]).
  const size_t layers =
      scenario.model ? static_cast<size_t>(std::max(0, scenario.model->layers)) : 0;
  std::vector<Ratio> attention_rel(layers), hidden_rel(layers);
  Ratio logits_rel;
  for (const auto& [key, ref] : reference) {
    const RowSpread& s = spreads[key];
    for (size_t l = 0; l < layers && l < s.attention.size() && l < ref.attention.size(); ++l) {
      attention_rel[l].add(s.attention[l], ref.attention[l]);
      hidden_rel[l].add(s.hidden[l], ref.hidden[l]);
    }
    logits_rel.add(s.logits, ref.logits);
  }

  std::map<RowKey, RowBounds> bounds;
  for (const auto& [key, ref] : reference) {
    const RowSpread& s = spreads[key];
    RowBounds b;
    const auto bound = [](const Spread* spread, const Ratio& global,
                          const std::vector<double>& values) {
      const double own = spread ? spread->sigma() : 0.0;
      const double scale = rms(values);
      const double pooled = global.value() * scale;
      return kLambda * std::sqrt(own * own + pooled * pooled) + kFloor * scale;
    };
    for (size_t l = 0; l < ref.attention.size(); ++l) {
      const bool has = l < s.attention.size() && l < layers;
      b.attention.push_back(bound(has ? &s.attention[l] : nullptr, has ? attention_rel[l] : Ratio{},
                                  ref.attention[l]));
      b.hidden.push_back(
          bound(has ? &s.hidden[l] : nullptr, has ? hidden_rel[l] : Ratio{}, ref.hidden[l]));
    }
    b.logits = bound(&s.logits, logits_rel, ref.logits);
    bounds.emplace(key, std::move(b));
  }
  return bounds;
}

}  // namespace

}  // namespace kvfuzz::model
