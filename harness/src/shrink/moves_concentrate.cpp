// The score-keeping head_dim cut (shrink/moves.h). A plain cut keeps some dims and
// drops the rest, and with them their share of every score q.k: a failure that needs a
// large score (an exp that overflows, a maximum that must stand out) is lost by every cut
// once the kept dims no longer add up to it. This move goes to a head_dim of 1 (then 2,
// 4, 8, ... for an engine that declares multiples) in one step and writes the scores into
// dim 0, the others 0: for one anchor query (a token and a q head of each group), k'[t] is
// its score against token t, so every score of the anchor survives exactly; every other
// query gets the q' that fits its own scores best (least squares against the new keys).
// Values become fractions; the value moves round them later, as far as the failure
// allows. RoPE goes (the rotation would make the scores depend on positions again).
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <utility>
#include <vector>

#include "shrink/moves.h"
#include "shrink/token_data.h"

namespace kvfuzz::shrinking {

namespace {

// Anchors tried per scenario, largest |q| first: the query of a large score is most often
// one with a large q, and each anchor is a candidate judged on the engine.
constexpr size_t kMaxAnchors = 8;

double dot(const std::vector<double>& a, const std::vector<double>& b) {
  double sum = 0;
  for (size_t d = 0; d < a.size(); ++d) sum += a[d] * b[d];
  return sum;
}

struct Anchor {
  int token = 0;
  int head_in_group = 0;  // q head g * group + this, for every kv head g
  double norm = 0;        // the largest |q| over those heads
};

// The anchors: every used token with every head offset in a group, largest norm first,
// ties in order of first use and offset (a stable sort: the same order everywhere).
std::vector<Anchor> anchors(const Layout& l, const std::vector<ExplicitToken>& tokens,
                            const std::vector<int>& used) {
  std::vector<Anchor> all;
  for (int t : used) {
    const ExplicitToken& token = tokens[static_cast<size_t>(t)];
    for (int r = 0; r < l.group(); ++r) {
      double norm = 0;
      for (int g = 0; g < l.kv_heads; ++g) {
        const auto& q = token.q[static_cast<size_t>(g * l.group() + r)];
        norm = std::max(norm, std::sqrt(dot(q, q)));
      }
      all.push_back({t, r, norm});
    }
  }
  std::stable_sort(all.begin(), all.end(),
                   [](const Anchor& a, const Anchor& b) { return a.norm > b.norm; });
  if (all.size() > kMaxAnchors) all.resize(kMaxAnchors);
  return all;
}

}  // namespace

Made concentrate_scores(const Scenario& s, int index, Scenario& out) {
  if (s.model || s.layout.head_dim <= 1) return Made::end;  // no token data, or one dim
  const Layout& l = s.layout;
  std::vector<ExplicitToken> tokens = materialise(s);
  const std::vector<int> used = first_use_order(s);
  const std::vector<Anchor> choices = anchors(l, tokens, used);
  if (choices.empty()) return Made::end;
  // Every anchor at head_dim 1, then every anchor at 2, at 4, ...: an engine that takes
  // only multiples of some size rejects the smaller ones unjudged (the search asks its
  // declarations first).
  int dims = 1;
  for (int level = index / static_cast<int>(choices.size()); level > 0; --level) dims *= 2;
  if (dims >= l.head_dim) return Made::end;
  const Anchor& anchor = choices[static_cast<size_t>(index) % choices.size()];
  if (anchor.norm == 0) return Made::skip;  // no score to keep

  out = start_candidate(s);
  out.layout.head_dim = dims;
  out.layout.clear_rope();
  // One head size for q, k and v stays one: above 1 dim (where value_dim 1 would be the
  // plain value_dim cut's business) the first values go along.
  const bool one_head_size = l.value_dim == l.head_dim && dims > 1;
  if (one_head_size) out.layout.value_dim = dims;
  const double old_scale = l.softmax_scale();
  const double new_scale = out.layout.softmax_scale();
  const size_t kv = static_cast<size_t>(l.kv_heads);
  // k'[t][g]: the anchor's score against t, in units of the new scale.
  std::vector<std::vector<double>> new_k(tokens.size(), std::vector<double>(kv));
  for (size_t g = 0; g < kv; ++g) {
    const auto& q =
        tokens[static_cast<size_t>(anchor.token)]
            .q[g * static_cast<size_t>(l.group()) + static_cast<size_t>(anchor.head_in_group)];
    for (size_t t = 0; t < tokens.size(); ++t) {
      new_k[t][g] = old_scale * dot(q, tokens[t].k[g]) / new_scale;
    }
  }
  // Least squares for every other query: q' = sum_t S(t) k'[t] / (new_scale sum_t k'[t]^2)
  // over the keys used, where S(t) = old_scale q.k[t] is linear in q, so the sum over the
  // keys is one vector per kv head: sum_t k'[t] k[t].
  std::vector<std::vector<double>> weighted(kv,
                                            std::vector<double>(static_cast<size_t>(l.head_dim)));
  std::vector<double> norm2(kv, 0.0);
  for (int t : used) {
    for (size_t g = 0; g < kv; ++g) {
      const double w = new_k[static_cast<size_t>(t)][g];
      const auto& k = tokens[static_cast<size_t>(t)].k[g];
      for (size_t d = 0; d < k.size(); ++d) weighted[g][d] += w * k[d];
      norm2[g] += w * w;
    }
  }
  for (size_t t = 0; t < tokens.size(); ++t) {
    ExplicitToken& token = tokens[t];
    for (size_t h = 0; h < token.q.size(); ++h) {
      const size_t g = h / static_cast<size_t>(l.group());
      const bool is_anchor =
          static_cast<int>(t) == anchor.token &&
          h % static_cast<size_t>(l.group()) == static_cast<size_t>(anchor.head_in_group);
      double q = 0;
      if (is_anchor) {
        q = 1;
      } else if (norm2[g] > 0) {
        q = old_scale * dot(token.q[h], weighted[g]) / (new_scale * norm2[g]);
      }
      token.q[h].assign(static_cast<size_t>(dims), 0.0);
      token.q[h][0] = q + 0.0;
    }
    for (size_t g = 0; g < kv; ++g) {
      token.k[g].assign(static_cast<size_t>(dims), 0.0);
      token.k[g][0] = new_k[t][g] + 0.0;
      if (one_head_size && !token.v.empty()) token.v[g].resize(static_cast<size_t>(dims));
    }
  }
  out.tokens = std::move(tokens);
  return Made::candidate;
}

}  // namespace kvfuzz::shrinking
