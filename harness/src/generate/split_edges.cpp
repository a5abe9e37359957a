#include "generate/split_edges.h"

#include <algorithm>

namespace kvfuzz {

SplitEdgeChoices pick_split_edges(ChoiceSource& c, int slots) {
  SplitEdgeChoices s;
  s.on = rarely(c, 4);
  s.leader = c.pick_int(0, std::max(0, slots - 1));
  s.leader_edge = c.pick_int(0, 3);
  s.leader_offset = pick_offset(c);
  for (int i = 0; i < slots; ++i) {
    SplitFollowerChoices f;
    f.joins = c.pick(0, 3) != 0;  // most join: the point is a batch
    f.kind = pick_weighted<SplitFollower>(c, {{SplitFollower::partition_edge, 3},
                                              {SplitFollower::threshold, 2},
                                              {SplitFollower::tiny, 1}});
    f.partitions_below = c.pick_int(1, 3);
    f.offset = pick_offset(c);
    f.tiny = c.pick_int(1, 4);
    s.followers.push_back(f);
  }
  s.decodes = c.pick_int(1, 3);
  return s;
}

SplitEdgePlan plan_split_edges(const SplitEdgeChoices& choices, const std::vector<int>& lengths,
                               const std::vector<int>& room, const EngineEdges& edges,
                               bool batched) {
  SplitEdgePlan plan;
  const auto sequences = static_cast<int>(lengths.size());
  plan.fill.assign(lengths.size(), 0);
  if (!choices.on || sequences == 0) return plan;
  const int threshold = std::max(1, edges.split_threshold);
  const int part = std::max(1, edges.partition_keys);
  const int leader = choices.leader % sequences;
  const int above = (threshold + part - 1) / part;  // the first partition edge >= threshold
  const int leader_keys = std::max(
      1, (choices.leader_edge == 0 ? threshold : part * (above + choices.leader_edge - 1)) +
             choices.leader_offset);
  const int leader_parts = (leader_keys + part - 1) / part;
  plan.decodes = choices.decodes;
  // A row's first decode sees its length + 1 keys: bring it to keys - 1, leaving room for
  // the decodes.
  const auto fill = [&](int seq, int keys) {
    const auto at = static_cast<size_t>(seq);
    plan.fill[at] = std::clamp(keys - 1 - lengths[at], 0, std::max(0, room[at] - plan.decodes));
  };
  for (int seq = 0; seq < sequences; ++seq) {
    const SplitFollowerChoices& f =
        choices.followers[static_cast<size_t>(seq) % choices.followers.size()];
    if (seq == leader) {
      fill(seq, leader_keys);
    } else if (batched && f.joins) {
      const int edge = part * std::max(0, leader_parts - f.partitions_below);
      fill(seq, std::max(1, select(f.kind, {{SplitFollower::partition_edge, edge + f.offset},
                                            {SplitFollower::threshold, threshold + f.offset},
                                            {SplitFollower::tiny, f.tiny}})));
    } else {
      continue;
    }
    plan.batch.push_back(seq);
  }
  return plan;
}

BatchSplitEdgeCounts count_batch_split_edges(const Scenario& s, const EngineEdges& edges) {
  BatchSplitEdgeCounts counts;
  const int64_t threshold = std::max(1, edges.split_threshold);
  const int64_t part = std::max(1, edges.partition_keys);
  const auto keys_seen = [&](int64_t pos) {
    return s.layout.window ? std::min<int64_t>(pos + 1, *s.layout.window) : pos + 1;
  };
  // The decodes of each op, as for_each_chunk places them (op, keys seen).
  std::vector<std::vector<int64_t>> decodes(s.program.size());
  for_each_chunk(s, [&](const PlacedChunk& chunk) {
    if (chunk.tokens->size() == 1) {
      decodes[static_cast<size_t>(chunk.op)].push_back(keys_seen(chunk.start));
    }
  });
  for (const std::vector<int64_t>& step : decodes) {
    if (step.size() < 2) continue;
    const int64_t longest = *std::max_element(step.begin(), step.end());
    if (longest < threshold) continue;
    for (int64_t n : step) {
      if (n >= longest) continue;
      if (n < threshold) ++counts.below_threshold;
      if (n % part == 0) ++counts.on_edge;
      if (n % part == 1) ++counts.past_edge;
      if (n % part == part - 1) ++counts.before_edge;
    }
  }
  return counts;
}

}  // namespace kvfuzz
