// Scenario variants for the invariance properties (property_variants.h).
#include "judge/property_variants.h"

#include <algorithm>
#include <array>
#include <bit>
#include <numeric>
#include <optional>
#include <set>
#include <string>
#include <type_traits>
#include <variant>
#include <vector>

#include "kvfuzz/prng.h"
#include "run/runner.h"
#include "support/hash.h"

namespace kvfuzz {

namespace {

// FNV-1a over the fields a run depends on, written field by field (with lengths and
// presence flags) so that no two different scenarios feed it the same byte stream.
class Hasher {
 public:
  void add(uint64_t x) { hash_.add_u64(x); }
  void add_int(int64_t x) { add(static_cast<uint64_t>(x)); }
  void add_double(double x) { add(std::bit_cast<uint64_t>(x)); }
  template <typename T>
  void add_optional(const std::optional<T>& x) {
    add(x ? 1 : 0);
    if (!x) return;
    if constexpr (std::is_floating_point_v<T>) {
      add_double(*x);
    } else {
      add_int(*x);
    }
  }
  void add_ints(const std::vector<int>& xs) {
    add(xs.size());
    for (int x : xs) add_int(x);
  }
  void add_heads(const std::vector<std::vector<double>>& heads) {
    add(heads.size());
    for (const auto& head : heads) {
      add(head.size());
      for (double x : head) add_double(x);
    }
  }
  uint64_t value() const { return hash_.value(); }

 private:
  Fnv1a hash_;
};

// Each variant draws from its own stream, so adding a choice to one never moves another.
Xoshiro256 rng_for(uint64_t seed, uint64_t salt) {
  return Xoshiro256(seed ^ (salt * 0x9E3779B97F4A7C15ull));
}

bool feeds_engine(const Op& op) {
  return op.kind == OpKind::append || op.kind == OpKind::step;
}

// The sequences an op feeds, in chunk order.
std::vector<int> members_of(const Op& op) {
  std::vector<int> members;
  for (const Chunk& chunk : op.batch()) members.push_back(chunk.seq);
  return members;
}

// The resolved pool size (what engine_config hands the engine).
int resolved_pool(const Scenario& scenario) {
  return static_cast<int>(engine_config(scenario).page_order.size());
}

// The variant keeps the base's page pool: the same explicit list, or the same pool size.
void pin_pool(Scenario& variant, const Scenario& base) {
  variant.placement = base.placement;
  if (base.placement.order != PageOrder::explicit_list) {
    variant.placement.pool_pages = resolved_pool(base);
  }
}

std::string lengths_text(const std::vector<size_t>& cuts, size_t total) {
  std::string text = "[";
  size_t last = 0;
  for (size_t i = 0; i <= cuts.size(); ++i) {
    const size_t end = i < cuts.size() ? cuts[i] : total;
    if (i > 0) text += " ";
    text += std::to_string(end - last);
    last = end;
  }
  return text + "]";
}

std::string order_name(PageOrder order) {
  switch (order) {
    case PageOrder::identity:
      return "identity";
    case PageOrder::reversed:
      return "reversed";
    case PageOrder::explicit_list:
      return "shuffled";
  }
  return "?";
}

Scenario variant_base(const Scenario& scenario) {
  Scenario variant = scenario;
  variant.expect.clear();
  return variant;
}

// `count` distinct cut points in [1, length - 1], ascending.
std::vector<size_t> pick_cuts(Xoshiro256& rng, size_t length, size_t count) {
  std::vector<size_t> points(length - 1);
  std::iota(points.begin(), points.end(), size_t{1});
  for (size_t i = 0; i < count; ++i) {
    const auto j = i + static_cast<size_t>(rng.below(points.size() - i));
    std::swap(points[i], points[j]);
  }
  points.resize(count);
  std::sort(points.begin(), points.end());
  return points;
}

// The program's logical state per sequence: its epoch and the token ids it holds.
class Holdings {
 public:
  int epoch(int seq) const {
    const auto it = epochs_.find(seq);
    return it == epochs_.end() ? 0 : it->second;
  }
  const std::vector<int>& held(int seq) { return held_[seq]; }
  void apply(const Op& op) {
    switch (op.kind) {
      case OpKind::append:
      case OpKind::step:
        for (const Chunk& chunk : op.batch()) {
          std::vector<int>& tokens = held_[chunk.seq];
          tokens.insert(tokens.end(), chunk.tokens.begin(), chunk.tokens.end());
        }
        return;
      case OpKind::reset:
        held_[op.seq].clear();
        break;
      case OpKind::truncate: {
        std::vector<int>& tokens = held_[op.seq];
        tokens.resize(static_cast<size_t>(
            std::clamp<int64_t>(op.keep, 0, static_cast<int64_t>(tokens.size()))));
        break;
      }
      case OpKind::fork:
        if (op.src != op.seq) held_[op.seq] = held_[op.src];
        break;
    }
    ++epochs_[op.seq];  // reset, truncate and fork each start a new epoch of op.seq
  }

 private:
  std::map<int, int> epochs_;
  std::map<int, std::vector<int>> held_;
};

std::string op_name(OpKind kind) {
  switch (kind) {
    case OpKind::append:
      return "append";
    case OpKind::step:
      return "step";
    case OpKind::reset:
      return "reset";
    case OpKind::truncate:
      return "truncate";
    case OpKind::fork:
      return "fork";
  }
  return "?";
}

}  // namespace

bool same_run(const Scenario& a, const Scenario& b) {
  return a.layout == b.layout && a.tokens == b.tokens && a.sequences == b.sequences &&
         a.program == b.program && a.placement == b.placement;
}

uint64_t variant_seed(const Scenario& s) {
  Hasher h;
  const Layout& l = s.layout;
  for (int x : {l.q_heads, l.kv_heads, l.head_dim, l.value_dim, l.page_size}) h.add_int(x);
  h.add_int(static_cast<int>(l.dtype));
  h.add_optional(l.rope_theta);
  h.add_optional(l.window);
  h.add_optional(l.scale);
  if (const auto* list = std::get_if<std::vector<ExplicitToken>>(&s.tokens)) {
    h.add(1);
    h.add(list->size());
    for (const ExplicitToken& t : *list) {
      h.add_heads(t.q);
      h.add_heads(t.k);
      h.add_heads(t.v);
    }
  } else {
    const auto& g = std::get<GeneratedTokens>(s.tokens);
    h.add(2);
    h.add(g.seed);
    h.add_int(g.count);
    h.add_int(static_cast<int>(g.distribution));
    h.add(g.zero_scores ? 1 : 0);
    h.add_int(g.qk_log2);
  }
  h.add_int(s.sequences);
  h.add(s.program.size());
  for (const Op& op : s.program) {
    h.add_int(static_cast<int>(op.kind));
    h.add_int(op.seq);
    h.add_int(op.src);
    h.add_int(op.keep);
    h.add_ints(op.tokens);
    h.add(op.chunks.size());
    for (const Chunk& c : op.chunks) {
      h.add_int(c.seq);
      h.add_ints(c.tokens);
    }
  }
  h.add_int(static_cast<int>(s.placement.order));
  h.add_ints(s.placement.pages);
  h.add_optional(s.placement.pool_pages);
  h.add_int(static_cast<int>(s.placement.poison));
  return h.value();
}

ScenarioVariant schedule_variant(const Scenario& scenario, uint64_t seed) {
  Xoshiro256 rng = rng_for(seed, 1);
  ScenarioVariant v{variant_base(scenario), "", {}};
  v.scenario.program.clear();
  std::string changes;
  int changed = 0;
  const std::vector<Op>& program = scenario.program;
  size_t i = 0;
  while (i < program.size()) {
    if (!feeds_engine(program[i])) {  // resets (and any other op) stay where they are
      v.scenario.program.push_back(program[i]);
      ++i;
      continue;
    }
    const OpKind kind = program[i].kind;
    const std::vector<int> members = members_of(program[i]);
    size_t end = i + 1;
    while (end < program.size() && program[end].kind == kind &&
           members_of(program[end]) == members) {
      ++end;
    }
    // Per member: the run's tokens and the base's cut points.
    std::vector<std::vector<int>> streams(members.size());
    std::vector<std::vector<size_t>> base_cuts(members.size());
    for (size_t o = i; o < end; ++o) {
      const std::vector<Chunk> batch = program[o].batch();
      for (size_t m = 0; m < members.size(); ++m) {
        if (o > i) base_cuts[m].push_back(streams[m].size());
        streams[m].insert(streams[m].end(), batch[m].tokens.begin(), batch[m].tokens.end());
      }
    }
    size_t shortest = SIZE_MAX;
    for (const auto& stream : streams) shortest = std::min(shortest, stream.size());
    const size_t forwards = end - i;
    std::vector<std::vector<size_t>> cuts = base_cuts;
    if (shortest >= 2) {
      // A few draws: another number of forwards (each member at least one token in each)
      // or other cut points; kept only if some member's cuts differ from the base's.
      for (int attempt = 0; attempt < 8 && cuts == base_cuts; ++attempt) {
        const auto most = static_cast<int64_t>(std::min(shortest, forwards + 3));
        const auto count = static_cast<size_t>(rng.between(1, most));
        for (size_t m = 0; m < members.size(); ++m) {
          cuts[m] = pick_cuts(rng, streams[m].size(), count - 1);
        }
      }
      if (cuts != base_cuts) {
        ++changed;
        if (changed <= 3) {
          changes += std::string(changed > 1 ? "; " : "") + "ops " + std::to_string(i) + ".." +
                     std::to_string(end - 1) + ":";
          for (size_t m = 0; m < members.size(); ++m) {
            changes += " seq " + std::to_string(members[m]) + " " +
                       lengths_text(base_cuts[m], streams[m].size()) + " -> " +
                       lengths_text(cuts[m], streams[m].size());
          }
        }
      }
    }
    const size_t count = cuts[0].size() + 1;
    for (size_t f = 0; f < count; ++f) {
      std::vector<Chunk> chunks;
      for (size_t m = 0; m < members.size(); ++m) {
        const size_t from = f == 0 ? 0 : cuts[m][f - 1];
        const size_t to = f + 1 < count ? cuts[m][f] : streams[m].size();
        const auto first = streams[m].begin();
        chunks.push_back(
            Chunk{members[m], std::vector<int>(first + static_cast<std::ptrdiff_t>(from),
                                               first + static_cast<std::ptrdiff_t>(to))});
      }
      if (kind == OpKind::append) {
        v.scenario.program.push_back(Op::append(chunks[0].seq, std::move(chunks[0].tokens)));
      } else {
        v.scenario.program.push_back(Op::step(std::move(chunks)));
      }
    }
    i = end;
  }
  if (changed == 0) {
    v.description = "schedule: unchanged (no run of forwards gives every member two tokens)";
  } else {
    v.description = "schedule: " + std::to_string(changed) + " run(s) of forwards re-split (" +
                    changes + (changed > 3 ? "; ..." : "") + ")";
  }
  for_each_chunk(v.scenario, [&](const PlacedChunk& c) {
    v.streams.emplace(StreamId{c.seq, c.epoch}, StreamId{c.seq, c.epoch});
  });
  return v;
}

ScenarioVariant layout_variant(const Scenario& scenario, uint64_t seed) {
  static constexpr std::array<int, 8> kPageSizes{1, 2, 3, 4, 5, 8, 16, 32};
  Xoshiro256 rng = rng_for(seed, 2);
  ScenarioVariant v{variant_base(scenario), "", {}};
  const int old_size = scenario.layout.page_size;
  // Where a forward ends inside a page or on its last slot is where the cache's last-page
  // handling differs (a decode reads a partial page). Prefer a page size that moves some
  // decode (one-token forward) across that line, then some other forward, then any.
  std::vector<int64_t> decode_ends, other_ends;
  for_each_chunk(scenario, [&](const PlacedChunk& c) {
    const int64_t end = c.start + static_cast<int64_t>(c.tokens->size());
    (c.tokens->size() == 1 ? decode_ends : other_ends).push_back(end);
  });
  const auto moves = [&](int size, const std::vector<int64_t>& ends) {
    return std::any_of(ends.begin(), ends.end(),
                       [&](int64_t end) { return (end % size == 0) != (end % old_size == 0); });
  };
  std::vector<int> sizes;
  for (const std::vector<int64_t>* ends : {&decode_ends, &other_ends}) {
    for (int size : kPageSizes) {
      if (size != old_size && moves(size, *ends)) sizes.push_back(size);
    }
    if (!sizes.empty()) break;
  }
  if (sizes.empty()) {
    for (int size : kPageSizes) {
      if (size != old_size) sizes.push_back(size);
    }
  }
  const int new_size = sizes[static_cast<size_t>(rng.below(sizes.size()))];
  v.scenario.layout.page_size = new_size;

  // Spare capacity in slots, rounded up to whole pages of the new size.
  const int64_t spare_pages = resolved_pool(scenario) - required_pool_pages(scenario);
  const int64_t spare_slots = std::max<int64_t>(0, spare_pages) * old_size;
  const int64_t new_spare = (spare_slots + new_size - 1) / new_size;
  const int pool = required_pool_pages(v.scenario) + static_cast<int>(new_spare);

  std::vector<PageOrder> orders;
  for (PageOrder order : {PageOrder::identity, PageOrder::reversed, PageOrder::explicit_list}) {
    if (order != scenario.placement.order || order == PageOrder::explicit_list) {
      orders.push_back(order);
    }
  }
  const PageOrder order = orders[static_cast<size_t>(rng.below(orders.size()))];
  Placement& placement = v.scenario.placement;
  placement.order = order;
  placement.pages.clear();
  placement.pool_pages.reset();
  if (order == PageOrder::explicit_list) {
    placement.pages.resize(static_cast<size_t>(pool));
    std::iota(placement.pages.begin(), placement.pages.end(), 0);
    for (size_t k = placement.pages.size(); k > 1; --k) {
      std::swap(placement.pages[k - 1], placement.pages[static_cast<size_t>(rng.below(k))]);
    }
  } else if (new_spare > 0) {
    placement.pool_pages = pool;
  }
  v.description = "layout: page size " + std::to_string(old_size) + " -> " +
                  std::to_string(new_size) + ", page order " +
                  order_name(scenario.placement.order) + " -> " + order_name(order) + " (" +
                  std::to_string(pool) + " pages)";
  for_each_chunk(v.scenario, [&](const PlacedChunk& c) {
    v.streams.emplace(StreamId{c.seq, c.epoch}, StreamId{c.seq, c.epoch});
  });
  return v;
}

ScenarioVariant poison_variant(const Scenario& scenario, uint64_t seed) {
  static constexpr std::array<Poison, 3> kNonFinite{Poison::nan, Poison::pos_inf, Poison::neg_inf};
  Xoshiro256 rng = rng_for(seed, 3);
  ScenarioVariant v{variant_base(scenario), "", {}};
  const Poison old_poison = scenario.placement.poison;
  const Poison new_poison = old_poison == Poison::huge
                                ? kNonFinite[static_cast<size_t>(rng.below(kNonFinite.size()))]
                                : Poison::huge;
  v.scenario.placement.poison = new_poison;
  v.description = "poison: " + std::string(poison_name(old_poison)) + " -> " +
                  std::string(poison_name(new_poison));
  for_each_chunk(v.scenario, [&](const PlacedChunk& c) {
    v.streams.emplace(StreamId{c.seq, c.epoch}, StreamId{c.seq, c.epoch});
  });
  return v;
}

std::vector<ScenarioVariant> reset_variants(const Scenario& scenario) {
  // Every (sequence, epoch >= 1) that is fed tokens, and the op that started it.
  std::vector<StreamId> targets;
  std::set<StreamId> seen;
  for_each_chunk(scenario, [&](const PlacedChunk& c) {
    if (c.epoch >= 1 && seen.insert({c.seq, c.epoch}).second) targets.push_back({c.seq, c.epoch});
  });
  std::vector<ScenarioVariant> variants;
  for (const auto& [seq, epoch] : targets) {
    ScenarioVariant v{variant_base(scenario), "", {}};
    v.scenario.program.clear();
    pin_pool(v.scenario, scenario);
    Holdings state;
    OpKind started_by = OpKind::reset;
    int64_t inherited = 0;
    for (const Op& op : scenario.program) {
      const bool starts_it = !feeds_engine(op) && op.seq == seq && state.epoch(seq) + 1 == epoch;
      state.apply(op);
      if (starts_it) {
        // What the epoch inherits (kept by a truncate, shared by a fork) is fed to the fresh
        // engine as one chunk: keys for the epoch's rows, rows of their own left uncompared.
        started_by = op.kind;
        const std::vector<int>& prefix = state.held(seq);
        inherited = static_cast<int64_t>(prefix.size());
        if (!prefix.empty()) v.scenario.program.push_back(Op::append(seq, prefix));
        continue;
      }
      if (!feeds_engine(op) || state.epoch(seq) != epoch) continue;
      for (const Chunk& chunk : op.batch()) {
        if (chunk.seq != seq) continue;
        v.scenario.program.push_back(op.kind == OpKind::append ? Op::append(seq, chunk.tokens)
                                                               : Op::step({chunk}));
      }
    }
    v.description = "reset: seq " + std::to_string(seq) + " epoch " + std::to_string(epoch) +
                    " (after a " + op_name(started_by) + ") alone on a fresh engine as its epoch 0";
    if (inherited > 0) {
      v.description += ", its " + std::to_string(inherited) + " inherited tokens fed first";
    }
    v.streams.emplace(StreamId{seq, 0}, StreamId{seq, epoch});
    variants.push_back(std::move(v));
  }
  return variants;
}

ScenarioVariant batch_variant(const Scenario& scenario, int seq) {
  ScenarioVariant v{variant_base(scenario), "", {}};
  v.scenario.program.clear();
  pin_pool(v.scenario, scenario);
  Holdings state;
  bool forked = false;
  for (const Op& op : scenario.program) {
    if (feeds_engine(op)) {
      for (const Chunk& chunk : op.batch()) {
        if (chunk.seq != seq) continue;
        v.scenario.program.push_back(op.kind == OpKind::append ? Op::append(seq, chunk.tokens)
                                                               : Op::step({chunk}));
      }
    } else if (op.kind == OpKind::fork && op.seq == seq) {
      // Without its source, a fork into `seq` becomes a new epoch fed the source's tokens.
      forked = true;
      v.scenario.program.push_back(Op::reset(seq));
      const std::vector<int>& prefix = state.held(op.src);
      if (!prefix.empty()) v.scenario.program.push_back(Op::append(seq, prefix));
    } else if (op.kind != OpKind::fork && op.seq == seq) {
      v.scenario.program.push_back(op);  // its resets and truncates
    }
    state.apply(op);
  }
  v.description =
      "batch: seq " + std::to_string(seq) + " alone, every step reduced to its own chunk";
  if (forked) v.description += ", each fork into it replaced by a reset and its source's tokens";
  // The epochs the base feeds (a fork's epoch the variant feeds only its inherited tokens).
  for_each_chunk(scenario, [&](const PlacedChunk& c) {
    if (c.seq == seq) v.streams.emplace(StreamId{c.seq, c.epoch}, StreamId{c.seq, c.epoch});
  });
  return v;
}

std::vector<int> sequences_with_neighbours(const Scenario& scenario) {
  std::set<int> active;
  for_each_chunk(scenario, [&](const PlacedChunk& c) { active.insert(c.seq); });
  if (active.size() < 2) return {};
  return {active.begin(), active.end()};
}

std::vector<ScenarioVariant> property_variants(Property property, const Scenario& scenario) {
  const uint64_t seed = variant_seed(scenario);
  std::vector<ScenarioVariant> variants;
  switch (property) {
    case Property::prefix:
      break;
    case Property::schedule:
      variants.push_back(schedule_variant(scenario, seed));
      break;
    case Property::layout:
      variants.push_back(layout_variant(scenario, seed));
      break;
    case Property::poison:
      variants.push_back(poison_variant(scenario, seed));
      break;
    case Property::reset:
      variants = reset_variants(scenario);
      break;
    case Property::batch:
      for (int seq : sequences_with_neighbours(scenario)) {
        variants.push_back(batch_variant(scenario, seq));
      }
      break;
  }
  std::erase_if(variants, [&](const ScenarioVariant& v) { return same_run(v.scenario, scenario); });
  return variants;
}

}  // namespace kvfuzz
