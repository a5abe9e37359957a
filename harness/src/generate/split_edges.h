// Split edges against the batch (issue 15): a decode kernel whose split count comes from
// the batch's longest row or is a fixed number (kernels/cpu/flash_engine.h, FlashSplit)
// gives a shorter row of the batch empty partitions, and a row below the split threshold
// the split path. The edges that matter are then relative to the batch's longest decode:
// a shorter row that ends on a partition edge (the next partition empty and starting
// right after its last key), one key before or past it, below the threshold, or tiny.
//
// The piece: now and then the program ends with a batched decode run (one sequence when
// batched steps are filtered out) whose leader is first brought to the split threshold or
// a partition edge above it (one before, on, one after) and whose other sequences are
// brought to partition edges below the leader's, to the threshold, or left tiny; the run of
// 1 to 3 decodes then moves every row across its edge one token at a time.
#pragma once

#include <cstdint>
#include <vector>

#include "kvfuzz/choice_source.h"
#include "kvfuzz/generator.h"
#include "kvfuzz/scenario.h"

namespace kvfuzz {

// What a sequence other than the leader is aimed at.
enum class SplitFollower { partition_edge, threshold, tiny };

struct SplitFollowerChoices {
  bool joins = false;
  SplitFollower kind = SplitFollower::partition_edge;
  int partitions_below = 1;  // 1..3 partition edges below the leader's last partition
  int offset = 0;            // pick_offset: 0, 1, -1
  int tiny = 1;              // 1..4 keys
};

// Fixed arity: every slot's choices are drawn whether or not the tail is on.
struct SplitEdgeChoices {
  bool on = false;
  int leader = 0;       // a sequence slot
  int leader_edge = 0;  // 0: the split threshold; 1..3: the partition edges above it
  int leader_offset = 0;
  std::vector<SplitFollowerChoices> followers;  // one per slot
  int decodes = 1;                              // 1..3
};

// Off first (one in four on); `slots`: the sequences choices are drawn for.
SplitEdgeChoices pick_split_edges(ChoiceSource& c, int slots);

// What to append: `fill[s]` tokens to sequence s (one append each), then `decodes`
// batched decodes over `batch` (ascending). lengths and room per sequence now;
// `batched`: whether followers may join the leader.
struct SplitEdgePlan {
  std::vector<int> fill;
  std::vector<int> batch;
  int decodes = 0;
};
SplitEdgePlan plan_split_edges(const SplitEdgeChoices& choices, const std::vector<int>& lengths,
                               const std::vector<int>& room, const EngineEdges& edges,
                               bool batched);

// Shorter rows of batched decode steps against the step's longest decode L >= the split
// threshold (P = partition keys, n the row's keys, n < L): below the threshold; on an edge
// (n % P == 0, so the partition after its last key is empty under a batch-wide count); one
// key past an edge (n % P == 1); one before (n % P == P - 1). Each counts rows.
struct BatchSplitEdgeCounts {
  int64_t below_threshold = 0;
  int64_t on_edge = 0;
  int64_t past_edge = 0;
  int64_t before_edge = 0;
};
BatchSplitEdgeCounts count_batch_split_edges(const Scenario& scenario, const EngineEdges& edges);

}  // namespace kvfuzz
