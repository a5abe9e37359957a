// The program of one scenario (program.h): its token budget, and the builder that draws
// it step by step while tracking each sequence's current epoch length.
#include "generate/program.h"

#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

#include "generate/chunk_lengths.h"
#include "generate/split_edges.h"
#include "generate/windows_at_edges.h"

namespace kvfuzz {

namespace {

// Tokens the whole program may append: 4 epochs' worth, and at most about 2^20 numbers of
// rows, q, k and v together, so that no layout brings the rows (kMaxRowValues), the table
// (kMaxTableFloats) or the page pool (kMaxPoolElements) near their limits. At model level
// also at most about 2^24 multiply-adds over the program (the vocabulary grows with the
// tokens: at most one id per token or the small table's 32, plus the spare ones), far
// inside kMaxModelWork.
int program_token_budget(const Bounds& b, const Layout& l, const ModelChoices* model) {
  const int64_t per_token = int64_t{l.q_heads} * (int64_t{l.value_dim} + l.head_dim) +
                            int64_t{l.kv_heads} * (int64_t{l.head_dim} + l.value_dim);
  // Long contexts may hold 4x more (2^22 numbers: 16 MiB), and their layouts are small.
  const int64_t numbers = int64_t{1} << (b.long_context ? 22 : 20);
  auto budget =
      static_cast<int>(std::clamp<int64_t>(numbers / per_token, 1, int64_t{4} * b.epoch_tokens));
  if (model != nullptr) {
    const auto work = [&](int64_t tokens) {
      const int64_t vocab = std::max<int64_t>(tokens, 32) + model->spare_vocab;
      return tokens * model_work_per_token(*model, l, vocab);
    };
    while (budget > 1 && work(budget) > (int64_t{1} << 24)) budget = budget * 7 / 8;
  }
  return budget;
}

// `skip` adds nothing: at the low end, it lets shrinking delete any step, not only the last.
// `window_run` (windows_at_edges.h) is an append without a window.
enum class StepKind { skip, append, decode_run, batch, resets, truncate, fork, window_run };

// Builds the program step by step, tracking each sequence's current epoch length.
class ProgramBuilder {
 public:
  ProgramBuilder(ChoiceSource& c, const Bounds& b, const Layout& l, int sequences, TokenIds& ids,
                 const ModelChoices* model)
      : c_(c),
        bounds_(b),
        aim_{l.page_size, l.window, b.edges},
        program_tokens_(program_token_budget(b, l, model)),
        model_level_(model != nullptr),
        length_(static_cast<size_t>(sequences), 0),
        ids_(ids) {}

  // One program step. Its choices are drawn in full whatever the step is: the kind, a
  // sequence, which other sequences join a batch, a chunk length for every sequence slot,
  // the length of a decode run and of a run of resets.
  void add_step() {
    auto kind = pick_weighted<StepKind>(c_, {{StepKind::skip, 1},
                                             {StepKind::append, 4},
                                             {StepKind::decode_run, 3},
                                             {StepKind::batch, 3},
                                             {StepKind::resets, 2},
                                             {StepKind::truncate, 2},
                                             {StepKind::fork, 2},
                                             {StepKind::window_run, model_level_ ? 0 : 1}});
    // An engine without truncate or fork, or a filter without them or resets, gets an
    // append in their place (same choices).
    if ((kind == StepKind::truncate && !bounds_.truncate) ||
        (kind == StepKind::fork && !bounds_.fork) ||
        (kind == StepKind::resets && !bounds_.filters.ops.reset) ||
        (kind == StepKind::window_run && !aim_.window)) {
      kind = StepKind::append;
    }
    const int seq = c_.pick_int(0, sequences() - 1);
    std::vector<int> batch;  // ascending: `seq` and, each with a coin flip, the others
    std::vector<int> lengths;
    for (int s = 0; s < bounds_.sequences; ++s) {
      // Without batched steps nobody joins: a batch is an append, a batched decode run a
      // run of one sequence's decodes.
      const bool joins = c_.pick_bool() && bounds_.filters.ops.batch;
      if (s < sequences() && (s == seq || joins)) batch.push_back(s);
    }
    for (int s = 0; s < bounds_.sequences; ++s) {
      const bool real = s < sequences();
      lengths.push_back(
          pick_chunk_length(c_, aim_, real ? length(s) : 0, real ? room(s) : bounds_.epoch_tokens));
    }
    const bool long_run = rarely(c_, 4);
    const int long_decodes = c_.pick_int(1, bounds_.epoch_tokens);
    const int short_decodes = c_.pick_int(1, 4);
    const bool several_resets = rarely(c_, 3);
    const int resets = c_.pick_int(2, 3);
    const bool deep_cut = rarely(c_, 4);
    const int short_cut = c_.pick_int(1, 4);
    const int deep = c_.pick_int(1, bounds_.epoch_tokens);
    const int fork_to = c_.pick_int(1, std::max(1, bounds_.sequences - 1));
    const bool rollback = c_.pick_bool();
    const bool rollback_child = c_.pick_bool();
    const int rollback_keep = c_.pick_int(0, bounds_.epoch_tokens);
    // Not at model level (yet): no choice is drawn there (model scenarios stay as they were).
    const WindowRunChoices window_choices = model_level_ ? WindowRunChoices{} : pick_window_run(c_);
    switch (kind) {
      case StepKind::skip:
        break;
      case StepKind::append:
        forward({seq}, lengths);
        break;
      case StepKind::decode_run:
        decode_run(batch, long_run ? long_decodes : short_decodes);
        break;
      case StepKind::batch:
        forward(batch, lengths);
        break;
      case StepKind::resets:
        reset(seq, several_resets ? resets : 1);
        break;
      case StepKind::truncate:
        truncate(seq, deep_cut ? deep : short_cut);
        break;
      case StepKind::fork: {
        const int dst = (seq + fork_to) % sequences();
        fork(seq, dst);
        // Speculative decoding forks a draft and rolls one side back: a truncate right
        // after a fork lands in pages the two still share (copy-on-write territory).
        if (rollback && dst != seq && bounds_.truncate) {
          const int target = rollback_child ? dst : seq;
          ops_.push_back(Op::truncate(target, rollback_keep % (length(target) + 1)));
          length_[static_cast<size_t>(target)] = rollback_keep % (length(target) + 1);
        }
        break;
      }
      case StepKind::window_run: {
        const WindowRun run = window_run(window_choices, *aim_.window, aim_.page_size, aim_.edges);
        forward({seq}, std::vector<int>(static_cast<size_t>(seq) + 1, run.chunk));
        decode_run({seq}, run.decodes);
        break;
      }
    }
  }

  // Long contexts begin with one prefill per sequence, of 0 (at the low end) up to the
  // whole epoch, so that later steps start far from position 0.
  void prefill() {
    for (int seq = 0; seq < sequences(); ++seq) {
      const int n = std::min(c_.pick_int(0, bounds_.epoch_tokens), room(seq));
      if (n >= 1) emit({Chunk{seq, feed(seq, n)}});
    }
  }

  // The filter's minimum context (GeneratorFilters::min_context): when no epoch reached it,
  // one more append brings the longest current epoch (the first such sequence) to it. It
  // may go past the program's token budget by that chunk, never past the epoch bound.
  void reach(int tokens) {
    if (longest_ >= tokens) return;
    const auto seq =
        static_cast<int>(std::max_element(length_.begin(), length_.end()) - length_.begin());
    const int n = std::min(tokens, bounds_.epoch_tokens) - length(seq);
    if (n >= 1) emit({Chunk{seq, feed(seq, n)}});
  }

  // A batched decode run at split edges against the batch's longest row (split_edges.h).
  void split_edges(const SplitEdgeChoices& choices) {
    const SplitEdgePlan plan =
        plan_split_edges(choices, length_, rooms(), bounds_.edges, bounds_.filters.ops.batch);
    for (int seq : plan.batch) {
      const int n = std::min(plan.fill[static_cast<size_t>(seq)], room(seq));
      if (n >= 1) emit({Chunk{seq, feed(seq, n)}});
    }
    decode_run(plan.batch, plan.decodes);
  }

  std::vector<Op> take() { return std::move(ops_); }

 private:
  ChoiceSource& c_;
  const Bounds& bounds_;
  Aim aim_;
  int program_tokens_;
  bool model_level_;
  int total_ = 0;
  int longest_ = 0;          // the longest epoch so far, of any sequence
  std::vector<int> length_;  // tokens in each sequence's current epoch
  TokenIds& ids_;
  std::vector<Op> ops_;

  int sequences() const { return static_cast<int>(length_.size()); }
  int length(int seq) const { return length_[static_cast<size_t>(seq)]; }
  int room(int seq) const {
    return std::min(bounds_.epoch_tokens - length(seq), program_tokens_ - total_);
  }
  std::vector<int> rooms() const {
    std::vector<int> out;
    for (int seq = 0; seq < sequences(); ++seq) out.push_back(room(seq));
    return out;
  }

  std::vector<int> feed(int seq, int n) {
    length_[static_cast<size_t>(seq)] += n;
    total_ += n;
    longest_ = std::max(longest_, length(seq));
    return ids_.take(n);
  }

  // One forward over `seqs` (an append when one), each sequence with its own chunk length,
  // so batched sequences differ in cached length and in chunk length.
  void forward(const std::vector<int>& seqs, const std::vector<int>& lengths) {
    std::vector<Chunk> chunks;
    for (int seq : seqs) {
      const int n = std::min(lengths[static_cast<size_t>(seq)], room(seq));
      if (n >= 1) chunks.push_back({seq, feed(seq, n)});
    }
    emit(std::move(chunks));
  }

  // A run of one-token decodes over `seqs` (batched steps when several): short runs first,
  // sometimes long enough to cross pages and the split threshold one token at a time.
  void decode_run(const std::vector<int>& seqs, int steps) {
    for (int i = 0; i < steps; ++i) {
      std::vector<Chunk> chunks;
      for (int seq : seqs) {
        if (room(seq) >= 1) chunks.push_back({seq, feed(seq, 1)});
      }
      if (chunks.empty()) return;
      emit(std::move(chunks));
    }
  }

  // A reset (of an empty or a running sequence, while the others keep running), sometimes
  // two or three in a row.
  void reset(int seq, int count) {
    for (int i = 0; i < count; ++i) ops_.push_back(Op::reset(seq));
    length_[static_cast<size_t>(seq)] = 0;
  }

  // A rollback of `drop` tokens (a few, as speculative decoding rejects a draft, or deep;
  // to 0 when it is more than the sequence holds).
  void truncate(int seq, int drop) {
    const int keep = std::max(0, length(seq) - drop);
    ops_.push_back(Op::truncate(seq, keep));
    length_[static_cast<size_t>(seq)] = keep;
  }

  // `dst` starts over with `src`'s tokens; nothing when there is no other sequence.
  void fork(int src, int dst) {
    if (src == dst) return;
    ops_.push_back(Op::fork(src, dst));
    length_[static_cast<size_t>(dst)] = length(src);
  }

  // A batch of one chunk is written as an append.
  void emit(std::vector<Chunk> chunks) {
    if (chunks.size() == 1) {
      ops_.push_back(Op::append(chunks[0].seq, std::move(chunks[0].tokens)));
    } else if (!chunks.empty()) {
      ops_.push_back(Op::step(std::move(chunks)));
    }
  }
};

}  // namespace

// Few steps first.
std::vector<Op> pick_program(ChoiceSource& c, const Bounds& b, const Layout& l, int sequences,
                             TokenIds& ids, const ModelChoices* model) {
  ProgramBuilder program(c, b, l, sequences, ids, model);
  if (b.long_context) program.prefill();
  const int steps = c.pick_int(1, b.steps);
  for (int i = 0; i < steps; ++i) program.add_step();
  // Attention scenarios only: at model level no choice is drawn (the same scenarios).
  if (model == nullptr) program.split_edges(pick_split_edges(c, b.sequences));
  program.reach(b.filters.min_context);
  return program.take();
}

}  // namespace kvfuzz
