// The oracle. Everything here is double precision and written the obvious way: for every
// query position p of one (sequence, epoch) stream, every q head, look at keys
// [lo, p], score them, softmax them, average the values. No chunks, no pages, no caches.
#include "kvfuzz/reference.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <map>

#include "kvfuzz/tolerance.h"

namespace kvfuzz {

std::vector<LogicalStream> logical_streams(const Scenario& scenario) {
  struct SeqState {
    int epoch = 0;
    int stream = -1;  // index into `streams` of the current epoch's stream, once it has tokens
  };
  std::vector<LogicalStream> streams;
  std::map<int, SeqState> state;
  for (const Op& op : scenario.program) {
    if (op.kind == OpKind::reset) {
      SeqState& s = state[op.seq];
      ++s.epoch;
      s.stream = -1;
      continue;
    }
    const auto add = [&](const Chunk& chunk) {
      if (chunk.tokens.empty()) return;
      SeqState& s = state[chunk.seq];
      if (s.stream < 0) {
        s.stream = static_cast<int>(streams.size());
        streams.push_back(LogicalStream{chunk.seq, s.epoch, {}});
      }
      auto& tokens = streams[static_cast<size_t>(s.stream)].tokens;
      tokens.insert(tokens.end(), chunk.tokens.begin(), chunk.tokens.end());
    };
    if (op.kind == OpKind::append) {
      add(Chunk{op.seq, op.tokens});
    } else {
      for (const Chunk& chunk : op.chunks) add(chunk);
    }
  }
  return streams;
}

namespace {

// NeoX (half-split) rotation of one head vector in place: pairs (x_i, x_{i+d/2}) for
// i < d/2 turn by pos * theta^(-2i/d). With an odd head_dim the last element is unpaired
// and stays as it is.
void rotate(double* x, int head_dim, double theta, double pos) {
  const int half = head_dim / 2;
  for (int i = 0; i < half; ++i) {
    const double inv_freq = std::pow(theta, -2.0 * i / head_dim);
    const double angle = pos * inv_freq;
    const double c = std::cos(angle), s = std::sin(angle);
    const double a = x[i], b = x[i + half];
    x[i] = a * c - b * s;
    x[i + half] = a * s + b * c;
  }
}

// The magnitudes a rounding error in a q.k dot product is proportional to, as a vector m
// with sum_d |q_d||k_d| <= m(q) . m(k). Without RoPE m(x) = |x| element-wise. With RoPE,
// rotation errors are not relative per element (an element can cancel to zero while its
// error does not) but they are relative per rotated pair, so each pair counts with its norm:
// ||q_pair|| ||k_pair|| >= |q_i k_i| + |q_j k_j| (Cauchy-Schwarz), and the norms are the
// same before and after the rotation. An odd head_dim's unpaired last element counts as is.
void magnitudes(const double* x, int head_dim, bool rope, double* out) {
  if (!rope) {
    for (int d = 0; d < head_dim; ++d) out[d] = std::fabs(x[d]);
    return;
  }
  const int half = head_dim / 2;
  for (int i = 0; i < half; ++i) out[i] = std::hypot(x[i], x[i + half]);
  for (int i = half; i < head_dim; ++i) out[i] = 0;
  if (head_dim % 2 != 0) out[head_dim - 1] = std::fabs(x[head_dim - 1]);
}

}  // namespace

std::vector<ReferenceRow> reference_rows(const Layout& layout, const TokenTable& table,
                                         const LogicalStream& stream) {
  const int n = static_cast<int>(stream.tokens.size());
  const int q_heads = layout.q_heads, kv_heads = layout.kv_heads;
  const int head_dim = layout.head_dim, value_dim = layout.value_dim;
  const int group = std::max(1, layout.group());
  const bool rope = layout.rope_theta.has_value();
  const double scale = layout.softmax_scale();
  const auto hd = static_cast<size_t>(head_dim);
  const auto vd = static_cast<size_t>(value_dim);

  // Per position and kv head: the key rotated to its own position, its error magnitudes
  // (see magnitudes()), the values and max |v|. [pos][kv_head][head_dim or value_dim],
  // [pos][kv_head].
  const size_t k_stride = static_cast<size_t>(kv_heads) * hd;
  std::vector<double> keys(static_cast<size_t>(n) * k_stride);
  std::vector<double> key_mags(keys.size());
  std::vector<double> value_max(static_cast<size_t>(n) * static_cast<size_t>(kv_heads));
  const size_t v_stride = static_cast<size_t>(kv_heads) * vd;
  std::vector<double> values(static_cast<size_t>(n) * v_stride);
  for (int j = 0; j < n; ++j) {
    const int id = stream.tokens[static_cast<size_t>(j)];
    const auto k = table.k(id);
    const auto v = table.v(id);
    double* dst = keys.data() + static_cast<size_t>(j) * k_stride;
    std::copy(k.begin(), k.end(), dst);
    std::copy(v.begin(), v.end(),
              values.begin() + static_cast<std::ptrdiff_t>(static_cast<size_t>(j) * v_stride));
    for (int g = 0; g < kv_heads; ++g) {
      double* head = dst + static_cast<size_t>(g) * hd;
      if (rope) rotate(head, head_dim, *layout.rope_theta, j);
      magnitudes(head, head_dim, rope, key_mags.data() + (head - keys.data()));
      double largest = 0;
      for (size_t d = 0; d < vd; ++d) {
        largest =
            std::max(largest, std::fabs(static_cast<double>(v[static_cast<size_t>(g) * vd + d])));
      }
      value_max[static_cast<size_t>(j) * static_cast<size_t>(kv_heads) + static_cast<size_t>(g)] =
          largest;
    }
  }

  std::vector<ReferenceRow> rows;
  rows.reserve(static_cast<size_t>(n));
  std::vector<double> q(hd), q_mags(hd), logits;
  for (int p = 0; p < n; ++p) {
    const int lo = layout.window ? std::max(0, p - std::max(1, *layout.window) + 1) : 0;
    const int visible = p - lo + 1;
    ReferenceRow row;
    row.key = RowKey{stream.seq, stream.epoch, p};
    row.key_lo = lo;
    row.key_hi = p;
    row.values.assign(static_cast<size_t>(q_heads) * vd, 0.0);
    row.bound.assign(static_cast<size_t>(q_heads), 0.0);
    const auto q_all = table.q(stream.tokens[static_cast<size_t>(p)]);
    for (int h = 0; h < q_heads; ++h) {
      const int g = h / group;
      const size_t head_at = static_cast<size_t>(g) * hd;
      std::copy_n(q_all.begin() + static_cast<std::ptrdiff_t>(static_cast<size_t>(h) * hd),
                  head_dim, q.begin());
      if (rope) rotate(q.data(), head_dim, *layout.rope_theta, p);
      magnitudes(q.data(), head_dim, rope, q_mags.data());

      // Scores, their max, and the tolerance inputs S and M over the visible keys.
      logits.resize(static_cast<size_t>(visible));
      double max_logit = -HUGE_VAL, max_terms = 0, max_value = 0;
      // (Raw pointers: this loop is the reference's whole cost, also in unoptimised builds.)
      const double* qp = q.data();
      const double* qm = q_mags.data();
      double* lp = logits.data();
      for (int j = lo; j <= p; ++j) {
        const size_t at = static_cast<size_t>(j) * k_stride + head_at;
        const double* kp = keys.data() + at;
        const double* km = key_mags.data() + at;
        double dot = 0, terms = 0;
        for (int d = 0; d < head_dim; ++d) {
          dot += qp[d] * kp[d];
          terms += qm[d] * km[d];
        }
        const double logit = scale * dot;
        lp[j - lo] = logit;
        if (logit > max_logit) max_logit = logit;
        if (terms > max_terms) max_terms = terms;
        const double m = value_max[static_cast<size_t>(j) * static_cast<size_t>(kv_heads) +
                                   static_cast<size_t>(g)];
        if (m > max_value) max_value = m;
      }
      max_terms *= std::fabs(scale);

      // Softmax with the max subtracted, then the weighted mean of the values.
      double total = 0;
      for (int j = 0; j < visible; ++j) {
        lp[j] = std::exp(lp[j] - max_logit);
        total += lp[j];
      }
      double* out = row.values.data() + static_cast<size_t>(h) * vd;
      for (int j = lo; j <= p; ++j) {
        const double w = lp[j - lo] / total;
        const double* v =
            values.data() + static_cast<size_t>(j) * v_stride + static_cast<size_t>(g) * vd;
        for (int d = 0; d < value_dim; ++d) out[d] += w * v[d];
      }

      row.bound[static_cast<size_t>(h)] = tolerance(ToleranceInputs{
          .dtype = layout.dtype,
          .visible_keys = visible,
          .head_dim = head_dim,
          .max_abs_value = max_value,
          .max_score_terms = max_terms,
          .rope = rope,
          .position = p,
      });
    }
    rows.push_back(std::move(row));
  }
  return rows;
}

}  // namespace kvfuzz
