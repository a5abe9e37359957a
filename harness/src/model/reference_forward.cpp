// The model-level oracle: every (sequence, epoch) stream of the program on its full prefix,
// in double, with no cache. Like harness/src/judge/reference.cpp it never sees chunks, pages or
// batches; it is the dumbest correct code: per layer, every position's q, k, v, then causal
// attention over keys [lo, p] (sliding window), GQA head mapping, RoPE (NeoX half split) at
// the true absolute position, the layout's softmax scale, and the MLP.
//
// The same code, given a Perturbation, adds noise where an honest cached forward rounds:
// that is how model_tolerance.cpp measures how far rounding can move each value.
#include "model/reference_forward.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstddef>
#include <map>
#include <optional>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

#include "judge/reference_kernel.h"
#include "kvfuzz/prng.h"
#include "model/attention_lanes.h"
#include "model/model_math.h"
#include "model/transformer.h"
#include "scenario/rope.h"

namespace kvfuzz {

namespace model {

namespace {

// The program origin of every row (op, chunk, token), by its key.
std::map<RowKey, RowOrigin> row_origins(const Scenario& scenario) {
  std::map<RowKey, RowOrigin> origins;
  for_each_chunk(scenario, [&](const PlacedChunk& c) {
    for (size_t t = 0; t < c.tokens->size(); ++t) {
      origins[RowKey{c.seq, c.epoch, c.start + static_cast<int64_t>(t)}] =
          RowOrigin{c.op, c.chunk, static_cast<int>(t)};
    }
  });
  return origins;
}

double rms(const double* x, size_t n) {
  double sum = 0;
  for (size_t i = 0; i < n; ++i) sum += x[i] * x[i];
  return n > 0 ? std::sqrt(sum / static_cast<double>(n)) : 0.0;
}

// The noise of one perturbed evaluation; does nothing when unperturbed. A rounding error
// is a function of the value rounded, not a fresh coin: the same token's q, k, v at the same
// layer (a token repeated in a stream, or in two sequences) are rounded alike by the engine,
// and their errors do not average out over the keys. So each draw is a hash of the
// sample's seed, the place (`site`, the element's index) and the exact value it perturbs:
// equal values at the same place get equal noise, different values independent noise.
class Noise {
 public:
  explicit Noise(const Perturbation* p) : p_(p) {}

  explicit operator bool() const { return p_ != nullptr; }
  const Perturbation& operator*() const { return *p_; }

  // x_i += relative * |x_i| * u_i.
  void relative(double* x, size_t n, double relative, uint64_t site) {
    if (!p_ || relative == 0) return;
    const uint64_t* m = mixes(site, n);
    for (size_t i = 0; i < n; ++i) x[i] += relative * std::fabs(x[i]) * draw(x[i], m[i]);
  }
  // x_i += absolute * u_i.
  void absolute(double* x, size_t n, double absolute, uint64_t site) {
    if (!p_ || absolute == 0) return;
    const uint64_t* m = mixes(site, n);
    for (size_t i = 0; i < n; ++i) x[i] += absolute * draw(x[i], m[i]);
  }
  // x_i += absolute_i * u_i, every u_i drawn at index 0 of the site (values apart from one
  // another, e.g. one score per key, each of which is its own element 0).
  void absolute_at_one_place(double* x, const double* absolute, size_t n, uint64_t site) {
    if (!p_) return;
    const uint64_t m = *mixes(site, 1);
    for (size_t i = 0; i < n; ++i) {
      if (absolute[i] != 0) x[i] += absolute[i] * draw(x[i], m);
    }
  }
  // x_i += s_i + a_i * u_i over consecutive blocks of `block` elements, amplitudes(x_b, block,
  // s_b, a_b) giving each block's shifts and amplitudes from its values before any moves.
  template <class Amplitudes>
  void blocks(double* x, size_t n, size_t block, Amplitudes amplitudes, uint64_t site) {
    if (!p_ || block == 0) return;
    const uint64_t* m = mixes(site, n);
    shifts_.resize(block);
    amplitudes_.resize(block);
    for (size_t b = 0; b + block <= n; b += block) {
      amplitudes(x + b, block, shifts_.data(), amplitudes_.data());
      for (size_t i = b; i < b + block; ++i) {
        x[i] += shifts_[i - b] + amplitudes_[i - b] * draw(x[i], m[i]);
      }
    }
  }
  // A matrix-vector product's (or a norm's) rounding: projection * sqrt(fan_in) * rms(x).
  void product(double* x, size_t n, size_t fan_in, uint64_t site) {
    if (!p_) return;
    absolute(x, n, p_->projection * std::sqrt(static_cast<double>(fan_in)) * rms(x, n), site);
  }

 private:
  // A draw's half that does not depend on the value: the sample's seed, the site and the
  // index mixed once. Every row draws at the same (site, index) places, so each pass makes
  // these once per place instead of once per draw (half of a draw's cost).
  const uint64_t* mixes(uint64_t site, size_t n) {
    if (last_ == nullptr || site != last_site_) {
      last_ = &mixes_[site];  // a node of the map: stays put as others are added
      last_site_ = site;
    }
    for (size_t i = last_->size(); i < n; ++i) {
      uint64_t state = p_->seed ^ (site * 0xD1B54A32D192ED03ull) ^
                       (static_cast<uint64_t>(i) * 0x8CB92BA72F3D8DD7ull);
      const uint64_t mixed = splitmix64(state);  // advances state, as the generator does
      last_->push_back(state ^ mixed);
    }
    return last_->data();
  }
  // Uniform in [-1, 1), from the project's PRNG mixing of the place's mix and the value.
  static double draw(double value, uint64_t mix) {
    uint64_t state = mix ^ std::bit_cast<uint64_t>(value);
    return uniform_from_bits(splitmix64(state));
  }
  const Perturbation* p_;
  std::vector<double> shifts_, amplitudes_;  // blocks()'s, reused
  std::unordered_map<uint64_t, std::vector<uint64_t>> mixes_;
  std::vector<uint64_t>* last_ = nullptr;
  uint64_t last_site_ = 0;
};

// The extremes of a block: the largest |x|, and (for q4_1 and q5_1) its minimum and range.
// max_is_negative: the first element of largest |x| is negative (ggml's q4_0 and q5_0 take
// their scale's sign from it).
struct Extremes {
  double amax = 0, min = 0, range = 0;
  bool max_is_negative = false;
};
Extremes extremes(const double* x, size_t n) {
  if (n == 0) return {};
  Extremes e{std::fabs(x[0]), x[0], 0, x[0] < 0};
  double hi = x[0];
  for (size_t i = 1; i < n; ++i) {
    e.min = std::min(e.min, x[i]);
    hi = std::max(hi, x[i]);
    if (std::fabs(x[i]) > e.amax) {
      e.amax = std::fabs(x[i]);
      e.max_is_negative = x[i] < 0;
    }
  }
  e.range = hi - e.min;
  return e;
}

// Where noise is injected: each place draws its own.
enum Site : uint64_t {
  kAttentionNorm = 1,
  kQProduct,
  kKProduct,
  kVProduct,
  kQRound,
  kKRound,
  kVRound,
  kQRope,
  kKRope,
  kKStore,
  kAttentionSum,
  kOutProduct,
  kMlpNorm,
  kGateProduct,
  kUpProduct,
  kDownProduct,
  kFinalNorm,
  kLogitsProduct,
  kSites
};

// The sites of declared numerics, apart from the others (so that an engine declaring
// nothing draws exactly the noise it drew before numerics could be declared).
enum NumericsSite : uint64_t {
  kQStore = 1ull << 40,
  kScoreSum,
  kPRound,
  kAttentionRound,
  kLogitsRound,
  kKBlocks,
  kVBlocks,
  kQBlocks,
  kNumericsSites = kQBlocks - kQStore + 1
};

// Where the product of model_math.h's row functions draws its noise (before at_layer).
Site site_of(Product product) {
  switch (product) {
    case Product::attention_norm:
      return kAttentionNorm;
    case Product::q:
      return kQProduct;
    case Product::k:
      return kKProduct;
    case Product::v:
      return kVProduct;
    case Product::out:
      return kOutProduct;
    case Product::mlp_norm:
      return kMlpNorm;
    case Product::gate:
      return kGateProduct;
    case Product::up:
      return kUpProduct;
    case Product::down:
      return kDownProduct;
    case Product::final_norm:
      return kFinalNorm;
    case Product::logits:
      return kLogitsProduct;
    case Product::residual:
    case Product::swiglu:
      break;  // elementwise: no product's noise (Rounded)
  }
  return kSites;
}

// Where a whole model's activations rounded to their dtype draw (EngineNumerics::activations):
// one site per place and layer (nullopt: after the layers), apart from every site above, so
// that a model declaring f32 activations draws exactly what it drew before they existed.
uint64_t activation_site(Product product, std::optional<size_t> layer) {
  return (uint64_t{1} << 41) + static_cast<uint64_t>(product) + 64 * (layer ? *layer + 1 : 0);
}

// How many roundings to the activations' dtype each place makes (model_tolerance.cpp): a
// norm two (transformers' RMSNorm rounds the normalised row, then its product with the
// gain), SwiGLU two (silu, then the product with up), q, k and v none beyond the layout's
// own rounding unless the activations' dtype is the coarser, the others one.
double activation_roundings(Product product, const Perturbation& p) {
  switch (product) {
    case Product::attention_norm:
    case Product::mlp_norm:
    case Product::final_norm:
    case Product::swiglu:
      return 2 * p.activations;
    case Product::q:
    case Product::k:
    case Product::v:
      return p.activations_qkv;
    default:
      return p.activations;
  }
}

// A site of layer l: distinct per layer.
uint64_t at_layer(Site site, size_t layer) {
  return static_cast<uint64_t>(site) + kSites * static_cast<uint64_t>(layer);
}
uint64_t at_layer(NumericsSite site, size_t layer) {
  return static_cast<uint64_t>(site) + kNumericsSites * static_cast<uint64_t>(layer);
}

// The `rounded` of model_math.h's row functions: the noise of each product at its site, of
// layer `layer`, or (nullopt) after the layers: the final norm and the LM head.
struct Rounded {
  Noise& noise;
  std::optional<size_t> layer;
  void operator()(Product product, double* x, size_t n, size_t fan_in) const {
    if (!noise) return;
    if (product != Product::residual && product != Product::swiglu) {
      const Site site = site_of(product);
      noise.product(x, n, fan_in, layer ? at_layer(site, *layer) : site);
    }
    noise.relative(x, n, activation_roundings(product, *noise), activation_site(product, layer));
  }
};

// A stream's rows, positions first_row..n-1, with their keys and program origins.
std::vector<TransformerRow> stream_rows(const LogicalStream& stream,
                                        const std::map<RowKey, RowOrigin>& origins) {
  const size_t n = stream.tokens.size();
  const auto first_row = static_cast<size_t>(stream.first_row);
  std::vector<TransformerRow> rows(n - std::min(n, first_row));
  for (size_t p = first_row; p < n; ++p) {
    TransformerRow& row = rows[p - first_row];
    row.key = RowKey{stream.seq, stream.epoch, static_cast<int64_t>(p)};
    const auto found = origins.find(row.key);
    if (found != origins.end()) row.origin = found->second;
  }
  return rows;
}

// One reference evaluation, one stream at a time: the model's shapes, the noise and the
// buffers every stream reuses, and the phases of a stream's forward pass over them.
class ReferencePass {
 public:
  ReferencePass(const Scenario& scenario, const TransformerWeights& weights,
                const Perturbation* perturbation)
      : layout_(scenario.layout),
        weights_(weights),
        d_(dims_of(*scenario.model, layout_)),
        W(d_.width),
        F(d_.ffn),
        hd(d_.head_dim),
        vd(d_.value_dim),
        qs(d_.q_size()),
        ks(d_.k_size()),
        vs(d_.v_size()),
        as(d_.attention_size()),
        group(std::max<size_t>(1, d_.kv_heads > 0 ? d_.q_heads / d_.kv_heads : 1)),
        scale_(layout_.softmax_scale()),
        noise_(perturbation),
        q_abs_(hd) {
    if (layout_.rope_theta) rope_.emplace(hd, *layout_.rope_theta);
  }

  // h = the stream's embeddings, and every buffer sized for its n tokens; false when a
  // token id is outside the vocabulary (validate() rejects such scenarios).
  bool embed(const LogicalStream& stream) {
    n_ = stream.tokens.size();
    h_.assign(n_ * W, 0.0);
    for (size_t p = 0; p < n_; ++p) {
      const auto id = static_cast<size_t>(stream.tokens[p]);
      if (id >= d_.vocab) return false;
      for (size_t i = 0; i < W; ++i) h_[p * W + i] = weights_.embedding[id * W + i];
    }
    x_.resize(n_ * W);
    q_.resize(n_ * qs);
    k_.resize(n_ * ks);
    v_.resize(n_ * vs);
    a_.resize(n_ * as);
    o_.resize(n_ * W);
    gate_.resize(n_ * F);
    up_.resize(n_ * F);
    logits_.resize(n_ * d_.vocab);
    return true;
  }

  // Layer l over the whole stream: q, k, v of every position, then attention, then the
  // MLP; the rows (positions first_row..) keep the layer's attention output and hidden state.
  void layer(size_t l, size_t first_row, std::vector<TransformerRow>& rows) {
    const TransformerWeights::Layer& w = weights_.layers[l];
    rows_qkv(h_.data(), n_, w, d_, x_.data(), q_.data(), k_.data(), v_.data(), Rounded{noise_, l});
    for (size_t p = 0; p < n_; ++p) round_qkv(l, p);
    transpose_keys();
    value_maxima();
    for (size_t p = 0; p < n_; ++p) attend(l, p);
    rows_mlp(a_.data(), n_, w, d_, h_.data(), x_.data(), o_.data(), gate_.data(), up_.data(),
             Rounded{noise_, l});
    for (size_t p = first_row; p < n_; ++p) {
      TransformerRow& row = rows[p - first_row];
      const double* ap = a_.data() + p * as;
      const double* hp = h_.data() + p * W;
      row.reported_positions.push_back(static_cast<int64_t>(p));
      row.attention.emplace_back(ap, ap + as);
      row.hidden.emplace_back(hp, hp + W);
    }
  }

  // The final norm and the LM head of positions first_row..: each row's logits, and the
  // rows moved into `result`.
  void logits(size_t first_row, std::vector<TransformerRow>& rows,
              std::map<RowKey, TransformerRow>& result) {
    if (first_row >= n_) return;
    const size_t V = d_.vocab;
    rows_logits(h_.data() + first_row * W, n_ - first_row, weights_, d_, x_.data(), logits_.data(),
                Rounded{noise_, std::nullopt});
    for (size_t p = first_row; p < n_; ++p) {
      double* lp = logits_.data() + (p - first_row) * V;
      noise_.relative(lp, V, noise_ ? (*noise_).logits_round : 0, kLogitsRound);
      TransformerRow& row = rows[p - first_row];
      row.logits.assign(lp, lp + V);
      result.emplace(row.key, std::move(row));
    }
  }

 private:
  // Position p's q, k, v at layer l after the projections (rows_qkv): (perturbed) their
  // rounding to the dtype, then RoPE.
  void round_qkv(size_t l, size_t p) {
    double* qp = q_.data() + p * qs;
    double* kp = k_.data() + p * ks;
    double* vp = v_.data() + p * vs;
    if (noise_) {
      noise_.relative(qp, qs, (*noise_).qkv, at_layer(kQRound, l));
      noise_.relative(kp, ks, (*noise_).qkv, at_layer(kKRound, l));
      noise_.relative(vp, vs, (*noise_).qkv, at_layer(kVRound, l));
    }
    if (layout_.rope_theta) rotate(l, p, qp, kp);
    store_blocks(l, qp, kp, vp);
  }

  // (Perturbed) the cache's blocks or groups: the key as the cache stores it (after RoPE),
  // the value, and the query quantized to q8_0 blocks against ggml block keys.
  void store_blocks(size_t l, double* qp, double* kp, double* vp) {
    if (!noise_) return;
    const Perturbation& n = *noise_;
    for (const auto& [stored, x, size, site] :
         {std::tuple{&n.k_stored, kp, ks, kKBlocks}, std::tuple{&n.v_stored, vp, vs, kVBlocks}}) {
      if (!stored->quantized()) continue;
      // A plain reference to capture: a lambda may not name a structured binding (clang).
      const KvFormat& format = *stored;
      const auto errors = [&](const double* b, size_t m, double* shift, double* noise) {
        stored_errors(format, n.stored_dtype, b, m, shift, noise);
      };
      noise_.blocks(x, size, static_cast<size_t>(row_multiple(format)), errors, at_layer(site, l));
    }
    if (n.q_blocks) {
      noise_.blocks(qp, qs, static_cast<size_t>(kGgmlBlock), query_block_errors,
                    at_layer(kQBlocks, l));
    }
  }

  // RoPE at the true absolute position p, and (perturbed) the rounding of the rotated
  // q and k stored again in the dtype.
  void rotate(size_t l, size_t p, double* qp, double* kp) {
    const double pos = static_cast<double>(p);
    for (size_t g = 0; g < d_.q_heads; ++g) rope_->rotate(qp + g * hd, p);
    for (size_t g = 0; g < d_.kv_heads; ++g) rope_->rotate(kp + g * hd, p);
    if (!noise_) return;
    const double rel = (*noise_).rope + (*noise_).rope_per_position * pos;
    for (size_t g = 0; g < d_.q_heads; ++g) {
      noise_.absolute(qp + g * hd, hd, rel * rms(qp + g * hd, hd), at_layer(kQRope, l));
    }
    for (size_t g = 0; g < d_.kv_heads; ++g) {
      noise_.absolute(kp + g * hd, hd, rel * rms(kp + g * hd, hd), at_layer(kKRope, l));
    }
    noise_.relative(kp, ks, (*noise_).k_store, at_layer(kKStore, l));
    noise_.relative(qp, qs, (*noise_).q_store, at_layer(kQStore, l));
  }

  // The keys of each kv head dimension-major (kt_[(g * head_dim + i) * n + j] is dimension i
  // of key j), so that key_dots reads several keys' same dimension at once; with score noise
  // their magnitudes too (kt_abs_), for the scores' sum of |q_i k_i|.
  void transpose_keys() {
    kt_.resize(d_.kv_heads * hd * n_);
    for (size_t j = 0; j < n_; ++j) {
      for (size_t g = 0; g < d_.kv_heads; ++g) {
        for (size_t i = 0; i < hd; ++i) kt_[(g * hd + i) * n_ + j] = k_[j * ks + g * hd + i];
      }
    }
    if (!noise_ || (*noise_).score_sum == 0) return;
    kt_abs_.resize(kt_.size());
    for (size_t i = 0; i < kt_.size(); ++i) kt_abs_[i] = std::fabs(kt_[i]);
  }

  // Each value head's largest |v| over the keys position p sees ([first_key(p), p]), for
  // the attention noise: once per (position, kv head), not per q head; a running maximum
  // where there is no window (the max is exact, so the order it is taken in does not matter).
  void value_maxima() {
    const size_t kv = d_.kv_heads;
    vmax_.resize(n_ * kv);
    for (size_t j = 0; j < n_ * kv; ++j) {
      const double* vh = v_.data() + j * vd;  // head g of token t at (t * kv_heads + g) * vd
      double largest = 0;
      for (size_t i = 0; i < vd; ++i) largest = std::max(largest, std::fabs(vh[i]));
      vmax_[j] = largest;
    }
    visible_vmax_.resize(n_ * kv);
    for (size_t p = 0; p < n_; ++p) {
      for (size_t g = 0; g < kv; ++g) {
        double largest = layout_.window || p == 0 ? 0.0 : visible_vmax_[(p - 1) * kv + g];
        for (size_t j = layout_.window ? first_key(p) : p; j <= p; ++j) {
          largest = std::max(largest, vmax_[j * kv + g]);
        }
        visible_vmax_[p * kv + g] = largest;
      }
    }
  }

  // The first key position p sees: 0, or the sliding window's first.
  size_t first_key(size_t p) const {
    return layout_.window
               ? p + 1 - std::min(p + 1, static_cast<size_t>(std::max(1, *layout_.window)))
               : 0;
  }

  // Position p's attention output at layer l, every q head over keys [lo, p] (sliding window).
  // Not shared with the cached forward (kernels/model/cached_transformer.cpp), unlike the
  // arithmetic around it (model_math.h's row functions): there the attention is the engine
  // under test's, through its cache; here it is the oracle's own, on the full prefix in
  // double, with the noise of declared numerics. Sharing it would judge an engine by itself.
  void attend(size_t l, size_t p) {
    const size_t lo = first_key(p);
    scores_.resize(p - lo + 1);
    for (size_t hq = 0; hq < d_.q_heads; ++hq) attend_head(l, p, lo, hq);
  }

  // One q head's softmax over the visible keys' scores, then its weighted sum of their values.
  void attend_head(size_t l, size_t p, size_t lo, size_t hq) {
    const size_t visible = p - lo + 1;
    const size_t g = hq / group;
    const double* qh = q_.data() + p * qs + hq * hd;
    const bool score_noise = noise_ && (*noise_).score_sum > 0;
    key_dots(qh, hd, kt_.data() + g * hd * n_ + lo, n_, visible, scores_.data());
    for (double& sc : scores_) sc *= scale_;
    if (score_noise) {
      // Each key's sum of |q_i k_i| in dimension order (|q_i| |k_i| is |q_i k_i| exactly),
      // then its score's noise, every key drawing at the same place (index 0 of the site).
      for (size_t i = 0; i < hd; ++i) q_abs_[i] = std::fabs(qh[i]);
      magnitudes_.resize(visible);
      key_dots(q_abs_.data(), hd, kt_abs_.data() + g * hd * n_ + lo, n_, visible,
               magnitudes_.data());
      const double per_magnitude =
          (*noise_).score_sum * 2 * std::sqrt(static_cast<double>(hd)) * std::fabs(scale_);
      for (double& m : magnitudes_) m *= per_magnitude;
      noise_.absolute_at_one_place(scores_.data(), magnitudes_.data(), visible,
                                   at_layer(kScoreSum, l));
    }
    double best = -HUGE_VAL;
    for (double sc : scores_) best = std::max(best, sc);
    // exp in 8-lane vectors, the attention reference's own (the same bits on every CPU).
    for (double& sc : scores_) sc -= best;
    reference_kernel::exp_nonpositive(scores_.data(), scores_.size());
    double total = 0;
    for (double sc : scores_) total += sc;
    if (noise_ && (*noise_).p_round > 0) {
      // P rounded after the normaliser was summed (FlashAttention-2; llama.cpp rounds
      // the normalised P, the same relative error per weight).
      for (double& sc : scores_) sc /= total;
      total = 1;
      noise_.relative(scores_.data(), visible, (*noise_).p_round, at_layer(kPRound, l));
    }
    double* out = a_.data() + p * as + hq * vd;
    for (double& sc : scores_) sc /= total;
    weighted_values(scores_.data(), visible, v_.data() + lo * vs + g * vd, vs, vd, out);
    const double largest = visible_vmax_[p * d_.kv_heads + g];
    if (noise_) {
      noise_.absolute(
          out, vd,
          (*noise_).attention * (2 * std::sqrt(static_cast<double>(visible)) + 4) * largest,
          at_layer(kAttentionSum, l));
      noise_.relative(out, vd, (*noise_).attention_round, at_layer(kAttentionRound, l));
    }
  }

  const Layout& layout_;
  const TransformerWeights& weights_;
  const Dims d_;
  const size_t W, F, hd, vd, qs, ks, vs, as, group;
  const double scale_;
  Noise noise_;
  std::optional<RopeTable> rope_;  // with RoPE: cos and sin by position, shared by every layer
  size_t n_ = 0;                   // the current stream's length
  std::vector<double> h_, x_, q_, k_, kt_, kt_abs_, q_abs_, v_, vmax_, visible_vmax_, a_, o_, gate_,
      up_, scores_, magnitudes_, logits_;
};

}  // namespace

// ggml-quants.c: q8_0 stores round(x / d), d = amax / 127, so half a step; q4_1 and q5_1
// store round((x - min) / d), d = range / 15 (31), half a step. q4_0 and q5_0 take d =
// -m / 8 (16) from the signed extreme m and store min(15, trunc(x / d + 8.5)) (31, 16.5):
// half a step, but the elements of m's opposite sign within a step of |m|, whose x / d
// passes 7.5 (15.5), are clamped to 7 (15): they read back 7 d (15 d) whatever else rounds,
// a shift of 7 d - x (up to a whole step at x = -m, the same in every such block: not
// noise). The scale d is stored as f16 (2^-11 relative, q * d's error at most amax
// 2^-11), and so is q4_1's and q5_1's min (|min| 2^-11): 2^-10 covers both with the f32
// products' rounding to spare; a d among f16's subnormals (below 2^-14) is off by up to
// 2^-25, times at most 127 quants, and a min by 2^-25: 2^-18 absolute covers both.
namespace {

void ggml_block_errors(KvQuant quant, const double* x, size_t n, double* shift, double* noise) {
  const Extremes e = extremes(x, n);
  constexpr double kF16 = 0x1p-10, kF16Subnormal = 0x1p-18;
  double half_step = 0, clamp = 0;  // clamp: the largest quant of q4_0 / q5_0, 0 otherwise
  std::fill(shift, shift + n, 0.0);
  switch (quant) {
    case KvQuant::q8_0:
      half_step = e.amax / 254;
      break;
    case KvQuant::q4_0:
      half_step = e.amax / 16;
      clamp = 7;
      break;
    case KvQuant::q5_0:
      half_step = e.amax / 32;
      clamp = 15;
      break;
    case KvQuant::q4_1:
      half_step = e.range / 30;
      break;
    case KvQuant::q5_1:
      half_step = e.range / 62;
      break;
    default:
      std::fill(noise, noise + n, 0.0);
      return;
  }
  const double scale_rounding = (e.amax + std::fabs(e.min)) * kF16 + kF16Subnormal;
  const double signed_max = e.max_is_negative ? -e.amax : e.amax;
  for (size_t i = 0; i < n; ++i) {
    noise[i] = half_step + scale_rounding;
    if (clamp > 0 && e.amax > 0) {
      // x / d in steps, d = -m / (clamp + 1): past clamp + 0.5, the element is clamped.
      const double d = -signed_max / (clamp + 1);
      if (x[i] / d > clamp + 0.5) {
        shift[i] = clamp * d - x[i];
        noise[i] = scale_rounding;
      }
    }
  }
}

// MLX's quantize (kv_format.cpp, encode_affine): scale s = (max - min) / (2^bits - 1), signed
// towards the edge (the extreme of larger magnitude); q0 = rint(edge / s), and for q0 != 0
// the step becomes edge / q0 and the bias the edge: the grid bias + step * [0, 2^bits - 1],
// which may end short of the other extreme. Inside the grid an element reads back within
// half a step; beyond it, at the grid's end whatever else rounds: a shift, the same in every
// group of that shape, not noise. Near a half (edge / s within 1e-3 of k + 1/2) an engine's
// edge / s a few ulps from the reference's may snap the other way: there no shift, and the
// larger error of the two snaps as noise. The scale and bias are stored in `dtype` (their
// rounding: 2^bits |step| u + |bias| u, and f16's subnormals), and f32 reads them back
// (2^-20 of the magnitudes involved covers its products and sums).
void affine_group_errors(KvQuant quant, DType dtype, const double* x, size_t n, double* shift,
                         double* noise) {
  const double n_bins = (1 << affine_bits(quant)) - 1;
  const Extremes e = extremes(x, n);
  const double hi = e.min + e.range;
  const bool low_edge = std::fabs(e.min) > std::fabs(hi);
  const double step = std::max(e.range / n_bins, 1e-7) * (low_edge ? 1 : -1);
  const double edge = low_edge ? e.min : hi;
  const double u = unit_roundoff(dtype);
  // f16's subnormals (below 2^-14) are 2^-24 apart: a small group's scale and bias rounded
  // there are off by up to 2^-25 absolute, times up to 2^bits - 1 quants.
  const double subnormal = dtype == DType::f16 ? 0x1p-25 * (n_bins + 1) : 0;
  std::fill(shift, shift + n, 0.0);
  std::fill(noise, noise + n, 0.0);
  const double snaps[] = {std::rint(edge / step - 1e-3), std::rint(edge / step + 1e-3)};
  const bool settled = snaps[0] == snaps[1];
  for (const double q0 : snaps) {
    const double snapped = q0 != 0 ? edge / q0 : step;
    const double bias = q0 != 0 ? edge : 0;
    const double lo = std::min(bias, bias + n_bins * snapped);
    const double top = std::max(bias, bias + n_bins * snapped);
    const double stored = (n_bins * std::fabs(snapped) + std::fabs(bias)) * u + subnormal;
    for (size_t i = 0; i < n; ++i) {
      const double f32 =
          (std::fabs(x[i]) + std::fabs(bias) + n_bins * std::fabs(snapped)) * 0x1p-20;
      const double end = x[i] < lo ? lo : x[i] > top ? top : x[i];
      if (settled && end != x[i]) {
        shift[i] = end - x[i];
        noise[i] = stored + f32;
      } else {
        noise[i] = std::max(noise[i],
                            std::max(std::fabs(end - x[i]), std::fabs(snapped) / 2) + stored + f32);
      }
    }
  }
}

}  // namespace

void stored_errors(const KvFormat& format, DType dtype, const double* x, size_t n, double* shift,
                   double* noise) {
  if (is_ggml_block(format.quant)) {
    ggml_block_errors(format.quant, x, n, shift, noise);
  } else if (is_affine(format.quant)) {
    affine_group_errors(format.quant, dtype, x, n, shift, noise);
  } else {
    std::fill(shift, shift + n, 0.0);
    std::fill(noise, noise + n, 0.0);
  }
}

// q8_0's error, and q8_1's block sum d * sum(q) in f16 (up to 32 amax 2^-11 over the block,
// amax 2^-11 per element as a q perturbation): 2^-9 in all beside the half step, and f16's
// subnormal scales as for the cache.
void query_block_errors(const double* x, size_t n, double* shift, double* noise) {
  const double error = extremes(x, n).amax * (1.0 / 254 + 0x1p-9) + 0x1p-18;
  std::fill(shift, shift + n, 0.0);
  std::fill(noise, noise + n, error);
}

std::map<RowKey, TransformerRow> evaluate_reference(const Scenario& scenario,
                                                    const TransformerWeights& weights,
                                                    const Perturbation* perturbation) {
  std::map<RowKey, TransformerRow> result;
  if (!scenario.model) return result;
  const Dims d = dims_of(*scenario.model, scenario.layout);
  if (weights.layers.size() != d.layers) return result;

  // Every (sequence, epoch) stream with its token ids, what a truncate keeps and a fork
  // inherits included (logical_streams, as the attention-level reference walks them).
  const std::map<RowKey, RowOrigin> origins = row_origins(scenario);
  const std::vector<LogicalStream> streams = logical_streams(scenario);
  ReferencePass pass(scenario, weights, perturbation);
  for (const LogicalStream& stream : streams) {
    const auto first_row = static_cast<size_t>(stream.first_row);
    std::vector<TransformerRow> rows = stream_rows(stream, origins);
    if (!pass.embed(stream)) return {};  // validate() rejects such scenarios
    for (size_t l = 0; l < d.layers; ++l) pass.layer(l, first_row, rows);
    pass.logits(first_row, rows, result);
  }
  return result;
}

}  // namespace model

std::map<RowKey, TransformerRow> reference_transformer(const Scenario& scenario,
                                                       const TransformerWeights& weights) {
  return model::evaluate_reference(scenario, weights, nullptr);
}

}  // namespace kvfuzz
