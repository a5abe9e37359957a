// What the two forms of the reference share (reference.cpp: the plain form; reference_blocked.cpp:
// the blocked, vectorised one): the keys and values of one stream rotated and measured once,
// the rotated query of one head, the per-row maxima over the visible keys, and the step that
// turns one (row, q head)'s attention into its tolerance. The forms differ only in how they
// compute the scores, the softmax and the weighted sums.
#pragma once

#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <utility>
#include <vector>

#include "judge/query_blocks.h"
#include "judge/tolerance.h"
#include "kvfuzz/dtype.h"
#include "kvfuzz/engine.h"
#include "kvfuzz/rows.h"
#include "kvfuzz/scenario.h"
#include "kvfuzz/token_table.h"

namespace kvfuzz::reference_parts {

// Euclidean norm of one head vector (see reference.cpp for why the tolerance uses it).
double norm(const double* x, int head_dim);

// The cell a P of f16 or bf16 rounds into, by its 16 bits: a table indexed by them pools the
// weights in one pass, where sorting (P, weight) pairs per (row, q head) was most of the
// reference's time for those numerics. f32 P keeps the sort: its cells are 32 bits wide.
inline uint16_t cell_bits(double p, DType dtype) {
  const auto x = static_cast<float>(p);
  if (dtype != DType::f16) return f32_to_bf16(x);
  // A P is in [0, 1] (exp of a non-positive logit, or over the sum it is part of): f16's
  // conversion without its infinities, NaNs and overflow, inline in this per-key loop. A
  // subnormal f16 is x * 2^24 rounded to an integer (to even, as f32_to_f16 rounds), whose
  // bits it is; 1024 is the smallest normal's. Same bits as f32_to_f16
  // (ReferenceTest.PCellsAreF16Bits).
  if (!(x >= 0 && x <= 1)) return f32_to_f16(x);
  if (x < 0x1p-14f) return static_cast<uint16_t>(std::nearbyint(x * 0x1p24f));
  const auto bits = std::bit_cast<uint32_t>(x);
  const uint32_t rounded = bits + 0xFFFu + ((bits >> 13) & 1u);  // to nearest, ties to even
  return static_cast<uint16_t>((rounded >> 13) - ((127u - 15u) << 10));
}

// One stream's keys rotated to their own positions and values, with what the tolerance needs
// of them. [pos][kv_head][head_dim or value_dim]; [pos][kv_head].
struct StreamKeys {
  size_t k_stride = 0, v_stride = 0;  // kv_heads * head_dim, kv_heads * value_dim
  std::vector<double> keys, values, key_norm, value_max;
  // Rotated keys cached in the storage dtype: per element, the error the engine's f32 rotation
  // may add at a rounding boundary, and per (key, kv head) whether there is any. With a
  // per-channel key format (has_key_error without round_rotated, or both) also what its
  // group's quantization may read back apart from the reference's (add_channel_groups).
  bool round_rotated = false;
  bool has_key_error = false;
  std::vector<double> key_error;
  std::vector<char> key_ambiguous;
  // A per-channel key format (kv_format.h: channel_u8, channel_u4): its group of positions,
  // and every key of a group the stream holds whole as that group reads back quantized
  // (`keys` holds them as stored, in the dtype). 0 and empty otherwise.
  int group = 0;
  std::vector<double> grouped;
  // Key j as the query at p reads it: quantized once the cache holds its whole group.
  const double* key(int j, int p) const {
    const bool whole = group > 0 && (j / group + 1) * group <= p + 1;
    return (whole ? grouped : keys).data() + static_cast<size_t>(j) * k_stride;
  }
  // A q4_1 or q5_1 key met by a q8_1 query (numerics.query_blocks, query_blocks.h): each key
  // block's minimum, [key][kv head][block] (head_dim / 32 per head); empty otherwise.
  std::vector<double> key_min;
};
// Into `out`, whose vectors' capacity is reused (the blocked form keeps one per thread:
// allocating these afresh on every call costs page faults).
void stream_keys(const Layout& layout, const TokenTable& table, const LogicalStream& stream,
                 const EngineNumerics& numerics, StreamKeys& out);

// Head h's query at position p, rotated (and rounded, where the engine declares rotated queries
// in the storage dtype; quantized, where it declares query_blocks), into q[head_dim];
// `q_error` is scratch of head_dim. Returns (||q||, the norm of its rounding ambiguity). With
// `sum_error`, a q8_1 query's block sums' errors (QueryBlocks::sum_error) go there: the
// score of key j then gains sum_b key_min[j][b] sum_error[b] (only the plain form adds it).
// With `reach`, a query quantized under RoPE leaves what may move there (query_blocks.h:
// the caller adds sum_d width_d |k_d| and sum_b sum_reach_b |m_b| to each key's own
// ambiguity); without, it joins the returned norm (Cauchy-Schwarz, |m_b| <= ||k||).
std::pair<double, double> rotated_query(const Layout& layout, const TokenTable& table,
                                        const LogicalStream& stream, const EngineNumerics& numerics,
                                        int p, int h, double* q, double* q_error,
                                        std::vector<double>* sum_error = nullptr,
                                        QueryReach* reach = nullptr);

// Over the keys [lo, p] of kv head g: the largest key norm, the largest |v|, and (rotated keys
// in the storage dtype) the largest score ambiguity for the rotated query q.
struct KeyMaxima {
  double key_norm = 0, value = 0, ambiguity = 0;
};
// With `own` (resized to p - lo + 1), each key's own score ambiguity, of which
// KeyMaxima::ambiguity is the largest (0 for a key that has none).
KeyMaxima key_maxima(const Layout& layout, const StreamKeys& keys, int lo, int p, int g,
                     const double* q, std::vector<double>* own = nullptr);

// An empty row at position p: key, visible range, sizes.
ReferenceRow empty_row(const Layout& layout, const LogicalStream& stream, int p);

// Head h's logit for a key at `key` seen from the query at `query`, from its score
// scale * q.k: soft-capped, then biased by ALiBi (Layout).
inline double feature_logit(const Layout& layout, int h, double score, int64_t key, int64_t query) {
  if (layout.softcap) score = *layout.softcap * std::tanh(score / *layout.softcap);
  if (!layout.alibi.empty()) {
    score += layout.alibi[static_cast<size_t>(h)] * static_cast<double>(key - query);
  }
  return score;
}

// One (row, q head)'s attention as either form computes it.
struct HeadAttention {
  const double* p = nullptr;  // exp(logit - max) per visible key, from key lo on
  int visible = 0;
  double total = 0;      // their sum, the sink's exp(sink - max) included
  double deviation = 0;  // max over dims of the weighted mean |v - row|
  double magnitude =
      0;  // max over dims of the weighted mean |v| (what needs_value_magnitude says reads it)
  double min_abs_score = 0;  // the smallest |scale q.k| over the keys (read under a soft cap)
};

// Fills q head h of `row` (its values are already there) with its value scale, bound parts and
// bound (tolerance.cpp). `cells` is scratch.
// `keywise_softmax`: the softmax term key by key for these inputs (steps 5 and 13 of
// tolerance.cpp; the plain form computes it from its weights), asked for under a soft cap
// or where some key of a quantized format has an ambiguity of its own (maxima.ambiguity > 0).
void finish_head(ReferenceRow& row, int h, const Layout& layout, const EngineNumerics& numerics,
                 const HeadAttention& attention, const KeyMaxima& maxima, double q_norm,
                 double q_error_norm, std::vector<std::pair<float, double>>& cells,
                 const std::function<double(const ToleranceInputs&)>& keywise_softmax = {});

}  // namespace kvfuzz::reference_parts
