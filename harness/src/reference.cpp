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

// The magnitude a rounding error in a q.k dot product is proportional to: sum_d |q_d||k_d|.
// With RoPE, rotation errors are not relative per element (an element can cancel to zero
// while its error does not), but they are relative per rotated pair, so each pair counts
// ||q_pair|| ||k_pair|| instead (>= |q_i k_i| + |q_j k_j| by Cauchy-Schwarz, and unchanged
// by the rotation).
double score_terms(const double* q, const double* k, int head_dim, bool rope) {
  double sum = 0;
  if (!rope) {
    for (int d = 0; d < head_dim; ++d) sum += std::fabs(q[d] * k[d]);
    return sum;
  }
  const int half = head_dim / 2;
  for (int i = 0; i < half; ++i) {
    sum += std::hypot(q[i], q[i + half]) * std::hypot(k[i], k[i + half]);
  }
  if (head_dim % 2 != 0) sum += std::fabs(q[head_dim - 1] * k[head_dim - 1]);
  return sum;
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

  // Keys of every position, rotated to their own position: [pos][kv_head][head_dim].
  const size_t k_stride = static_cast<size_t>(kv_heads) * hd;
  std::vector<double> keys(static_cast<size_t>(n) * k_stride);
  for (int j = 0; j < n; ++j) {
    const auto k = table.k(stream.tokens[static_cast<size_t>(j)]);
    double* dst = keys.data() + static_cast<size_t>(j) * k_stride;
    std::copy(k.begin(), k.end(), dst);
    if (rope) {
      for (int g = 0; g < kv_heads; ++g) {
        rotate(dst + static_cast<size_t>(g) * hd, head_dim, *layout.rope_theta, j);
      }
    }
  }

  std::vector<ReferenceRow> rows;
  rows.reserve(static_cast<size_t>(n));
  std::vector<double> q(hd), logits, weights;
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
      std::copy_n(q_all.begin() + static_cast<std::ptrdiff_t>(static_cast<size_t>(h) * hd),
                  head_dim, q.begin());
      if (rope) rotate(q.data(), head_dim, *layout.rope_theta, p);

      logits.assign(static_cast<size_t>(visible), 0.0);
      double max_logit = -HUGE_VAL, max_terms = 0, max_value = 0;
      for (int j = lo; j <= p; ++j) {
        const double* k =
            keys.data() + static_cast<size_t>(j) * k_stride + static_cast<size_t>(g) * hd;
        double dot = 0;
        for (int d = 0; d < head_dim; ++d) dot += q[static_cast<size_t>(d)] * k[d];
        const double logit = scale * dot;
        logits[static_cast<size_t>(j - lo)] = logit;
        max_logit = std::max(max_logit, logit);
        max_terms = std::max(max_terms, std::fabs(scale) * score_terms(q.data(), k, head_dim, rope));
        const auto v = table.v(stream.tokens[static_cast<size_t>(j)]).subspan(
            static_cast<size_t>(g) * vd, vd);
        for (float x : v) max_value = std::max(max_value, std::fabs(static_cast<double>(x)));
      }

      weights.assign(static_cast<size_t>(visible), 0.0);
      double total = 0;
      for (int j = 0; j < visible; ++j) {
        weights[static_cast<size_t>(j)] = std::exp(logits[static_cast<size_t>(j)] - max_logit);
        total += weights[static_cast<size_t>(j)];
      }
      double* out = row.values.data() + static_cast<size_t>(h) * vd;
      for (int j = lo; j <= p; ++j) {
        const double w = weights[static_cast<size_t>(j - lo)] / total;
        const auto v = table.v(stream.tokens[static_cast<size_t>(j)]).subspan(
            static_cast<size_t>(g) * vd, vd);
        for (size_t d = 0; d < vd; ++d) out[d] += w * static_cast<double>(v[d]);
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
