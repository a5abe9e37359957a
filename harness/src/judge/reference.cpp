// The oracle's plain form, and what it shares with the blocked form (reference_parts.h).
// Everything here is double precision and written the obvious way: for every query position p
// of one (sequence, epoch) stream, every q head, look at keys [lo, p], score them, softmax
// them, average the values. No chunks, no pages, no caches; `omp simd` only where the
// compiler may use vector lanes for a plain loop (as the reference did before the blocked form).
#include "judge/reference.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include "judge/query_blocks.h"
#include "judge/reference_parts.h"
#include "judge/tolerance.h"
#include "kvfuzz/dtype.h"
#include "kvfuzz/kv_format.h"
#include "scenario/rope.h"

namespace kvfuzz {

namespace reference_parts {

namespace {

// Euclidean norm of one head vector. A rounding error in a q.k dot product is
// proportional to sum_d |q_d||k_d| <= ||q|| ||k|| (Cauchy-Schwarz). The norm bound also holds
// for RoPE, whose rotation errors are relative per rotated pair rather than per element,
// and the norms are the same before and after the rotation. It costs O(1) per key in the
// loop below instead of a second dot product.
// out += w * v. The pointers never alias; saying so lets the compiler vectorise the loop.
void add_scaled(double* __restrict out, const double* __restrict v, double w, int n) {
#pragma omp simd
  for (int d = 0; d < n; ++d) out[d] += w * v[d];
}

}  // namespace

double norm(const double* x, int head_dim) {
  double sum = 0;
  for (int d = 0; d < head_dim; ++d) sum += x[d] * x[d];
  return std::sqrt(sum);
}

namespace {

// Rotated keys cached in the storage dtype (tolerance.cpp, step 5): round the rotated head
// as the engine stores it, and record in `error` each element the engine's f32 rotation
// may round to the neighbour (2e + spacing; 0 for the others). `raw` is the unrotated head
// at position `pos`; the engine's rotation error grows with its angles' (unless it declares
// rope_angles_exact) and with tables rounded to a dtype (rope_tables). With a quantized
// key format the stored head is the format's round trip of the dtype's (fp8: element by
// element; a block format: blocks of 32), and the engine's may be anything the format makes
// of a head whose elements each lie anywhere in their reach (round_trip_reach): an
// element's error is the width of what it may read back. Returns whether any element has
// an error.
// The engine's rotation of `head` (exact, in double; `raw` unrotated, at position `pos`)
// element by element after its rounding to `dtype`: within [lo, hi] (the roundings of
// x - e and x + e; rounding is monotone). The rotation is off by at most e, which grows with
// its angles' error (unless it declares rope_angles_exact) and with tables rounded to a
// dtype (rope_tables); e goes to `e` where asked.
void rotated_reach(const double* head, const float* raw, const RopeShape& shape, int64_t pos,
                   DType dtype, const EngineNumerics& numerics, float* lo, float* hi,
                   double* e = nullptr) {
  const double angle =
      numerics.rope_angles_exact.value_or(false) ? 0 : 20 * static_cast<double>(pos);
  const double tables =
      numerics.rope_tables == DType::f32 ? 0 : 3 * unit_roundoff(numerics.rope_tables);
  // At position 0 the rotation is the identity in every implementation (cos 0 = 1 and
  // sin 0 = 0 exactly, in any dtype's tables): the engine's key is the raw one, exactly. An
  // element of the data on a rounding boundary (a small integer on an fp8 tie) is then not
  // ambiguous, where it would otherwise widen the bound of every row that sees key 0.
  const double reach = pos == 0 ? 0 : (4 + angle) * 0x1p-24 + tables;
  for (size_t d = 0; d < shape.head_dim; ++d) {
    // An element outside RoPE's part is the raw one, exactly (only rounded to `dtype`).
    double error = 0;
    if (shape.turns(d)) {
      const RopePair pair = shape.pair(shape.pair_of(d));
      error = reach * (std::fabs(double{raw[pair.first]}) + std::fabs(double{raw[pair.second]}));
    }
    lo[d] = round_to_dtype(static_cast<float>(head[d] - error), dtype);
    hi[d] = round_to_dtype(static_cast<float>(head[d] + error), dtype);
    if (e) e[d] = error;
  }
}

// Rotated keys cached in the storage dtype (tolerance.cpp, step 5): round the rotated head
// as the engine stores it, and record in `error` each element the engine's f32 rotation
// may round to the neighbour (2e + spacing; 0 for the others). With a quantized key format
// the stored head is the format's round trip of the dtype's (fp8: element by element; a
// block format: blocks of 32), and the engine's may be anything the format makes of a head
// whose elements each lie anywhere in their reach (round_trip_reach): an element's error is
// the width of what it may read back. Returns whether any element has an error.
bool store_rotated(double* head, const float* raw, const RopeShape& shape, int64_t pos, DType dtype,
                   const KvFormat& format, int kv_head, const EngineNumerics& numerics,
                   double* error) {
  const size_t head_dim = shape.head_dim;
  thread_local std::vector<float> scratch;
  scratch.resize(5 * head_dim);
  float* centre = scratch.data();
  float* lo = centre + head_dim;
  float* hi = lo + head_dim;
  float* out_lo = hi + head_dim;
  float* out_hi = out_lo + head_dim;
  rotated_reach(head, raw, shape, pos, dtype, numerics, lo, hi, error);
  for (size_t d = 0; d < head_dim; ++d) {
    centre[d] = round_to_dtype(static_cast<float>(head[d]), dtype);
  }
  const int n = static_cast<int>(head_dim);
  if (format.quantized()) {
    round_trip_reach(format, dtype, kv_head, lo, hi, n, out_lo, out_hi);
    round_trip_row(format, dtype, kv_head, centre, n, centre);
  }
  bool any = false;
  for (size_t d = 0; d < head_dim; ++d) {
    const double x = head[d];
    head[d] = centre[d];
    if (format.quantized()) {
      error[d] = double{out_hi[d]} - double{out_lo[d]};
    } else if (lo[d] == hi[d]) {
      error[d] = 0;
    } else {
      const double e = error[d];  // rotated_reach's
      error[d] = 2 * e + dtype_spacing(dtype, std::fabs(x) + e);
    }
    any = any || error[d] > 0;
  }
  return any;
}

// What P rounding needs of one row (tolerance.cpp, steps 8 and 11): the weights of the keys
// whose P is not exactly 1, pooled by the cell of the P dtype their P rounds into. `p` holds
// exp(logit - max) per key, `total` their sum; an engine that normalises P before rounding
// it (`normalised`) rounds p / total instead, the largest key's included.
struct PWeights {
  double spread = 0, mass = 0;
  int subnormal = 0;
};

PWeights p_weights(const double* p, int count, double total, DType dtype, bool normalised,
                   std::vector<std::pair<float, double>>& cells) {
  PWeights out;
  const double min_normal = dtype_min_normal(dtype);
  // Hands `take` each key whose P is not exactly 1 (the maximum's own unnormalised P is
  // exact), with its weight, counting the subnormal ones.
  const auto each_key = [&](auto&& take) {
    for (int j = 0; j < count; ++j) {
      const double pj = normalised ? p[j] / total : p[j];
      if (pj == 1) continue;
      if (pj < min_normal) ++out.subnormal;
      take(pj, normalised ? pj : p[j] / total);
    }
  };
  double squares = 0;
  const auto add_cell = [&](double weight) {
    squares += weight * weight;
    out.mass += weight;
  };
  if (dtype != DType::f32) {
    // Per thread: each cell's weight (0 when unused) and the cells this row used, in the
    // order of their first key. Whether a key's cell is new is counted, not branched on: a
    // branch on it mispredicted about every other key and was a third of this function.
    thread_local std::vector<double> weight(size_t{1} << 16, 0.0);
    thread_local std::vector<uint16_t> used;
    if (used.size() < static_cast<size_t>(count)) used.resize(static_cast<size_t>(count));
    size_t n_used = 0;
    each_key([&](double pj, double w) {
      const uint16_t cell = cell_bits(pj, dtype);
      used[n_used] = cell;
      n_used += weight[cell] == 0 ? 1 : 0;
      weight[cell] += w;
    });
    for (size_t i = 0; i < n_used; ++i) {
      add_cell(weight[used[i]]);
      weight[used[i]] = 0;
    }
  } else {
    cells.clear();
    each_key([&](double pj, double w) { cells.emplace_back(static_cast<float>(pj), w); });
    std::sort(cells.begin(), cells.end());
    for (size_t i = 0; i < cells.size();) {
      double cell = 0;
      size_t k = i;
      for (; k < cells.size() && cells[k].first == cells[i].first; ++k) cell += cells[k].second;
      add_cell(cell);
      i = k;
    }
  }
  out.spread = std::sqrt(squares);
  return out;
}

}  // namespace

// A per-channel key format (kv_format.h): every group the stream holds whole, quantized as
// the format defines (quantize_group) into out.grouped, and what an engine's own group may
// read back apart from it into key_error: its keys are its own rotation (each element within
// key_error's width of the reference's, store_rotated), so each of lo, hi and x may move by
// the group's widest w for that element, the scale by 2w / levels, a read-back by up to 3w;
// a quant whose (x - lo) / scale lies that close to a half may round to its neighbour, one
// scale more; and the read-back's two roundings may be one (a fused multiply-add), 2^-23
// (|q scale| + |lo|). Without RoPE (w = 0) the quants are the definition's, bit for bit: an
// engine that divides another way (a reciprocal, a fused multiply-add against -lo / scale,
// as OpenVINO's) quantizes differently at a half, and is not this format.
void add_channel_groups(const Layout& layout, StreamKeys& out) {
  const int group = layout.k_format.group;
  const auto n = static_cast<int>(out.keys.size() / std::max<size_t>(1, out.k_stride));
  const auto hd = static_cast<size_t>(layout.head_dim);
  const auto kv_heads = static_cast<size_t>(layout.kv_heads);
  const auto levels = static_cast<double>((1 << affine_bits(layout.k_format.quant)) - 1);
  out.grouped = out.keys;
  std::vector<float> in(static_cast<size_t>(group) * hd), got(in.size());
  std::vector<double> widest(hd);
  for (int first = 0; first + group <= n; first += group) {
    for (size_t g = 0; g < kv_heads; ++g) {
      const auto at = [&](int i, size_t d) {
        return static_cast<size_t>(first + i) * out.k_stride + g * hd + d;
      };
      std::fill(widest.begin(), widest.end(), 0.0);
      for (int i = 0; i < group; ++i) {
        for (size_t d = 0; d < hd; ++d) {
          in[static_cast<size_t>(i) * hd + d] = static_cast<float>(out.keys[at(i, d)]);
          widest[d] = std::max(widest[d], out.key_error[at(i, d)]);
        }
      }
      quantize_group(layout.k_format.quant, in.data(), group, static_cast<int>(hd), got.data());
      for (size_t d = 0; d < hd; ++d) {
        double lo = HUGE_VAL, hi = -HUGE_VAL;
        for (int i = 0; i < group; ++i) {
          lo = std::min(lo, double{in[static_cast<size_t>(i) * hd + d]});
          hi = std::max(hi, double{in[static_cast<size_t>(i) * hd + d]});
        }
        const double scale = (hi - lo) / levels, w = widest[d];
        for (int i = 0; i < group; ++i) {
          const double x = in[static_cast<size_t>(i) * hd + d];
          const double q = got[static_cast<size_t>(i) * hd + d];
          double error = 3 * w + 0x1p-23 * (std::fabs(q - lo) + std::fabs(lo));
          if (scale > 0 && w > 0) {
            const double t = (x - lo) / scale;
            if (std::fabs(t - std::floor(t) - 0.5) <= 3 * w / scale + 0x1p-20) error += scale;
          } else if (w > 0) {
            error += 2 * w;  // a constant channel the engine's rotation spreads apart
          }
          out.grouped[at(i, d)] = q;
          out.key_error[at(i, d)] += error;
        }
      }
      for (int i = 0; i < group; ++i) {
        const size_t jg = static_cast<size_t>(first + i) * kv_heads + g;
        out.key_ambiguous[jg] = 1;
        out.key_norm[jg] =
            std::max(out.key_norm[jg], norm(out.grouped.data() + at(i, 0), layout.head_dim));
      }
    }
  }
}

void stream_keys(const Layout& layout, const TokenTable& table, const LogicalStream& stream,
                 const EngineNumerics& numerics, StreamKeys& out) {
  const int n = static_cast<int>(stream.tokens.size());
  const int kv_heads = layout.kv_heads;
  const auto hd = static_cast<size_t>(layout.head_dim);
  const auto vd = static_cast<size_t>(layout.value_dim);
  const bool rope = layout.rope_theta.has_value();
  const RopeShape shape = layout.rope_shape();
  out.k_stride = static_cast<size_t>(kv_heads) * hd;
  out.v_stride = static_cast<size_t>(kv_heads) * vd;
  out.keys.resize(static_cast<size_t>(n) * out.k_stride);
  out.key_norm.resize(static_cast<size_t>(n) * static_cast<size_t>(kv_heads));
  out.value_max.resize(out.key_norm.size());
  out.values.resize(static_cast<size_t>(n) * out.v_stride);
  // A quantized key format holds rotated keys whatever the engine declares (kv_format.h); a
  // per-channel one holds them in the dtype until their group is whole.
  out.round_rotated =
      rope && (layout.k_format.quantized() ||
               (numerics.rotated_keys_in_storage.value_or(false) && layout.dtype != DType::f32));
  const bool channel = is_channel(layout.k_format.quant);
  const KvFormat row_format = channel ? KvFormat{} : layout.k_format;
  out.has_key_error = out.round_rotated || channel;
  out.key_error.assign(out.has_key_error ? out.keys.size() : 0, 0.0);
  out.key_ambiguous.assign(out.has_key_error ? out.key_norm.size() : 0, 0);
  out.group = channel ? layout.k_format.group : 0;
  out.grouped.clear();
  // q8_1 meets a q4_1 or q5_1 key's block minimum (query_blocks.h).
  const bool minima = numerics.query_blocks && takes_q8_1(layout.k_format.quant);
  const size_t blocks = hd / kGgmlBlock;
  out.key_min.resize(minima ? out.key_norm.size() * blocks : 0);
  for (int j = 0; j < n; ++j) {
    const int id = stream.tokens[static_cast<size_t>(j)];
    // Unrotated keys as the cache reads them back; rotated ones are stored below.
    const auto k = rope ? table.k(id) : table.k_stored(id);
    const auto v = table.v_stored(id);
    double* dst = out.keys.data() + static_cast<size_t>(j) * out.k_stride;
    std::copy(k.begin(), k.end(), dst);
    std::copy(
        v.begin(), v.end(),
        out.values.begin() + static_cast<std::ptrdiff_t>(static_cast<size_t>(j) * out.v_stride));
    for (int g = 0; g < kv_heads; ++g) {
      double* head = dst + static_cast<size_t>(g) * hd;
      if (rope) rope_rotate(head, shape, *layout.rope_theta, j);
      const size_t jg =
          static_cast<size_t>(j) * static_cast<size_t>(kv_heads) + static_cast<size_t>(g);
      if (out.round_rotated) {
        const size_t at = static_cast<size_t>(j) * out.k_stride + static_cast<size_t>(g) * hd;
        out.key_ambiguous[jg] =
            store_rotated(head, k.data() + static_cast<size_t>(g) * hd, shape, j, layout.dtype,
                          row_format, g, numerics, out.key_error.data() + at);
      }
      if (minima) {
        block_minima(head, layout.head_dim, out.key_min.data() + jg * blocks);
        // A rotated key's minimum may be the engine's own, anywhere its block's reach allows
        // (at most the widest element's error apart, store_rotated); it moves the score by
        // (that) * |sum_error|, and |sum_error| <= 2^-9 sum_b |q| (q8_1's f16 d and s, each
        // rounded once; query_blocks.h): so every element of the block carries 2^-9 of it.
        if (out.round_rotated && out.key_ambiguous[jg]) {
          double* error = out.key_error.data() + static_cast<size_t>(j) * out.k_stride +
                          static_cast<size_t>(g) * hd;
          for (size_t b = 0; b < blocks; ++b) {
            double* block = error + b * kGgmlBlock;
            const double widest = *std::max_element(block, block + kGgmlBlock);
            for (int d = 0; d < kGgmlBlock; ++d) block[d] += 0x1p-9 * widest;
          }
        }
      }
      out.key_norm[jg] = norm(head, layout.head_dim);
      double largest = 0;
      for (size_t d = 0; d < vd; ++d) {
        largest =
            std::max(largest, std::fabs(static_cast<double>(v[static_cast<size_t>(g) * vd + d])));
      }
      out.value_max[jg] = largest;
    }
  }
  if (channel) add_channel_groups(layout, out);
}

std::pair<double, double> rotated_query(const Layout& layout, const TokenTable& table,
                                        const LogicalStream& stream, const EngineNumerics& numerics,
                                        int p, int h, double* q, double* q_error,
                                        std::vector<double>* sum_error, QueryReach* reach) {
  const auto hd = static_cast<size_t>(layout.head_dim);
  const bool rope = layout.rope_theta.has_value();
  const auto q_all = table.q(stream.tokens[static_cast<size_t>(p)]);
  std::copy_n(q_all.begin() + static_cast<std::ptrdiff_t>(static_cast<size_t>(h) * hd),
              layout.head_dim, q);
  if (rope) rope_rotate(q, layout.rope_shape(), *layout.rope_theta, p);
  // Rotated queries rounded to the storage dtype: as the keys (store_rotated), their
  // boundary elements' error reaches every logit through ||k|| (Cauchy-Schwarz).
  const bool round_rotated_q =
      rope && numerics.rotated_queries_in_storage.value_or(false) && layout.dtype != DType::f32;
  // A query quantized to K's ggml blocks under RoPE: the engine quantizes its own rotation
  // of q, within rotated_reach of the exact one (after its rounding to the dtype, where it
  // declares that), so what its blocks hold is ambiguous too (query_blocks_reach, below).
  const bool blocks = numerics.query_blocks && is_ggml_block(layout.k_format.quant);
  thread_local std::vector<float> bounds;
  if (blocks && rope && p > 0) {
    bounds.resize(2 * hd);
    rotated_reach(q, q_all.data() + static_cast<size_t>(h) * hd, layout.rope_shape(), p,
                  round_rotated_q ? layout.dtype : DType::f32, numerics, bounds.data(),
                  bounds.data() + hd);
  }
  if (reach) *reach = {};
  double q_error_norm = 0;
  // (Quantized to blocks, the query's reach below already spans its dtype's boundaries.)
  if (round_rotated_q &&
      store_rotated(q, q_all.data() + static_cast<size_t>(h) * hd, layout.rope_shape(), p,
                    layout.dtype, KvFormat{}, 0, numerics, q_error) &&
      !(blocks && rope)) {
    q_error_norm = norm(q_error, layout.head_dim);
  }
  // A query quantized to K's ggml blocks (tolerance.cpp, step 14): modelled, its ambiguity
  // added as the rotated queries' is.
  if (blocks) {
    QueryBlocks quantized = quantize_query_blocks(q, hd, layout.k_format.quant);
    q_error_norm += quantized.ambiguity;
    if (rope && p > 0) {
      QueryReach moved =
          query_blocks_reach(bounds.data(), bounds.data() + hd, q, hd, layout.k_format.quant);
      if (reach) {
        *reach = std::move(moved);
      } else {
        if (!moved.width.empty()) q_error_norm += norm(moved.width.data(), layout.head_dim);
        for (const double x : moved.sum_reach) q_error_norm += x;
      }
    }
    if (sum_error) *sum_error = std::move(quantized.sum_error);
  }
  return {norm(q, layout.head_dim), q_error_norm};
}

KeyMaxima key_maxima(const Layout& layout, const StreamKeys& keys, int lo, int p, int g,
                     const double* q, std::vector<double>* own) {
  const auto kv_heads = static_cast<size_t>(layout.kv_heads);
  const auto hd = static_cast<size_t>(layout.head_dim);
  const double scale = std::fabs(layout.softmax_scale());
  KeyMaxima out;
  if (own) own->assign(static_cast<size_t>(p - lo + 1), 0.0);
  for (int j = lo; j <= p; ++j) {
    const size_t jg = static_cast<size_t>(j) * kv_heads + static_cast<size_t>(g);
    out.key_norm = std::max(out.key_norm, keys.key_norm[jg]);
    out.value = std::max(out.value, keys.value_max[jg]);
    if (keys.has_key_error && keys.key_ambiguous[jg]) {
      const size_t key_at = static_cast<size_t>(j) * keys.k_stride + static_cast<size_t>(g) * hd;
      double error = 0;
      for (size_t d = 0; d < hd; ++d) error += std::fabs(q[d]) * keys.key_error[key_at + d];
      out.ambiguity = std::max(out.ambiguity, scale * error);
      if (own) (*own)[static_cast<size_t>(j - lo)] = scale * error;
    }
  }
  return out;
}

ReferenceRow empty_row(const Layout& layout, const LogicalStream& stream, int p) {
  const auto q_heads = static_cast<size_t>(layout.q_heads);
  ReferenceRow row;
  row.key = RowKey{stream.seq, stream.epoch, p};
  row.key_lo = layout.first_visible(p);
  row.key_hi = p;
  row.values.assign(q_heads * static_cast<size_t>(layout.value_dim), 0.0);
  row.bound.assign(q_heads, 0.0);
  row.value_scale.assign(q_heads, 0.0);
  row.bound_parts.assign(q_heads, BoundParts{});
  return row;
}

void finish_head(ReferenceRow& row, int h, const Layout& layout, const EngineNumerics& numerics,
                 const HeadAttention& attention, const KeyMaxima& maxima, double q_norm,
                 double q_error_norm, std::vector<std::pair<float, double>>& cells,
                 const std::function<double(const ToleranceInputs&)>& keywise_softmax) {
  const double scale = std::fabs(layout.softmax_scale());
  const PWeights pw = numerics.p ? p_weights(attention.p, attention.visible, attention.total,
                                             *numerics.p, numerics.p_normalised, cells)
                                 : PWeights{};
  const auto at = static_cast<size_t>(h);
  row.value_scale[at] = maxima.value;
  ToleranceInputs inputs{
      .dtype = layout.dtype,
      .numerics = numerics,
      .visible_keys = attention.visible,
      .head_dim = layout.head_dim,
      .max_abs_value = maxima.value,
      .max_score_terms = scale * q_norm * maxima.key_norm,
      .value_deviation = attention.deviation,
      .value_magnitude = attention.magnitude,
      .rope = layout.rope_theta.has_value(),
      .position = row.key.pos,
      .rotated_key_ambiguity = maxima.ambiguity + scale * q_error_norm * maxima.key_norm,
      .p_weight_spread = pw.spread,
      .p_weight_mass = pw.mass,
      .p_subnormal_keys = pw.subnormal,
      .softcap = layout.softcap.value_or(0),
      .min_abs_score = attention.min_abs_score,
      .alibi_reach = layout.alibi.empty()
                         ? 0
                         : layout.alibi[at] * static_cast<double>(row.key.pos - row.key_lo),
      .sink = layout.sinks.empty() ? std::nullopt : std::optional<double>(layout.stored_sink(h)),
  };
  // Rotated keys rounded to a dtype keep the row-wide term (the blocked form's, which
  // takes the quantized ones to the plain form: reference_blocked.cpp).
  const bool own_ambiguity = maxima.ambiguity > 0 && layout.k_format.quantized();
  if ((layout.softcap || own_ambiguity) && keywise_softmax) {
    inputs.keywise_softmax = keywise_softmax(inputs);
  }
  const BoundParts parts = tolerance_parts(inputs);
  row.bound_parts[at] = parts;
  row.bound[at] = parts.total();
}

}  // namespace reference_parts

// The plain form: every (row, q head) on its own, in the obvious order.
std::vector<ReferenceRow> reference_rows_plain(const Layout& layout, const TokenTable& table,
                                               const LogicalStream& stream,
                                               const EngineNumerics& numerics) {
  using namespace reference_parts;
  const int n = static_cast<int>(stream.tokens.size());
  const int head_dim = layout.head_dim, value_dim = layout.value_dim;
  const int group = std::max(1, layout.group());
  const double scale = layout.softmax_scale();
  const auto hd = static_cast<size_t>(head_dim);
  const auto vd = static_cast<size_t>(value_dim);
  StreamKeys keys;
  stream_keys(layout, table, stream, numerics, keys);

  std::vector<ReferenceRow> rows;
  rows.reserve(static_cast<size_t>(n));
  std::vector<double> q(hd), q_error(hd), logits, raw, deviation(vd), magnitude(vd), spread(vd);
  std::vector<double> sum_error;  // a q8_1 query's block sums (query_blocks.h)
  std::vector<double> own;        // each visible key's own score ambiguity (key_maxima)
  QueryReach q_reach;             // a query quantized under RoPE: what may move
  std::vector<double> q_own;      // per visible key, the score ambiguity that makes
  const auto kv_heads_count = static_cast<size_t>(layout.kv_heads);
  const size_t blocks = hd / kGgmlBlock;
  std::vector<std::pair<float, double>> cells;
  for (int p = static_cast<int>(std::max<int64_t>(0, stream.first_row)); p < n; ++p) {
    ReferenceRow row = empty_row(layout, stream, p);
    const int lo = static_cast<int>(row.key_lo);
    const int visible = p - lo + 1;
    for (int h = 0; h < layout.q_heads; ++h) {
      const int g = h / group;
      const size_t head_at = static_cast<size_t>(g) * hd;
      const auto [q_norm, q_error_norm] = rotated_query(
          layout, table, stream, numerics, p, h, q.data(), q_error.data(), &sum_error, &q_reach);
      // A query quantized under RoPE: what may move, key by key (query_blocks.h).
      const bool q_moves = !q_reach.width.empty() || !q_reach.sum_reach.empty();
      if (q_moves) q_own.assign(static_cast<size_t>(visible), 0.0);

      // Scores and their max over the visible keys (and the sink's logit).
      logits.resize(static_cast<size_t>(visible));
      if (layout.softcap) raw.resize(static_cast<size_t>(visible));
      const bool sink = !layout.sinks.empty();
      const double sink_logit = sink ? layout.stored_sink(h) : 0;
      const bool features = layout.softcap || !layout.alibi.empty();
      double max_logit = sink ? sink_logit : -HUGE_VAL;
      double min_abs_score = HUGE_VAL;
      const double* qp = q.data();
      double* lp = logits.data();
      for (int j = lo; j <= p; ++j) {
        const double* kp = keys.key(j, p) + head_at;
        // `omp simd` lets the compiler reorder this double sum into vector lanes; the
        // result is as exact as any summation order.
        double dot = 0;
#pragma omp simd reduction(+ : dot)
        for (int d = 0; d < head_dim; ++d) dot += qp[d] * kp[d];
        if (!keys.key_min.empty()) {  // q8_1's block sums against the key's minima
          const double* m =
              keys.key_min.data() +
              (static_cast<size_t>(j) * static_cast<size_t>(layout.kv_heads) + g) * blocks;
          for (size_t b = 0; b < blocks; ++b) dot += m[b] * sum_error[b];
          if (!q_reach.sum_reach.empty()) {
            double moved = 0;
            for (size_t b = 0; b < blocks; ++b) moved += q_reach.sum_reach[b] * std::fabs(m[b]);
            q_own[static_cast<size_t>(j - lo)] += scale * moved;
          }
        }
        if (!q_reach.width.empty()) {  // the engine's q within width of ours, times this key
          const double* err =
              keys.has_key_error && keys.key_ambiguous[static_cast<size_t>(j) * kv_heads_count +
                                                       static_cast<size_t>(g)]
                  ? keys.key_error.data() + static_cast<size_t>(j) * keys.k_stride + head_at
                  : nullptr;
          double moved = 0;
          for (size_t d = 0; d < hd; ++d) {
            moved += q_reach.width[d] * (std::fabs(kp[d]) + (err ? err[d] : 0.0));
          }
          q_own[static_cast<size_t>(j - lo)] += scale * moved;
        }
        min_abs_score = std::min(min_abs_score, std::fabs(scale * dot));
        if (layout.softcap) raw[static_cast<size_t>(j - lo)] = std::fabs(scale * dot);
        lp[j - lo] = features ? feature_logit(layout, h, scale * dot, j, p) : scale * dot;
        if (lp[j - lo] > max_logit) max_logit = lp[j - lo];
      }

      // Softmax with the max subtracted, then the weighted mean of the values. The sink
      // is one more term of the normaliser, with no value.
      double total = sink ? std::exp(sink_logit - max_logit) : 0;
      for (int j = 0; j < visible; ++j) {
        lp[j] = std::exp(lp[j] - max_logit);
        total += lp[j];
      }
      double* out = row.values.data() + static_cast<size_t>(h) * vd;
      const auto value_of = [&](int j) {
        return keys.values.data() + static_cast<size_t>(j) * keys.v_stride +
               static_cast<size_t>(g) * vd;
      };
      for (int j = lo; j <= p; ++j) {
        const double w = lp[j - lo] / total;
        const double* v = value_of(j);
        add_scaled(out, v, w, value_dim);
      }
      // The values' mean absolute deviation around the row, per dim (tolerance.cpp, step 4).
      // And their mean magnitude (steps 7, 10, 11).
      std::fill(deviation.begin(), deviation.end(), 0.0);
      std::fill(magnitude.begin(), magnitude.end(), 0.0);
      for (int j = lo; j <= p; ++j) {
        const double w = lp[j - lo] / total;
        const double* v = value_of(j);
        for (size_t d = 0; d < vd; ++d) {
          deviation[d] += w * std::fabs(v[d] - out[d]);
          magnitude[d] += w * std::fabs(v[d]);
        }
      }
      if (sink) {  // the sink as a key whose value is 0 (tolerance.cpp, step 13)
        const double w = std::exp(sink_logit - max_logit) / total;
        for (size_t d = 0; d < vd; ++d) deviation[d] += w * std::fabs(out[d]);
      }
      const HeadAttention attention{
          .p = lp,
          .visible = visible,
          .total = total,
          .deviation = *std::max_element(deviation.begin(), deviation.end()),
          .magnitude = *std::max_element(magnitude.begin(), magnitude.end()),
          .min_abs_score = min_abs_score,
      };
      // Steps 5 and 13 key by key (tolerance.cpp): each key's logit error (through its own
      // slope of the cap; with its own rotated-key ambiguity), weighted by its weight; the
      // sink a key of value 0 and no score error.
      KeyMaxima maxima = key_maxima(layout, keys, lo, p, g, qp, &own);
      if (q_moves) {
        for (size_t j = 0; j < own.size(); ++j) {
          own[j] += q_own[j];
          maxima.ambiguity = std::max(maxima.ambiguity, own[j]);
        }
      }
      const auto keywise_softmax = [&](const ToleranceInputs& inputs) {
        const KeyErrors errors = key_errors(inputs, maxima.ambiguity);
        const auto key_error = [&](int j) {  // j counts from lo
          const auto at = static_cast<size_t>(j);
          return errors.of(layout.softcap ? raw[at] : 0, own[at]);
        };
        const double sink_weight = sink ? std::exp(sink_logit - max_logit) / total : 0;
        double down = sink_weight * std::exp(-errors.rest);
        double up = sink_weight * std::exp(errors.rest);
        for (int j = 0; j < visible; ++j) {
          const double w = lp[j] / total, delta = key_error(j);
          down += w * std::exp(-delta);
          up += w * std::exp(delta);
        }
        const double z_low = 1 / down, z_high = up;  // Z' and Z''
        const auto moved = [&](double delta) {
          return std::max(std::exp(delta) * z_low - 1, 1 - std::exp(-delta) / z_high);
        };
        std::fill(spread.begin(), spread.end(), 0.0);
        for (int j = lo; j <= p; ++j) {
          const double w = lp[j - lo] / total;
          const double factor = w * moved(key_error(j - lo));
          const double* v = value_of(j);
          for (size_t d = 0; d < vd; ++d) spread[d] += factor * std::fabs(v[d] - out[d]);
        }
        if (sink) {
          const double factor = sink_weight * moved(errors.rest);
          for (size_t d = 0; d < vd; ++d) spread[d] += factor * std::fabs(out[d]);
        }
        double worst = 0;
        for (const double x : spread) {
          if (!std::isfinite(x)) return HUGE_VAL;  // a huge error: the row-wide term stands
          worst = std::max(worst, x);
        }
        return worst;
      };
      finish_head(row, h, layout, numerics, attention, maxima, q_norm, q_error_norm, cells,
                  keywise_softmax);
    }
    rows.push_back(std::move(row));
  }
  return rows;
}

}  // namespace kvfuzz
