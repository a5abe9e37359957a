// Moves on the model, at model level only (shrink/moves.h): fewer layers, narrower widths,
// a smaller vocabulary, fewer distinct words. No move changes the seed: the weights change
// entirely with it, so a smaller seed is not a simpler model.
#include <algorithm>
#include <vector>

#include "shrink/moves.h"
#include "shrink/token_data.h"

namespace kvfuzz::shrinking {

namespace {

// Smaller sizes of a model field, smallest first: 1, half, one less.
std::vector<int> smaller_sizes(int current) {
  std::vector<int> sizes;
  for (int size : {1, current / 2, current - 1}) {
    if (size >= 1 && size < current && std::find(sizes.begin(), sizes.end(), size) == sizes.end())
      sizes.push_back(size);
  }
  return sizes;
}

void set_vocab(Scenario& s, int vocab) {
  s.model->vocab = vocab;
  s.tokens = GeneratedTokens{0, vocab, Distribution::small_int, false};
}

}  // namespace

// Fewer layers, a narrower residual stream, a narrower MLP. Layers go from the end: the
// weights are drawn from one stream in order (embedding, then layer by layer), so dropping
// the last layers keeps the others' weights; a layer in the middle cannot go alone (the
// fixture holds a count, not a list of layers).
Made reduce_model_size(const Scenario& s, int index, Scenario& out) {
  if (!s.model) return index == 0 ? Made::skip : Made::end;
  const ModelConfig& m = *s.model;
  int seen = 0;
  int ModelConfig::*fields[] = {&ModelConfig::layers, &ModelConfig::width, &ModelConfig::ffn};
  for (int ModelConfig::*field : fields) {
    for (int size : smaller_sizes(m.*field)) {
      if (seen++ != index) continue;
      out = start_candidate(s);
      (*out.model).*field = size;
      return Made::candidate;
    }
  }
  return Made::end;
}

// A smaller vocabulary: down to the largest id used + 1 (the ids kept), then the used ids
// renumbered in order of first use (0, 1, 2, ...) and the vocabulary down to their count.
Made reduce_vocab(const Scenario& s, int index, Scenario& out) {
  if (index > 1) return Made::end;
  if (!s.model) return Made::skip;
  const int vocab = s.model->vocab;
  const std::vector<int> order = first_use_order(s);
  if (index == 0) {
    const int used = ids_needed(order);
    if (used >= vocab) return Made::skip;
    out = start_candidate(s);
    set_vocab(out, used);
    return Made::candidate;
  }
  if (numbered_in_first_use_order(order, static_cast<size_t>(vocab)) || order.empty())
    return Made::skip;
  std::vector<int> new_id(static_cast<size_t>(vocab), -1);
  for (size_t i = 0; i < order.size(); ++i)
    new_id[static_cast<size_t>(order[i])] = static_cast<int>(i);
  out = start_candidate(s);
  renumber_ids(out, new_id);
  set_vocab(out, static_cast<int>(order.size()));
  return Made::candidate;
}

// Fewer distinct words: every use of the `index + 1`-th id in order of first use becomes
// the first id used.
Made merge_vocab_ids(const Scenario& s, int index, Scenario& out) {
  if (!s.model) return index == 0 ? Made::skip : Made::end;
  const std::vector<int> order = first_use_order(s);
  const size_t i = static_cast<size_t>(index) + 1;
  if (i >= order.size()) return Made::end;
  std::vector<int> new_id(static_cast<size_t>(s.model->vocab));
  for (size_t t = 0; t < new_id.size(); ++t) new_id[t] = static_cast<int>(t);
  new_id[static_cast<size_t>(order[i])] = order[0];
  out = start_candidate(s);
  renumber_ids(out, new_id);
  return Made::candidate;
}

}  // namespace kvfuzz::shrinking
