#include "generate/score_spreads.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "kvfuzz/limits.h"
#include "kvfuzz/prng.h"
#include "kvfuzz/token_table.h"
#include "scenario/rope.h"

namespace kvfuzz {

namespace {

// ln(FLT_MAX): exp of anything larger is inf in f32.
const double kExpOverflow = std::log(static_cast<double>(std::numeric_limits<float>::max()));
// exp of anything below ln(smallest subnormal) is 0 in f32.
const double kExpUnderflow =
    std::log(static_cast<double>(std::numeric_limits<float>::denorm_min()));

// The largest |q| or |k| generated or explicit token data has (prng.h's mappings and the
// generator's explicit small integers): 4, and 1 for uniform.
double largest_value(const TokenSource& tokens) {
  const auto* generated = std::get_if<GeneratedTokens>(&tokens);
  return generated && generated->distribution == Distribution::uniform ? 1.0 : 4.0;
}

}  // namespace

ScoreSpreadChoices score_spread_from_seed(uint64_t seed) {
  // splitmix64 of the seed, so that its low bits (which the token data also uses) do not
  // decide alone.
  uint64_t state = seed;
  const uint64_t bits = splitmix64(state);
  return {.on = seed != 0 && bits % 4 == 3,
          .bound_log2 = 12 + 2 * static_cast<int>(bits / 4 % 3),
          .by_magnitude = bits / 12 % 2 == 1};
}

void apply_score_spread(const ScoreSpreadChoices& choices, Scenario& s) {
  if (!choices.on) return;
  if (s.model) {
    // The model's q and k are its projections of RMS-normalised states (weights.cpp: O(1)
    // elements, rarely beyond 4): the scale alone spreads the scores, as for uniform data
    // of magnitude 4.
    int exponent = 0;
    std::frexp(std::ldexp(1.0, choices.bound_log2) / (16.0 * s.layout.head_dim), &exponent);
    s.layout.scale = std::ldexp(1.0, exponent - 1);
    return;
  }
  auto* generated = std::get_if<GeneratedTokens>(&s.tokens);
  if (generated) generated->zero_scores = false;
  const double a = largest_value(s.tokens);
  const double largest_product = a * a * s.layout.head_dim;  // unscaled, before M
  int qk_log2 = 0;
  if (choices.by_magnitude) {
    // The largest M = 2^qk_log2 with M^2 * A^2 * head_dim within both the unscaled limit
    // and the bound.
    const double limit = std::ldexp(1.0, std::min(kSpreadUnscaledLog2, choices.bound_log2));
    while (qk_log2 < limits::kMaxQkLog2 &&
           std::ldexp(largest_product, 2 * (qk_log2 + 1)) <= limit) {
      ++qk_log2;
    }
    // Explicit tokens (the generator's small integers, which depend on the program) are
    // multiplied in place, so that the layout does not depend on which source was drawn.
    if (generated) {
      generated->qk_log2 = qk_log2;
    } else if (auto* list = std::get_if<std::vector<ExplicitToken>>(&s.tokens)) {
      for (ExplicitToken& token : *list) {
        for (auto* heads : {&token.q, &token.k}) {
          for (std::vector<double>& head : *heads) {
            for (double& x : head) x = std::ldexp(x, qk_log2);
          }
        }
      }
    }
  }
  // The largest power of two <= 2^bound / (M^2 A^2 head_dim): frexp is exact, no libm
  // rounding.
  int exponent = 0;
  std::frexp(std::ldexp(1.0, choices.bound_log2) / std::ldexp(largest_product, 2 * qk_log2),
             &exponent);
  s.layout.scale = std::ldexp(1.0, exponent - 1);
}

SplitSpreadCounts count_split_spreads(const Scenario& s, const EngineEdges& edges) {
  SplitSpreadCounts counts;
  const Layout& l = s.layout;
  const TokenTable table(s.tokens, l);
  const auto hd = static_cast<size_t>(l.head_dim);
  const double scale = l.softmax_scale();
  const int64_t threshold = std::max(1, edges.split_threshold);
  const int64_t part = std::max(1, edges.partition_keys);
  std::vector<std::vector<int>> streams(static_cast<size_t>(s.sequences));
  std::vector<double> q(hd), k(hd);
  const auto rotated = [&](std::span<const float> x, std::vector<double>& out, int64_t pos) {
    std::copy(x.begin(), x.end(), out.begin());
    if (l.rope_theta) {
      rope_rotate(out.data(), l.rope_shape(), *l.rope_theta, static_cast<double>(pos));
    }
  };
  const auto on_chunk = [&](const PlacedChunk& chunk) {
    std::vector<int>& stream = streams[static_cast<size_t>(chunk.seq)];
    stream.insert(stream.end(), chunk.tokens->begin(), chunk.tokens->end());
    if (chunk.tokens->size() != 1) return;
    const int64_t pos = chunk.start;
    const int64_t lo = l.window ? std::max<int64_t>(0, pos - *l.window + 1) : 0;
    if (pos - lo + 1 < threshold) return;
    for (int h = 0; h < l.q_heads; ++h) {
      ++counts.split_rows;
      rotated(table.q(stream[static_cast<size_t>(pos)]).subspan(static_cast<size_t>(h) * hd, hd), q,
              pos);
      std::vector<double> maxima;
      for (int64_t j = lo; j <= pos; ++j) {
        const size_t kv = static_cast<size_t>(l.kv_head_of(h));
        rotated(table.k(stream[static_cast<size_t>(j)]).subspan(kv * hd, hd), k, j);
        double score = 0;
        for (size_t d = 0; d < hd; ++d) score += q[d] * k[d];
        score *= scale;
        if ((j - lo) % part == 0) maxima.push_back(score);
        maxima.back() = std::max(maxima.back(), score);
      }
      const double top = *std::max_element(maxima.begin(), maxima.end());
      if (top - maxima.front() > kExpOverflow) ++counts.first_max_overflows;
      if (top > kExpOverflow || top < kExpUnderflow) ++counts.unshifted_out_of_range;
    }
  };
  const auto on_epoch = [&](const EpochStart& epoch) {
    std::vector<int>& stream = streams[static_cast<size_t>(epoch.seq)];
    if (epoch.kind == OpKind::fork) {
      stream = streams[static_cast<size_t>(s.program[static_cast<size_t>(epoch.op)].src)];
    } else {
      stream.resize(static_cast<size_t>(epoch.inherited));
    }
  };
  for_each_chunk(s, on_chunk, on_epoch);
  return counts;
}

}  // namespace kvfuzz
