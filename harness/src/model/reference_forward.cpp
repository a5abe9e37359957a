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
#include <utility>

#include "kvfuzz/prng.h"
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
    for (size_t i = 0; i < n; ++i) x[i] += relative * std::fabs(x[i]) * draw(x[i], site, i);
  }
  // x_i += absolute * u_i.
  void absolute(double* x, size_t n, double absolute, uint64_t site) {
    if (!p_ || absolute == 0) return;
    for (size_t i = 0; i < n; ++i) x[i] += absolute * draw(x[i], site, i);
  }
  // A matrix-vector product's (or a norm's) rounding: projection * sqrt(fan_in) * rms(x).
  void product(double* x, size_t n, size_t fan_in, uint64_t site) {
    if (!p_) return;
    absolute(x, n, p_->projection * std::sqrt(static_cast<double>(fan_in)) * rms(x, n), site);
  }

 private:
  // Uniform in [-1, 1), from the project's PRNG mixing.
  double draw(double value, uint64_t site, size_t index) const {
    uint64_t state = p_->seed ^ (site * 0xD1B54A32D192ED03ull) ^
                     (static_cast<uint64_t>(index) * 0x8CB92BA72F3D8DD7ull);
    state ^= splitmix64(state) ^ std::bit_cast<uint64_t>(value);
    return uniform_from_bits(splitmix64(state));
  }
  const Perturbation* p_;
};

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
  kNumericsSites = kLogitsRound - kQStore + 1
};

// A site of layer l: distinct per layer.
uint64_t at_layer(Site site, size_t layer) {
  return static_cast<uint64_t>(site) + kSites * static_cast<uint64_t>(layer);
}
uint64_t at_layer(NumericsSite site, size_t layer) {
  return static_cast<uint64_t>(site) + kNumericsSites * static_cast<uint64_t>(layer);
}

// out += w * v, element by element (the same bits in any vector width). The pointers never
// alias; saying so lets the compiler use vector lanes.
void add_scaled(double* __restrict out, const double* __restrict v, double w, size_t n) {
  for (size_t i = 0; i < n; ++i) out[i] += w * v[i];
}

}  // namespace

std::map<RowKey, TransformerRow> evaluate_reference(const Scenario& scenario,
                                                    const TransformerWeights& weights,
                                                    const Perturbation* perturbation) {
  std::map<RowKey, TransformerRow> result;
  if (!scenario.model) return result;
  const Layout& layout = scenario.layout;
  const Dims d = dims_of(*scenario.model, layout);
  if (weights.layers.size() != d.layers) return result;
  const size_t W = d.width, F = d.ffn, hd = d.head_dim, vd = d.value_dim;
  const size_t qs = d.q_size(), ks = d.k_size(), vs = d.v_size(), as = d.attention_size();
  const size_t group = std::max<size_t>(1, d.kv_heads > 0 ? d.q_heads / d.kv_heads : 1);
  const bool rope = layout.rope_theta.has_value();
  const double scale = layout.softmax_scale();

  // Every (sequence, epoch) stream with its token ids, what a truncate keeps and a fork
  // inherits included (logical_streams, as the attention-level reference walks them).
  const std::map<RowKey, RowOrigin> origins = row_origins(scenario);
  const std::vector<LogicalStream> streams = logical_streams(scenario);
  std::vector<double> h, x, q, k, v, vmax, a, o, gate, up, scores, logits(d.vocab);
  for (const LogicalStream& stream : streams) {
    Noise noise(perturbation);
    const size_t n = stream.tokens.size();
    const auto first_row = static_cast<size_t>(stream.first_row);
    // Rows of this stream: positions first_row..n-1.
    std::vector<TransformerRow> rows(n - std::min(n, first_row));
    for (size_t p = first_row; p < n; ++p) {
      TransformerRow& row = rows[p - first_row];
      row.key = RowKey{stream.seq, stream.epoch, static_cast<int64_t>(p)};
      const auto found = origins.find(row.key);
      if (found != origins.end()) row.origin = found->second;
    }
    h.assign(n * W, 0.0);
    for (size_t p = 0; p < n; ++p) {
      const auto id = static_cast<size_t>(stream.tokens[p]);
      if (id >= d.vocab) return {};  // validate() rejects such scenarios
      for (size_t i = 0; i < W; ++i) h[p * W + i] = weights.embedding[id * W + i];
    }
    x.resize(W);
    q.resize(n * qs);
    k.resize(n * ks);
    v.resize(n * vs);
    a.resize(n * as);
    o.resize(W);
    gate.resize(F);
    up.resize(F);

    for (size_t l = 0; l < d.layers; ++l) {
      const TransformerWeights::Layer& w = weights.layers[l];
      for (size_t p = 0; p < n; ++p) {
        rms_norm(h.data() + p * W, w.attention_norm.data(), W, x.data());
        noise.product(x.data(), W, W, at_layer(kAttentionNorm, l));
        double* qp = q.data() + p * qs;
        double* kp = k.data() + p * ks;
        double* vp = v.data() + p * vs;
        mat_vec(x.data(), w.wq, W, qs, qp);
        mat_vec(x.data(), w.wk, W, ks, kp);
        mat_vec(x.data(), w.wv, W, vs, vp);
        if (noise) {
          noise.product(qp, qs, W, at_layer(kQProduct, l));
          noise.product(kp, ks, W, at_layer(kKProduct, l));
          noise.product(vp, vs, W, at_layer(kVProduct, l));
          noise.relative(qp, qs, (*noise).qkv, at_layer(kQRound, l));
          noise.relative(kp, ks, (*noise).qkv, at_layer(kKRound, l));
          noise.relative(vp, vs, (*noise).qkv, at_layer(kVRound, l));
        }
        if (rope) {
          const double pos = static_cast<double>(p);
          for (size_t g = 0; g < d.q_heads; ++g)
            rope_rotate(qp + g * hd, hd, *layout.rope_theta, pos);
          for (size_t g = 0; g < d.kv_heads; ++g)
            rope_rotate(kp + g * hd, hd, *layout.rope_theta, pos);
          if (noise) {
            const double rel = (*noise).rope + (*noise).rope_per_position * pos;
            for (size_t g = 0; g < d.q_heads; ++g) {
              noise.absolute(qp + g * hd, hd, rel * rms(qp + g * hd, hd), at_layer(kQRope, l));
            }
            for (size_t g = 0; g < d.kv_heads; ++g) {
              noise.absolute(kp + g * hd, hd, rel * rms(kp + g * hd, hd), at_layer(kKRope, l));
            }
            noise.relative(kp, ks, (*noise).k_store, at_layer(kKStore, l));
            noise.relative(qp, qs, (*noise).q_store, at_layer(kQStore, l));
          }
        }
      }

      // Each value head's largest |v|, for the attention noise's max over the visible keys.
      vmax.resize(n * d.kv_heads);
      for (size_t j = 0; j < n * d.kv_heads; ++j) {
        const double* vh = v.data() + j * vd;  // head g of token t at (t * kv_heads + g) * vd
        double largest = 0;
        for (size_t i = 0; i < vd; ++i) largest = std::max(largest, std::fabs(vh[i]));
        vmax[j] = largest;
      }
      for (size_t p = 0; p < n; ++p) {
        const size_t lo =
            layout.window
                ? p + 1 - std::min(p + 1, static_cast<size_t>(std::max(1, *layout.window)))
                : 0;
        const size_t visible = p - lo + 1;
        scores.resize(visible);
        for (size_t hq = 0; hq < d.q_heads; ++hq) {
          const size_t g = hq / group;
          const double* qh = q.data() + p * qs + hq * hd;
          const bool score_noise = noise && (*noise).score_sum > 0;
          double best = -HUGE_VAL;
          for (size_t j = lo; j <= p; ++j) {
            const double* kh = k.data() + j * ks + g * hd;
            double dot = 0, magnitude = 0;
            for (size_t i = 0; i < hd; ++i) dot += qh[i] * kh[i];
            scores[j - lo] = scale * dot;
            if (score_noise) {
              for (size_t i = 0; i < hd; ++i) magnitude += std::fabs(qh[i] * kh[i]);
              noise.absolute(&scores[j - lo], 1,
                             (*noise).score_sum * 2 * std::sqrt(static_cast<double>(hd)) *
                                 std::fabs(scale) * magnitude,
                             at_layer(kScoreSum, l));
            }
            best = std::max(best, scores[j - lo]);
          }
          double total = 0;
          for (double& sc : scores) {
            sc = std::exp(sc - best);
            total += sc;
          }
          if (noise && (*noise).p_round > 0) {
            // P rounded after the normaliser was summed (FlashAttention-2; llama.cpp rounds
            // the normalised P, the same relative error per weight).
            for (double& sc : scores) sc /= total;
            total = 1;
            noise.relative(scores.data(), visible, (*noise).p_round, at_layer(kPRound, l));
          }
          double* out = a.data() + p * as + hq * vd;
          std::fill(out, out + vd, 0.0);
          double largest = 0;
          for (size_t j = lo; j <= p; ++j) {
            add_scaled(out, v.data() + j * vs + g * vd, scores[j - lo] / total, vd);
            largest = std::max(largest, vmax[j * d.kv_heads + g]);
          }
          if (noise) {
            noise.absolute(
                out, vd,
                (*noise).attention * (2 * std::sqrt(static_cast<double>(visible)) + 4) * largest,
                at_layer(kAttentionSum, l));
            noise.relative(out, vd, (*noise).attention_round, at_layer(kAttentionRound, l));
          }
        }
      }

      for (size_t p = 0; p < n; ++p) {
        double* hp = h.data() + p * W;
        const double* ap = a.data() + p * as;
        mat_vec(ap, w.wo, as, W, o.data());
        noise.product(o.data(), W, as, at_layer(kOutProduct, l));
        for (size_t i = 0; i < W; ++i) hp[i] += o[i];
        rms_norm(hp, w.mlp_norm.data(), W, x.data());
        noise.product(x.data(), W, W, at_layer(kMlpNorm, l));
        mat_vec(x.data(), w.w_gate, W, F, gate.data());
        mat_vec(x.data(), w.w_up, W, F, up.data());
        noise.product(gate.data(), F, W, at_layer(kGateProduct, l));
        noise.product(up.data(), F, W, at_layer(kUpProduct, l));
        for (size_t i = 0; i < F; ++i) gate[i] = silu(gate[i]) * up[i];
        mat_vec(gate.data(), w.w_down, F, W, o.data());
        noise.product(o.data(), W, F, at_layer(kDownProduct, l));
        for (size_t i = 0; i < W; ++i) hp[i] += o[i];
        if (p >= first_row) {
          TransformerRow& row = rows[p - first_row];
          row.reported_positions.push_back(static_cast<int64_t>(p));
          row.attention.emplace_back(ap, ap + as);
          row.hidden.emplace_back(hp, hp + W);
        }
      }
    }

    for (size_t p = first_row; p < n; ++p) {
      rms_norm(h.data() + p * W, weights.final_norm.data(), W, x.data());
      noise.product(x.data(), W, W, kFinalNorm);
      mat_vec(x.data(), weights.lm_head, W, d.vocab, logits.data());
      noise.product(logits.data(), d.vocab, W, kLogitsProduct);
      noise.relative(logits.data(), d.vocab, noise ? (*noise).logits_round : 0, kLogitsRound);
      TransformerRow& row = rows[p - first_row];
      row.logits = logits;
      result.emplace(row.key, std::move(row));
    }
  }
  return result;
}

}  // namespace model

std::map<RowKey, TransformerRow> reference_transformer(const Scenario& scenario,
                                                       const TransformerWeights& weights) {
  return model::evaluate_reference(scenario, weights, nullptr);
}

}  // namespace kvfuzz
