#include "judge/position_hypothesis.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <vector>

#include "judge/report.h"
#include "judge/tolerance.h"
#include "scenario/rope.h"

namespace kvfuzz {

namespace {

constexpr int64_t kMostKeys = 4096;

const LogicalStream* stream_of(const std::vector<LogicalStream>& streams, const RowKey& key) {
  for (const LogicalStream& stream : streams) {
    if (stream.seq == key.seq && stream.epoch == key.epoch &&
        key.pos < static_cast<int64_t>(stream.tokens.size())) {
      return &stream;
    }
  }
  return nullptr;
}

}  // namespace

std::optional<std::string> wrong_angle_hypothesis(const Scenario& scenario, const TokenTable& table,
                                                  const ReferenceRow& ref, int q_head,
                                                  std::span<const float> got, DType output) {
  const Layout& l = scenario.layout;
  const auto vd = static_cast<size_t>(l.value_dim);
  // Its rows are plain softmax rows over unquantized keys: a layout with logit features or a
  // quantized cache has none to offer.
  if (l.softcap || !l.sinks.empty() || !l.alibi.empty() || l.quantized_kv()) return std::nullopt;
  if (!l.rope_theta || got.size() != vd || ref.key_hi - ref.key_lo + 1 > kMostKeys || q_head < 0 ||
      q_head >= l.q_heads) {
    return std::nullopt;
  }
  const std::vector<LogicalStream> streams = logical_streams(scenario);
  const LogicalStream* stream = stream_of(streams, ref.key);
  if (stream == nullptr) return std::nullopt;
  const auto hd = static_cast<size_t>(l.head_dim);
  const auto g = static_cast<size_t>(q_head / std::max(1, l.group()));
  const double theta = *l.rope_theta;
  const double scale = l.softmax_scale();

  std::vector<double> q(hd), k(hd);
  const auto token = [&](int64_t pos) { return stream->tokens[static_cast<size_t>(pos)]; };
  const auto q_all = table.q(token(ref.key.pos));
  std::copy_n(q_all.begin() + static_cast<std::ptrdiff_t>(static_cast<size_t>(q_head) * hd), hd,
              q.begin());
  rope_rotate(q.data(), l.rope_shape(), theta, static_cast<double>(ref.key.pos));
  // The score of key j rotated at `at`.
  const auto score = [&](int64_t j, int64_t at) {
    const auto k_all = table.k(token(j));
    std::copy_n(k_all.begin() + static_cast<std::ptrdiff_t>(g * hd), hd, k.begin());
    rope_rotate(k.data(), l.rope_shape(), theta, static_cast<double>(at));
    double dot = 0;
    for (size_t d = 0; d < hd; ++d) dot += q[d] * k[d];
    return scale * dot;
  };

  // Each key's score at its own position and at the wrong ones: one before, one after, 0.
  struct Key {
    int64_t pos;
    double right;
    std::array<std::pair<int64_t, double>, 3> wrong;
  };
  std::vector<Key> keys;
  double most = -HUGE_VAL;
  for (int64_t j = ref.key_lo; j <= ref.key_hi; ++j) {
    Key key{j, score(j, j), {}};
    const std::array<int64_t, 3> at = {j - 1, j + 1, 0};
    for (size_t w = 0; w < at.size(); ++w) {
      const bool differs = at[w] >= 0 && at[w] != j;
      key.wrong[w] = {differs ? at[w] : -1, differs ? score(j, at[w]) : -HUGE_VAL};
      most = std::max(most, key.wrong[w].second);
    }
    most = std::max(most, key.right);
    keys.push_back(key);
  }
  // The weighted sums once; each hypothesis changes one key's weight.
  std::vector<double> sum(vd, 0.0);
  double total = 0;
  const auto value = [&](int64_t j) { return table.v(token(j)).subspan(g * vd, vd); };
  for (const Key& key : keys) {
    const double w = std::exp(key.right - most);
    total += w;
    const auto v = value(key.pos);
    for (size_t d = 0; d < vd; ++d) sum[d] += w * v[d];
  }
  const double bound = ref.bound.at(static_cast<size_t>(q_head));
  double best = HUGE_VAL;
  std::optional<std::pair<int64_t, int64_t>> found;
  for (const Key& key : keys) {
    const double w = std::exp(key.right - most);
    const auto v = value(key.pos);
    for (const auto& [at, s] : key.wrong) {
      if (at < 0) continue;
      const double w_at = std::exp(s - most);
      const double z = total - w + w_at;
      bool within = z > 0;
      double worst = 0;
      for (size_t d = 0; d < vd && within; ++d) {
        const double row = (sum[d] - w * v[d] + w_at * v[d]) / z;
        const double error = std::fabs(double{got[d]} - row);
        within = error <= accepted_error(bound, row, output);
        worst = std::max(worst, error);
      }
      if (within && worst < best) {
        best = worst;
        found = std::pair{key.pos, at};
      }
    }
  }
  if (!found) return std::nullopt;
  return "the row is within its bound of the reference with the key at position " +
         std::to_string(found->first) + " rotated at position " + std::to_string(found->second) +
         " instead (error " + format_exact(best) +
         "): a key rotated or cached at a wrong position, not rounding";
}

}  // namespace kvfuzz
