// The one scenario generator (docs/architecture.md, "Generate"), written once against ChoiceSource.
// A PRNG drives it for `kvfuzz check`, RapidCheck drives it inside rc::gen::exec for the properties
// (integrated shrinking: choices shrink toward their lower bound), libFuzzer drives it
// through FuzzedDataProvider. Every scenario it returns passes validate().
//
// It aims at the corners where cached-attention bugs live: chunks that start or end on,
// one before and one after a page boundary, a window edge and the engine's edges (tile,
// partition, split threshold: EngineEdges); runs of one-token decodes; batched steps over
// sequences with different cached lengths; MHA, GQA (groups 2..8 and beyond, not only
// powers of two) and MQA; head_dim 1..128; page sizes 1, 2, 3, 16 and others; identity,
// reversed, shuffled and interleaved page orders; every poison; RoPE and windows on and
// off; exact token data by default, wide dynamic range sometimes; resets of empty and
// non-empty sequences; now and then a wide pool handed out high pages first, its first
// page past 2^8, 2^15 or 2^16 (generate/integer_limits.h), and windowed runs of a chunk at
// the window's length and decodes that slide the window past it (generate/windows_at_edges.h).
//
// Simple at lo (choice_source.h): MHA before GQA, head_dim 1 first, one sequence, few
// short ops, identity page order, NaN poison, zero scores, f32, no RoPE, no window, so that
// shrinking the choices shrinks the scenario.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kvfuzz/choice_source.h"
#include "kvfuzz/engine.h"
#include "kvfuzz/scenario.h"

namespace kvfuzz {

// Model level (Scenario::model): the maxima of the small transformer drawn around the
// attention. Clamped to sizes far inside limits.h (layers 4, width 128, ffn 512, 64 spare
// vocabulary ids), and the program shrinks to keep a model's work small.
struct ModelOptions {
  int max_layers = 3;
  int max_width = 64;  // widths come from a few sizes, 4 first
  int max_ffn = 128;
  int max_spare_vocab = 16;  // vocabulary ids no token of the program uses
};

// Long contexts: contexts of thousands of tokens, as real requests have, where the default
// sizes stop at a few hundred. Few sequences (at most two), a small layout (at most 4 q
// heads, head_dim and value_dim at most 16, so that q/k/v and rows of the whole program stay
// within 2^22 numbers, 16 MiB), a first prefill of up to max_tokens per sequence (0 at the
// low end), decode runs up to max_tokens long, and windows up to max_tokens, so that the
// edges of the window, the pages and the split path lie far from position 0. With the
// largest layout the program holds at least 2^22 / 192 = 21,845 tokens.
struct LongContextOptions {
  int max_tokens = 8192;  // per (sequence, epoch); clamped to 1..limits' kMaxEpochTokens (16384)
};

// The lengths where an engine changes what it does, which the generator aims context,
// chunk and window lengths at (on, one before and one after each) and the cache-state
// events count against. The defaults are the built-in flash engine's
// (kernels/cpu/flash_constants.h); an engine with other tiles or another split path sets
// its own. Values below 1 count as 1.
struct EngineEdges {
  // Keys an engine processes as one tile: contexts and chunks that end inside a tile, on
  // its boundary and one past it.
  int tile_keys = 8;
  // A one-token decode that sees at least this many keys takes another path (split-K):
  // decodes one below, at and one above it.
  int split_threshold = 32;
  // Keys per partition of that split path: contexts that end on a partition boundary,
  // one before and one after it.
  int partition_keys = 16;
};

// A layout feature a filter wants on, off, or either way (GeneratorFilters).
enum class OnOff { any, on, off };

// The operations beside appends that a program may hold (GeneratorFilters::ops).
struct AllowedOps {
  bool truncate = true;
  bool fork = true;
  bool reset = true;
  bool batch = true;  // steps over more than one sequence: batched chunks and batched decodes
};

// Attention features (Layout::softcap, sinks, alibi, chunked_local) by name: the ones a
// filter wants on in every scenario (GeneratorFilters::features).
struct FeatureSet {
  bool softcap = false;
  bool sinks = false;
  bool alibi = false;
  bool chunked_local = false;
  bool value_from_key = false;
  bool rope_interleaved = false;  // RoPE on, in interleaved pairs (Layout::rope_style)
  bool rope_dims = false;         // RoPE on, on part of the head only (Layout::rope_dims)
  bool any() const {
    return softcap || sinks || alibi || chunked_local || value_from_key || rope_interleaved ||
           rope_dims;
  }
  bool operator==(const FeatureSet&) const = default;
};

// Each attention feature once: its name (the layout's field, the supports' field, what
// --feature takes), the FeatureSet member that asks for it and the EngineSupports member
// that declares it.
struct FeatureName {
  std::string_view name;
  bool FeatureSet::*wanted;
  bool EngineSupports::*supported;
};
inline constexpr std::array<FeatureName, 7> kFeatureNames{{
    {"softcap", &FeatureSet::softcap, &EngineSupports::softcap},
    {"sinks", &FeatureSet::sinks, &EngineSupports::sinks},
    {"alibi", &FeatureSet::alibi, &EngineSupports::alibi},
    {"chunked_local", &FeatureSet::chunked_local, &EngineSupports::chunked_local},
    {"value_from_key", &FeatureSet::value_from_key, &EngineSupports::value_from_key},
    {"rope_interleaved", &FeatureSet::rope_interleaved, &EngineSupports::rope_interleaved},
    {"rope_dims", &FeatureSet::rope_dims, &EngineSupports::rope_dims},
}};

// Focusing a run (kvfuzz check's filters, docs/filters.md): every scenario satisfies them.
// They narrow what the engine's declared supports (GeneratorOptions::supports) and its
// optional operations already allow, and they act where the generator draws: the choice is
// still drawn and then forced (a window drawn off is on when the filter wants it on), never
// rejected and redrawn, so one choice source still gives one scenario and a case seed with
// the same filters gives the same case. The defaults filter nothing: the same scenarios,
// choice for choice, as without them.
struct GeneratorFilters {
  std::vector<DType> dtypes;  // storage dtypes; empty: every one the engine supports
  OnOff window = OnOff::any;
  OnOff rope = OnOff::any;
  AllowedOps ops;
  int min_sequences = 1;
  int max_sequences = 0;  // 0: GeneratorOptions::max_sequences
  int max_context = 0;    // tokens per (sequence, epoch), long contexts included; 0: no cap
  // Some (sequence, epoch) holds at least this many tokens (0: no minimum): when the drawn
  // program reaches none, one more append brings the longest epoch to it.
  int min_context = 0;
  // Features every scenario has (each drawn and then forced on, as the window filter does);
  // the engine must declare each (EngineSupports).
  FeatureSet features;
  // Quantized KV formats (kvfuzz/kv_format.h): when not empty, every scenario stores K and
  // V quantized, each in one of these (drawn among them, as the generator draws formats;
  // an affine one stores both K and V); the engine must declare each
  // (EngineSupports::kv_fp8, kv_ggml_blocks, kv_affine).
  std::vector<KvQuant> kv_formats;
};

struct GeneratorOptions {
  int max_sequences = 4;
  int max_ops = 12;            // program steps: an op, a run of decodes or a run of resets
  int max_epoch_tokens = 160;  // enough to cross the default split threshold and pages
  int max_head_dim = 128;
  int max_q_heads = 16;
  // Most scenarios stay at these sizes (the property suites run many cases under ASan);
  // about one in `large_one_in` may grow to the maxima above.
  int typical_epoch_tokens = 64;
  int typical_head_dim = 32;
  int typical_q_heads = 8;
  int large_one_in = 8;
  // The optional operations the engine under test announces (probe_capabilities): a step
  // that would truncate or fork appends instead when the engine cannot. The choices drawn
  // stay the same, so shrinking behaves alike either way.
  bool truncate = true;
  bool fork = true;
  // The edges of the engine under test.
  EngineEdges edges;
  // What the engine under test can be given (Engine::supports): storage dtypes, head_dim
  // multiples and maxima, q heads, context. Every scenario lies inside it; with the
  // defaults (everything) the choices are the same as without it.
  EngineSupports supports;
  // When set, every scenario is a model scenario: it also draws a ModelConfig (one layer
  // and the smallest width at the low end), its token ids are vocabulary ids and its token
  // source the canonical GeneratedTokens{0, vocab}. Unset, no choice is drawn for it: the
  // scenarios are the same as without the option.
  std::optional<ModelOptions> model;
  // When set, every scenario is a long-context scenario (LongContextOptions above), and the
  // sizes above give way to its own. Unset, no choice is drawn for it: the scenarios are
  // the same as without the option.
  std::optional<LongContextOptions> long_context;
  // Filters from the command line (GeneratorFilters above), applied after `supports`.
  GeneratorFilters filters;
  // The largest scaled score a score spread aims at, as a power of two (score_spreads.h
  // draws 2^12, 2^14 or 2^16). An engine that rounds its scores to f16
  // (score_accumulation f16) is given 15: f16 holds nothing above 65504, and a spread the
  // engine cannot represent would fail it for its dtype's range, not for its cache.
  int max_score_spread_log2 = 16;
};

// Why `options.filters` cannot be met (no dtype in common with the supports, RoPE with
// head_dim bound below 2, more sequences or a longer minimum context than the sizes
// allow), naming the filter; nullopt
// when they can. generate_scenario throws std::invalid_argument with it.
struct FilterConflict {
  enum class Filter {
    dtypes,
    rope,
    window,
    sequences,
    max_context,
    min_context,
    features,
    kv_formats
  };
  Filter filter;
  std::string message;  // "expected ..., got ..." without the filter's name
};
std::optional<FilterConflict> filter_conflict(const GeneratorOptions& options);

// The storage dtypes scenarios may have: the supports' dtypes, those of the filter only
// when it names some (in the supports' order).
std::vector<DType> filtered_dtypes(const GeneratorOptions& options);

Scenario generate_scenario(ChoiceSource& choices, const GeneratorOptions& options = {});

// The seed of case `index` (from 0) of a run seeded with `run_seed`: `kvfuzz check` and the
// CMake package's property tests draw case i from PrngChoiceSource(case_seed(seed, i)), and
// a saved failing case records it, so either reproduces the other's cases.
uint64_t case_seed(uint64_t run_seed, int index);

// The interleaved page order the generator uses: an explicit list of at least `pool` pages
// in which physically consecutive pages alternate between the sequences' pages, in the
// order the paged engines take them (see interleaved_pages.cpp). Longer than `pool` when fewer
// than two sequences take pages: unused pages then alternate with the one sequence's.
std::vector<int> interleaved_page_order(const Scenario& scenario, int pool);

}  // namespace kvfuzz
