// The order of the moves (shrink/moves.h); the moves themselves are in moves_*.cpp.
#include "shrink/moves.h"

namespace kvfuzz::shrinking {

Scenario start_candidate(const Scenario& s) {
  Scenario out = s;
  out.expect.clear();
  return out;
}

const std::vector<Move>& moves() {
  static const std::vector<Move> all = {
      {"drop expect rows", drop_expect},
      {"drop a sequence", drop_sequence},
      {"drop ops", drop_ops},
      {"drop a chunk", drop_chunk},
      {"drop tokens", drop_tokens},
      {"cut to the split edge", cut_to_split_edge},
      {"cut inside the window", cut_inside_window},
      {"cut whole pages", cut_whole_pages},
      {"merge appends", merge_appends},
      {"step to append", step_to_append},
      {"truncate/fork to reset", simplify_epoch_ops},
      {"smaller model", reduce_model_size},
      {"smaller vocabulary", reduce_vocab},
      {"merge vocabulary ids", merge_vocab_ids},
      {"fewer heads", reduce_heads},
      {"smaller head_dim", reduce_head_dim},
      {"smaller value_dim", reduce_value_dim},
      {"smaller head size", reduce_head_size},
      {"head_dim cut keeping scores", concentrate_scores},
      {"simpler layout", simplify_layout},
      {"fewer attention features", simplify_features},
      {"simpler placement", simplify_placement},
      {"page size", reduce_page_size},
      {"compact tokens", compact_tokens},
      {"merge token ids", merge_token_ids},
      {"values wholesale", simplify_values_wholesale},
      {"one value", simplify_value},
  };
  return all;
}

const std::vector<Move>& drop_moves() {
  static const std::vector<Move> drops = {
      {"drop ops", drop_ops},
      {"drop a chunk", drop_chunk},
      {"drop tokens", drop_tokens},
  };
  return drops;
}

const Move& split_move() {
  static const Move split = {"split a chunk", split_chunk};
  return split;
}

}  // namespace kvfuzz::shrinking
