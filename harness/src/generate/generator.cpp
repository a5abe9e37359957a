// The one scenario generator (generator.h), as small pieces in the style of RapidCheck's
// own generators: each piece builds one part of a scenario from a few choices.
//
// Two rules make the choices shrink well (RapidCheck's exec shrinks one choice at a time
// toward its lower bound, and replays every later choice from the same random stream):
//
//  * Simple at lo (choice_source.h, with the choice helpers that keep it), so a failure
//    shrinks toward the worked example's shape: one sequence, MHA with one head, head_dim
//    1, zero scores, f32, one page of 16, identity page order, NaN poison, no RoPE, no
//    window, few short appends. (All choices at lo give an empty program.)
//  * Fixed arity. A piece draws the same number of choices whichever way it goes (all the
//    candidates, then the one the selector names), so shrinking a selector, say a decode
//    run into an append, leaves every later choice where it was instead of shifting the
//    rest of the scenario. Choices whose number depends on the program (the program's
//    steps, a shuffled page list, explicit token values) come last.
//
//   generate_scenario
//     pick_bounds        typical sizes, now and then the options' maxima
//     pick_layout        pick_heads, pick_rope, pick_head_dim, pick_page_size, pick_dtype,
//                        pick_window, pick_scale
//     pick_token_choices zero scores, distribution, seeds, sequential or repeated ids
//     pick_placement     poison, spare pages, page order kind, a wide pool (integer_limits.h)
//     pick_model         (model level only) layers, width, ffn, spare vocabulary, seed
//     pick_program       steps: an append, a decode run, a batched step, resets, a
//                        truncate, a fork, a window run (windows_at_edges.h) (or none);
//                        each chunk length from
//                        pick_chunk_length, aimed at page, window and engine edges
//                        (GeneratorOptions::edges) by pick_edge; then now and then a
//                        batched decode run at split edges against the batch's longest
//                        row (split_edges.h)
//     resolve_pages      identity, reversed, shuffled or interleaved page list; a wide
//                        pool, reversed, in their place
//     make_tokens        generated small-int / dyadic / uniform / wide, or explicit (at
//                        model level: GeneratedTokens{0, vocab}, ids are vocabulary ids)
//     score spread       (score_spreads.h) now and then a scale that spreads scores across
//                        split partitions past f32's exp range (from the token seed)
#include "kvfuzz/generator.h"

#include <algorithm>
#include <array>
#include <cstdint>
#include <numeric>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "generate/integer_limits.h"
#include "generate/score_spreads.h"
#include "generate/split_edges.h"
#include "generate/windows_at_edges.h"
#include "kvfuzz/prng.h"
#include "scenario/limits.h"

namespace kvfuzz {

namespace {

// ---- Scale. ----

// The sizes one scenario may reach. Options are clamped to sizes far inside limits.h.
struct Bounds {
  int sequences = 1;     // the most sequences (choices are drawn for this many)
  int steps = 1;         // the most program steps
  int epoch_tokens = 1;  // per (sequence, epoch)
  int q_heads = 1;       // MHA and MQA heads; GQA may reach max_q_heads
  int max_q_heads = 1;
  int head_dim = 1;
  bool large = false;
  bool long_context = false;  // GeneratorOptions::long_context
  bool truncate = true;       // the engine's optional operations and its edges (GeneratorOptions)
  bool fork = true;
  EngineEdges edges;
  EngineSupports supports;   // its dtypes narrowed by the filters (filtered_dtypes)
  GeneratorFilters filters;  // the rest of the filters, for the pieces that draw them
};

int within(int value, int limit) {
  return limit > 0 ? std::min(value, limit) : value;
}

// The most sequences a scenario may have: the options', the filter's, 2 for long contexts.
int most_sequences(const GeneratorOptions& o) {
  int most = within(std::clamp(o.max_sequences, 1, 8), o.filters.max_sequences);
  return o.long_context ? std::min(most, 2) : most;
}

// The most tokens of one (sequence, epoch): the sizes', the engine's and the filter's cap.
int most_context(const GeneratorOptions& o) {
  // The engine's context and the filter's, whichever is tighter (0: no cap).
  const int cap = o.supports.max_context > 0 ? within(o.supports.max_context, o.filters.max_context)
                                             : o.filters.max_context;
  if (o.long_context) {
    return within(std::clamp(o.long_context->max_tokens, 1, limits::kMaxEpochTokens), cap);
  }
  return within(std::clamp(o.max_epoch_tokens, 1, 1024), cap);
}

// The largest head_dim: the options', the engine's, 16 for long contexts.
int most_head_dim(const GeneratorOptions& o) {
  const int most = within(std::clamp(o.max_head_dim, 1, 128), o.supports.max_head_dim);
  return o.long_context ? std::min(most, 16) : most;
}

Bounds pick_bounds(ChoiceSource& c, const GeneratorOptions& o) {
  Bounds b;
  b.sequences = most_sequences(o);
  b.steps = std::clamp(o.max_ops, 1, 256);
  const EngineSupports& can = o.supports;
  b.supports = can;
  b.supports.dtypes = filtered_dtypes(o);
  b.filters = o.filters;
  // An engine that always rotates (rope_required) or has no windows narrows the filters as
  // a --rope on or --window off would: the choices are drawn either way.
  if (can.rope_required) b.filters.rope = OnOff::on;
  if (!can.windows) b.filters.window = OnOff::off;
  b.max_q_heads = within(std::clamp(o.max_q_heads, 1, 32), can.max_q_heads);
  const int max_epoch = most_context(o);
  const int max_dim = most_head_dim(o);
  b.truncate = o.truncate && o.filters.ops.truncate;
  b.fork = o.fork && o.filters.ops.fork;
  b.edges = {std::max(1, o.edges.tile_keys), std::max(1, o.edges.split_threshold),
             std::max(1, o.edges.partition_keys)};
  b.large = rarely(c, o.large_one_in);
  b.epoch_tokens = b.large ? max_epoch : std::clamp(o.typical_epoch_tokens, 1, max_epoch);
  b.q_heads = b.large ? b.max_q_heads : std::clamp(o.typical_q_heads, 1, b.max_q_heads);
  b.head_dim = b.large ? max_dim : std::clamp(o.typical_head_dim, 1, max_dim);
  if (o.long_context) {
    // Few, long sequences over a small layout (generator.h, LongContextOptions): at most two
    // sequences and head_dim 16 come from most_sequences and most_head_dim.
    b.long_context = true;
    b.steps = std::min(b.steps, 8);
    b.epoch_tokens = max_epoch;
    b.max_q_heads = std::min(b.max_q_heads, 4);
    b.q_heads = std::min(b.q_heads, b.max_q_heads);
  }
  // RoPE needs head_dim 2 or more: a filter that wants it on lifts a typical bound of 1.
  if (b.filters.rope == OnOff::on) b.head_dim = std::max(b.head_dim, std::min(2, max_dim));
  // A filter's minimum context lifts a typical context below it.
  b.epoch_tokens = std::max(b.epoch_tokens, std::min(o.filters.min_context, max_epoch));
  return b;
}

// ---- Model level. ----

// One layer and the smallest width first; ffn the width first (then 2x, 4x, any size up to
// the bound); no spare vocabulary ids first. The seed picks the weights: no value of it is
// simpler than another.
struct ModelChoices {
  int layers = 1;
  int width = 4;
  int ffn = 4;
  int spare_vocab = 0;
  uint64_t seed = 0;
};

ModelChoices pick_model(ChoiceSource& c, const ModelOptions& o) {
  static constexpr std::array<int, 7> kWidths{4, 8, 16, 32, 64, 12, 24};
  const int max_width = std::clamp(o.max_width, 1, 128);
  const int max_ffn = std::clamp(o.max_ffn, 1, 512);
  ModelChoices m;
  m.layers = c.pick_int(1, std::clamp(o.max_layers, 1, 4));
  m.width = std::min(c.pick_from(kWidths), max_width);
  enum class Ffn { width, twice, four_times, any };
  const Ffn ffn = pick_weighted<Ffn>(
      c, {{Ffn::width, 2}, {Ffn::twice, 2}, {Ffn::four_times, 1}, {Ffn::any, 1}});
  const int any_ffn = c.pick_int(1, max_ffn);
  m.ffn = std::clamp(select(ffn, {{Ffn::width, m.width},
                                  {Ffn::twice, 2 * m.width},
                                  {Ffn::four_times, 4 * m.width},
                                  {Ffn::any, any_ffn}}),
                     1, max_ffn);
  const bool spare = rarely(c, 4);
  const int spare_vocab = c.pick_int(1, std::clamp(o.max_spare_vocab, 1, 64));
  m.spare_vocab = spare ? spare_vocab : 0;
  m.seed = static_cast<uint64_t>(c.pick(0, INT32_MAX));
  return m;
}

// Multiply-adds of the model for one token with a vocabulary of `vocab` (validate.cpp's
// kMaxModelWork counts the same).
int64_t model_work_per_token(const ModelChoices& m, const Layout& l, int64_t vocab) {
  const int64_t width = m.width;
  const int64_t layer = width * (int64_t{l.q_heads} * l.head_dim +
                                 int64_t{l.kv_heads} * (int64_t{l.head_dim} + l.value_dim)) +
                        int64_t{l.q_heads} * l.value_dim * width + 3 * width * m.ffn;
  return m.layers * layer + width * vocab;
}

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

// ---- Layout. ----

// MHA (kv = q heads), then GQA (at least 2 kv heads; groups 2..8, powers of two or not,
// and beyond 8 when large and max_q_heads allows), then MQA (one kv head, q >= 2).
void pick_heads(ChoiceSource& c, const Bounds& b, Layout& l) {
  enum class Heads { mha, gqa, mqa };
  const Heads kind = pick_weighted<Heads>(c, {{Heads::mha, 3}, {Heads::gqa, 5}, {Heads::mqa, 2}});
  const int max_group = std::max(2, b.large ? b.max_q_heads / 2 : std::min(8, b.max_q_heads / 2));
  const int group = c.pick_int(2, max_group);
  const int gqa_kv =
      c.pick_int(2, std::clamp(b.q_heads / group, 2, std::max(2, b.max_q_heads / group)));
  const int mqa_q = c.pick_int(std::min(2, b.q_heads), b.q_heads);
  const int mha = c.pick_int(1, std::min(4, b.q_heads));
  if (kind == Heads::gqa && gqa_kv * group <= b.max_q_heads) {
    l.kv_heads = gqa_kv;
    l.q_heads = gqa_kv * group;
  } else if (kind == Heads::mqa && mqa_q >= 2) {
    l.kv_heads = 1;
    l.q_heads = mqa_q;
  } else {
    l.q_heads = l.kv_heads = mha;
  }
}

// A drawn on/off forced the way a filter wants it (the choice is drawn either way).
bool forced(bool drawn, OnOff filter) {
  return filter == OnOff::any ? drawn : filter == OnOff::on;
}

// Off first; when on, a base from common to fast-turning.
std::optional<double> pick_rope(ChoiceSource& c, int max_dim, OnOff filter) {
  static constexpr std::array<double, 4> kThetas{10000.0, 100.0, 1e6, 2.0};
  const bool on = forced(rarely(c, 3), filter);
  const double theta = c.pick_from(kThetas);
  if (!on || max_dim < 2) return std::nullopt;
  return theta;
}

// Tiny dims first, then multiples of the vector width (8), then any size up to the bound
// (mostly not multiples of 8). Even when RoPE needs it.
int pick_head_dim(ChoiceSource& c, int max_dim, bool even) {
  enum class Dim { tiny, aligned, any };
  const Dim kind = pick_weighted<Dim>(c, {{Dim::tiny, 4}, {Dim::aligned, 2}, {Dim::any, 3}});
  const int tiny = c.pick_int(1, std::min(4, max_dim));
  const int aligned = std::min(max_dim, 8 * c.pick_int(1, std::max(1, max_dim / 8)));
  const int any = c.pick_int(1, max_dim);
  int d = select(kind, {{Dim::tiny, tiny}, {Dim::aligned, aligned}, {Dim::any, any}});
  if (even && d % 2 == 1) d = d + 1 <= max_dim ? d + 1 : d - 1;
  return d;
}

// 16 first (a small program fits one page: no boundary at all), then the sizes where every
// chunk crosses pages (1, 2, 3), then others, powers of two or not.
int pick_page_size(ChoiceSource& c) {
  static constexpr std::array<int, 12> kPageSizes{16, 1, 2, 3, 4, 8, 5, 7, 6, 12, 32, 64};
  return c.pick_from(kPageSizes);
}

// Among the dtypes the engine supports (all three: f32 first, twice as often as each other).
DType pick_dtype(ChoiceSource& c, const std::vector<DType>& supported) {
  const auto weight = [&](DType dtype, int w) {
    return std::find(supported.begin(), supported.end(), dtype) != supported.end() ? w : 0;
  };
  if (supported.empty()) return DType::f32;  // check refuses an engine that supports none
  return pick_weighted<DType>(c, {{DType::f32, weight(DType::f32, 2)},
                                  {DType::f16, weight(DType::f16, 1)},
                                  {DType::bf16, weight(DType::bf16, 1)}});
}

// A drawn head (or value) dim moved onto the engine's multiple (and onto an even one when
// RoPE needs it), at most max_dim where a multiple fits below it.
int fit_dim(int d, int max_dim, int multiple, bool even) {
  const int step = even && multiple % 2 == 1 && multiple > 1 ? 2 * multiple : std::max(1, multiple);
  if (step == 1) return d;
  const int most = std::max(step, max_dim / step * step);
  return std::clamp((d + step - 1) / step * step, step, most);
}

// Off first. On: near a page size, the engine's tile or partition, its split threshold or
// a short chunk; on it, one above or one below.
std::optional<int> pick_window(ChoiceSource& c, int page_size, const EngineEdges& edges,
                               OnOff filter) {
  enum class Near { page, two_pages, tile, partition, split_threshold, short_chunk };
  static constexpr std::array kNear{Near::page,      Near::two_pages,       Near::tile,
                                    Near::partition, Near::split_threshold, Near::short_chunk};
  const bool on = forced(rarely(c, 3), filter);
  const Near near = c.pick_from(kNear);
  const int short_chunk = c.pick_int(1, 8);
  const int offset = pick_offset(c);
  const int base = select(near, {{Near::page, page_size},
                                 {Near::two_pages, 2 * page_size},
                                 {Near::tile, edges.tile_keys},
                                 {Near::partition, edges.partition_keys},
                                 {Near::split_threshold, edges.split_threshold},
                                 {Near::short_chunk, short_chunk}});
  if (!on) return std::nullopt;
  return std::max(1, base + offset);
}

// Absent (1/sqrt(head_dim)) first; sometimes a sharper or flatter softmax.
std::optional<double> pick_scale(ChoiceSource& c) {
  static constexpr std::array<double, 4> kScales{1.0, 0.5, 0.125, 2.0};
  const bool on = rarely(c, 6);
  const double scale = c.pick_from(kScales);
  if (!on) return std::nullopt;
  return scale;
}

Layout pick_layout(ChoiceSource& c, const Bounds& b) {
  Layout l;
  pick_heads(c, b, l);
  l.rope_theta = pick_rope(c, b.head_dim, b.filters.rope);
  const int multiple = b.supports.head_dim_multiple;
  l.head_dim = fit_dim(pick_head_dim(c, b.head_dim, l.rope_theta.has_value()), b.head_dim, multiple,
                       l.rope_theta.has_value());
  const bool same_value_dim = c.pick(0, 3) < 3 || b.supports.value_dim_is_head_dim;
  const int value_dim = fit_dim(pick_head_dim(c, b.head_dim, false), b.head_dim, multiple, false);
  l.value_dim = same_value_dim ? l.head_dim : value_dim;
  l.page_size = pick_page_size(c);
  l.dtype = pick_dtype(c, b.supports.dtypes);
  l.window = pick_window(c, l.page_size, b.edges, b.filters.window);
  if (b.long_context) {
    // A long context's window may be anything up to the context: its edge far from 0.
    const bool far = c.pick_bool();
    const int far_window = c.pick_int(1, b.epoch_tokens);
    if (l.window && far) l.window = far_window;
  }
  l.scale = pick_scale(c);
  return l;
}

// ---- Token data (the choices; the table is made once the program is known). ----

enum class TokenKind { small_int, dyadic, explicit_small_int, uniform, wide };

// Zero scores first (q = k = 0: every row is a plain mean, every bug a clean one). Then
// exact data (small integers, dyadic fractions, explicit small integers), sometimes
// uniform (rounded in f16/bf16) or wide dynamic range. Token ids: sequential first (every
// appended token is a new table entry, so every position of every sequence has its own
// q/k/v and a row that sees a wrong key changes); sometimes drawn from a small table (the
// same token at several positions).
struct TokenChoices {
  bool zero_scores = true;
  TokenKind kind = TokenKind::small_int;
  uint64_t seed = 0;
  int table = 0;  // 0: sequential ids
  uint64_t id_seed = 0;
};

TokenChoices pick_token_choices(ChoiceSource& c) {
  TokenChoices t;
  t.zero_scores = c.pick(0, 3) == 0;
  t.kind = pick_weighted<TokenKind>(c, {{TokenKind::small_int, 4},
                                        {TokenKind::dyadic, 3},
                                        {TokenKind::explicit_small_int, 1},
                                        {TokenKind::uniform, 1},
                                        {TokenKind::wide, 1}});
  t.seed = static_cast<uint64_t>(c.pick(0, INT32_MAX));
  const bool repeated = rarely(c, 4);
  const int table = c.pick_int(1, 32);
  t.table = repeated ? table : 0;
  t.id_seed = static_cast<uint64_t>(c.pick(0, INT32_MAX));
  return t;
}

// Hands out token ids: sequential, or from the small table in a stream of its own (one
// choice, its seed, so that the number of tokens never shifts later choices).
class TokenIds {
 public:
  explicit TokenIds(const TokenChoices& t) : table_(t.table), rng_(t.id_seed) {}
  std::vector<int> take(int n) {
    std::vector<int> ids(static_cast<size_t>(n));
    for (int& id : ids) {
      id = table_ > 0 ? static_cast<int>(rng_.below(static_cast<uint64_t>(table_))) : next_++;
    }
    return ids;
  }
  int count() const { return table_ > 0 ? table_ : std::max(1, next_); }

 private:
  int table_;
  int next_ = 0;
  Xoshiro256 rng_;
};

// ---- Program. ----

// The edges chunks are aimed at, as periods in absolute position: page boundaries, the
// window (where it starts to slide), the engine's split threshold, partitions and tiles.
struct Aim {
  int page_size = 16;
  std::optional<int> window;
  EngineEdges edges;
};

// An absolute position on, one after or one before an edge past `cached`: the next edge or
// the one after it, so chunks both end on an edge and straddle one. The next chunk starts
// where this one ends, so chunks also start on, one before and one after edges.
int pick_edge(ChoiceSource& c, const Aim& aim, int cached) {
  const std::array<int, 5> periods{aim.page_size, aim.window.value_or(aim.page_size),
                                   aim.edges.split_threshold, aim.edges.partition_keys,
                                   aim.edges.tile_keys};
  const int period = c.pick_from(periods);
  const int edge = (cached / period + 1 + c.pick_int(0, 1)) * period;
  return edge + pick_offset(c);
}

// The length of the next chunk of a sequence holding `cached` tokens with `room` left:
// short chunks and decodes first, then chunks that end at an edge, mid-size chunks, and
// single large chunks up to the whole room. At least 1; at most room when room >= 1.
int pick_chunk_length(ChoiceSource& c, const Aim& aim, int cached, int room) {
  enum class Length { short_chunk, to_edge, mid, whole };
  const Length kind = pick_weighted<Length>(
      c, {{Length::short_chunk, 3}, {Length::to_edge, 4}, {Length::mid, 2}, {Length::whole, 1}});
  const int short_chunk = c.pick_int(1, 4);
  const int to_edge = pick_edge(c, aim, cached) - cached;
  const int mid = c.pick_int(1, 16);
  const int whole = c.pick_int(1, std::max(1, room));
  return std::clamp(select(kind, {{Length::short_chunk, short_chunk},
                                  {Length::to_edge, to_edge},
                                  {Length::mid, mid},
                                  {Length::whole, whole}}),
                    1, std::max(1, room));
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

// ---- Token table. ----

// Explicit tables only while they stay small (this many numbers).
constexpr int64_t kMaxExplicitNumbers = 1024;

std::vector<std::vector<double>> small_ints(ChoiceSource& c, int heads, int dim, bool zero) {
  std::vector<std::vector<double>> out(static_cast<size_t>(heads),
                                       std::vector<double>(static_cast<size_t>(dim), 0.0));
  if (zero) return out;
  for (auto& head : out) {
    for (double& x : head) x = zigzag(c.pick(0, 8));  // integers in [-4, 4], 0 first
  }
  return out;
}

TokenSource make_tokens(ChoiceSource& c, const TokenChoices& t, const Layout& l, int count) {
  const int64_t numbers = int64_t{count} * (int64_t{l.q_heads} * l.head_dim +
                                            int64_t{l.kv_heads} * (l.head_dim + l.value_dim));
  if (t.kind == TokenKind::explicit_small_int && numbers <= kMaxExplicitNumbers) {
    std::vector<ExplicitToken> tokens(static_cast<size_t>(count));
    for (ExplicitToken& token : tokens) {
      token.q = small_ints(c, l.q_heads, l.head_dim, t.zero_scores);
      token.k = small_ints(c, l.kv_heads, l.head_dim, t.zero_scores);
      token.v = small_ints(c, l.kv_heads, l.value_dim, false);
    }
    return tokens;
  }
  GeneratedTokens generated;
  generated.seed = t.seed;
  generated.count = count;
  // Explicit small integers too many to write out are generated small integers.
  generated.distribution = select<TokenKind, Distribution>(
      t.kind, {{TokenKind::small_int, Distribution::small_int},
               {TokenKind::dyadic, Distribution::dyadic},
               {TokenKind::explicit_small_int, Distribution::small_int},
               {TokenKind::uniform, Distribution::uniform},
               {TokenKind::wide, Distribution::wide}});
  generated.zero_scores = t.zero_scores;
  return generated;
}

// ---- Placement. ----

enum class OrderKind { identity, reversed, shuffled, interleaved };

// NaN poison first; no spare pages first (sometimes a few that nobody is handed, still
// poisoned); identity order first, then reversed, shuffled and interleaved.
struct PlacementChoices {
  Poison poison = Poison::nan;
  int spare = 0;
  OrderKind order = OrderKind::identity;
  WidePoolChoices wide;  // integer_limits.h: sometimes a pool past 2^8, 2^15 or 2^16 pages
};

PlacementChoices pick_placement(ChoiceSource& c, bool model_level) {
  PlacementChoices p;
  static constexpr std::array kPoisons{Poison::nan, Poison::pos_inf, Poison::neg_inf, Poison::huge};
  p.poison = c.pick_from(kPoisons);
  const bool spare = rarely(c, 4);
  const int pages = c.pick_int(1, 4);
  p.spare = spare ? pages : 0;
  p.order = pick_weighted<OrderKind>(c, {{OrderKind::identity, 3},
                                         {OrderKind::reversed, 2},
                                         {OrderKind::shuffled, 2},
                                         {OrderKind::interleaved, 2}});
  // Not at model level (yet): there no choice is drawn for it, so model scenarios stay as
  // they were.
  if (!model_level) p.wide = pick_wide_pool(c);
  return p;
}

// Fisher-Yates with the swap partner counted back from i: the low end swaps nothing, so a
// shuffle shrinks toward identity.
std::vector<int> shuffled_pages(ChoiceSource& c, int pool) {
  std::vector<int> pages(static_cast<size_t>(pool));
  std::iota(pages.begin(), pages.end(), 0);
  for (int i = pool - 1; i > 0; --i) {
    std::swap(pages[static_cast<size_t>(i)], pages[static_cast<size_t>(i - c.pick_int(0, i))]);
  }
  return pages;
}

// The entries of a page-order list of `pool` entries, grouped by the sequence that first
// takes them when a paged engine runs the program, in the order it takes them; the last
// group holds the entries nobody takes. It replays kernels/cpu/page_pool.cpp: the chunks of a
// step reserve pages in order, a sequence takes a new page when it grows past its last one,
// a reset or truncate puts pages nobody else holds back at the front of the free list
// (reused before fresh ones), and a fork shares the source's pages but copies a partial one.
std::vector<std::vector<int>> first_takers(const Scenario& s, int pool) {
  const auto sequences = static_cast<size_t>(s.sequences);
  const int64_t page = s.layout.page_size;
  std::vector<int> free_list(static_cast<size_t>(pool));  // back: the next one handed out
  for (int i = 0; i < pool; ++i) free_list[static_cast<size_t>(i)] = pool - 1 - i;
  std::vector<std::vector<int>> held(sequences), groups(sequences + 1);
  std::vector<int64_t> length(sequences, 0);
  std::vector<bool> taken(static_cast<size_t>(pool), false);
  // Pages back to the front of the free list once no sequence holds them (fork shares).
  const auto release = [&](size_t seq, size_t keep_pages) {
    auto& pages = held[seq];
    for (size_t i = pages.size(); i > keep_pages; --i) {
      const int entry = pages[i - 1];
      pages.pop_back();
      const bool shared = std::any_of(held.begin(), held.end(), [&](const std::vector<int>& h) {
        return std::find(h.begin(), h.end(), entry) != h.end();
      });
      if (!shared) free_list.push_back(entry);
    }
  };
  const auto take = [&](size_t seq) {
    const int entry = free_list.back();
    free_list.pop_back();
    held[seq].push_back(entry);
    if (!taken[static_cast<size_t>(entry)]) groups[seq].push_back(entry);
    taken[static_cast<size_t>(entry)] = true;
  };
  for (const Op& op : s.program) {
    const auto target = static_cast<size_t>(op.seq);
    if (op.kind == OpKind::reset) {
      release(target, 0);
      length[target] = 0;
    } else if (op.kind == OpKind::truncate) {
      release(target, static_cast<size_t>((op.keep + page - 1) / page));
      length[target] = op.keep;
    } else if (op.kind == OpKind::fork) {
      const auto src = static_cast<size_t>(op.src);
      release(target, 0);
      length[target] = length[src];
      held[target] = held[src];
      if (length[src] % page != 0 && !held[target].empty()) {  // the partial page is copied
        held[target].pop_back();
        if (!free_list.empty()) take(target);
      }
    }
    for (const Chunk& chunk : op.batch()) {
      const auto seq = static_cast<size_t>(chunk.seq);
      length[seq] += static_cast<int64_t>(chunk.tokens.size());
      while (static_cast<int64_t>(held[seq].size()) * page < length[seq] && !free_list.empty()) {
        take(seq);
      }
    }
  }
  for (int entry = 0; entry < pool; ++entry) {
    if (!taken[static_cast<size_t>(entry)]) groups[sequences].push_back(entry);
  }
  return groups;
}

}  // namespace

// Interleaved between sequences: an explicit list in which physically consecutive pages
// alternate between the sequences (and the pages nobody takes). Physical page 0 becomes
// the first page sequence 0 takes, page 1 the first page of the next sequence that takes
// one, ..., then every sequence's second page, and so on: the list entry that sequence s
// takes as its k-th new page holds physical page (round k, lane s). A kernel that assumes
// a sequence's pages are physically contiguous (first page + logical index) then reads a
// neighbour's K/V or poison. With fewer than two sequences taking pages, the pool grows so
// that unused pages alternate with the one sequence's pages.
std::vector<int> interleaved_page_order(const Scenario& s, int pool) {
  auto groups = first_takers(s, pool);
  const auto busy = std::count_if(groups.begin(), groups.end() - 1,
                                  [](const std::vector<int>& g) { return !g.empty(); });
  if (busy < 2) {
    size_t owned = 0;
    for (auto g = groups.begin(); g != groups.end() - 1; ++g) owned += g->size();
    const int wanted = static_cast<int>(2 * owned) - 1;
    if (wanted > pool) groups = first_takers(s, pool = wanted);
  }
  std::vector<int> pages(static_cast<size_t>(pool));
  int physical = 0;
  for (size_t round = 0; physical < pool; ++round) {
    for (const auto& group : groups) {
      if (round < group.size()) pages[static_cast<size_t>(group[round])] = physical++;
    }
  }
  return pages;
}

namespace {

Placement resolve_pages(ChoiceSource& c, const PlacementChoices& choices, const Scenario& s) {
  Placement p;
  p.poison = choices.poison;
  const int pool = required_pool_pages(s) + choices.spare;
  switch (choices.order) {
    case OrderKind::identity:
    case OrderKind::reversed:
      p.order = choices.order == OrderKind::identity ? PageOrder::identity : PageOrder::reversed;
      if (choices.spare > 0) p.pool_pages = pool;
      break;
    case OrderKind::shuffled:
      p.order = PageOrder::explicit_list;
      p.pages = shuffled_pages(c, pool);
      break;
    case OrderKind::interleaved:
      p.order = PageOrder::explicit_list;
      p.pages = interleaved_page_order(s, pool);
  }
  apply_wide_pool(choices.wide, s, p);
  return p;
}

}  // namespace

// At model level every token of the program is a vocabulary id (limits::kMaxModelVocab);
// a minimum context must leave room for the others.
constexpr int kMostModelContext = 1024;

std::vector<DType> filtered_dtypes(const GeneratorOptions& o) {
  std::vector<DType> dtypes = o.supports.dtypes;
  const std::vector<DType>& wanted = o.filters.dtypes;
  if (wanted.empty()) return dtypes;
  std::erase_if(
      dtypes, [&](DType d) { return std::find(wanted.begin(), wanted.end(), d) == wanted.end(); });
  return dtypes;
}

std::optional<FilterConflict> filter_conflict(const GeneratorOptions& o) {
  using Filter = FilterConflict::Filter;
  const GeneratorFilters& f = o.filters;
  const auto names = [](const std::vector<DType>& dtypes) {
    std::string out;
    for (DType d : dtypes) out += (out.empty() ? "" : ", ") + std::string(dtype_name(d));
    return out;
  };
  if (!f.dtypes.empty() && filtered_dtypes(o).empty()) {
    return FilterConflict{Filter::dtypes, "expected a supported storage dtype (" +
                                              names(o.supports.dtypes) + "), got " +
                                              names(f.dtypes)};
  }
  if (o.supports.rope_required && f.rope == OnOff::off) {
    return FilterConflict{Filter::rope,
                          "expected RoPE on or any (the engine supports only "
                          "RoPE layouts), got off"};
  }
  if (!o.supports.windows && f.window == OnOff::on) {
    return FilterConflict{Filter::window,
                          "expected windows off or any (the engine supports "
                          "no windows), got on"};
  }
  if ((f.rope == OnOff::on || o.supports.rope_required) && most_head_dim(o) < 2) {
    return FilterConflict{Filter::rope,
                          "expected head_dim of at least 2 for RoPE, but head_dim "
                          "is at most 1 here"};
  }
  if (f.min_sequences < 1 || f.max_sequences < 0) {
    return FilterConflict{Filter::sequences, "expected at least 1 sequence"};
  }
  if (f.min_sequences > most_sequences(o)) {
    return FilterConflict{Filter::sequences,
                          "expected at most " + std::to_string(most_sequences(o)) +
                              " sequences here (8 at most, 2 with long contexts), got at least " +
                              std::to_string(f.min_sequences)};
  }
  if (f.max_context < 0) {
    return FilterConflict{Filter::max_context, "expected a positive number of tokens"};
  }
  if (f.min_context > most_context(o)) {
    return FilterConflict{Filter::min_context,
                          "expected at most " + std::to_string(most_context(o)) +
                              " tokens (the most one epoch may hold with these sizes and "
                              "supports), got " +
                              std::to_string(f.min_context)};
  }
  if (o.model && f.min_context > kMostModelContext) {
    return FilterConflict{Filter::min_context,
                          "expected at most " + std::to_string(kMostModelContext) +
                              " tokens at model level, got " + std::to_string(f.min_context)};
  }
  return std::nullopt;
}

Scenario generate_scenario(ChoiceSource& c, const GeneratorOptions& options) {
  if (const auto conflict = filter_conflict(options)) {
    throw std::invalid_argument("generate_scenario: filters that cannot be met: " +
                                conflict->message);
  }
  Scenario s;
  s.name = "generated";
  s.provenance.source = "check";
  const Bounds bounds = pick_bounds(c, options);
  s.layout = pick_layout(c, bounds);
  s.sequences = c.pick_int(std::max(1, options.filters.min_sequences), bounds.sequences);
  const TokenChoices token_choices = pick_token_choices(c);
  const PlacementChoices placement_choices = pick_placement(c, options.model.has_value());
  // Only at model level: without the option no choice is drawn (the same scenarios).
  std::optional<ModelChoices> model;
  if (options.model) model = pick_model(c, *options.model);
  // From here on the number of choices depends on the program.
  TokenIds ids(token_choices);
  s.program = pick_program(c, bounds, s.layout, s.sequences, ids, model ? &*model : nullptr);
  s.placement = resolve_pages(c, placement_choices, s);
  if (model) {
    // The ids handed out are vocabulary ids (sequential: every token a new word; from a
    // small table: repeated words); the vocabulary holds them and the spare ids.
    const int vocab = std::min(ids.count() + model->spare_vocab, limits::kMaxModelVocab);
    s.model = ModelConfig{vocab, model->width, model->layers, model->ffn, model->seed};
    s.tokens = GeneratedTokens{0, vocab, Distribution::small_int, false};
  } else {
    s.tokens = make_tokens(c, token_choices, s.layout, ids.count());
  }
  // From the token seed, drawn already: a scenario without a score spread is as before. Not
  // for long contexts: their RoPE rows at thousands of positions would get bounds as large
  // as their values (unjudged rows).
  if (!options.long_context) apply_score_spread(score_spread_from_seed(token_choices.seed), s);
  if (const auto error = validate(s)) {
    throw std::logic_error("generate_scenario built an invalid scenario: " + error->path +
                           ": expected " + error->message);
  }
  return s;
}

uint64_t case_seed(uint64_t run_seed, int index) {
  uint64_t state = run_seed ^ (0x9E3779B97F4A7C15ull * static_cast<uint64_t>(index + 1));
  return splitmix64(state);
}

}  // namespace kvfuzz
