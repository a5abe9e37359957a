// Every built-in engine, honest ones first, then the mutants, in a fixed order.
#include <algorithm>
#include <memory>
#include <string_view>

#include "cpu/contiguous_engine.h"
#include "cpu/flash_engine.h"
#include "cpu/numerics_profiles.h"
#include "cpu/paged_engine.h"
#include "cuda/engine/cuda_engine.h"
#include "kvfuzz/engine.h"
#include "model/engines/model_engines.h"
#include "mutants/mutants.h"

namespace kvfuzz {

namespace {

template <class E>
std::unique_ptr<Engine> make(const EngineConfig& config) {
  return std::make_unique<E>(config);
}

// An honest engine computing with one of numerics_profiles().
template <class E>
EngineFactory make_with(std::string_view profile) {
  const cpu::NumericsProfile& numerics = cpu::numerics_profile(profile);
  return [&numerics](const EngineConfig& config) {
    return cpu::with_numerics(std::make_unique<E>(config), numerics);
  };
}

// The flash engine with a split count fixed by something other than the row's context.
template <cpu::SplitCount Count>
std::unique_ptr<Engine> make_split(const EngineConfig& config) {
  return std::make_unique<cpu::FlashEngine>(config, cpu::FlashSplit{.count = Count});
}

// ... and computing with one of numerics_profiles().
template <cpu::SplitCount Count>
EngineFactory make_split_with(std::string_view profile) {
  const cpu::NumericsProfile& numerics = cpu::numerics_profile(profile);
  return [&numerics](const EngineConfig& config) {
    return cpu::with_numerics(make_split<Count>(config), numerics);
  };
}

// A CUDA engine with one of cuda_engine.h's option sets.
template <cuda::CudaEngineOptions (*Options)()>
std::unique_ptr<Engine> make_cuda(const EngineConfig& config) {
  return std::make_unique<cuda::CudaEngine>(config, Options());
}

std::vector<EngineInfo> build_registry() {
  return {
      {"contiguous",
       "Per-sequence growing K/V buffers with a separate position counter; single-pass "
       "attention.",
       false, make<cpu::ContiguousEngine>},
      {"paged",
       "Paged K/V pool with block tables, reference-counted pages shared by fork and "
       "copy-on-write, poisoned free slots; single-pass attention over the valid slots.",
       false, make<cpu::PagedEngine>},
      {"flash",
       "Paged K/V read in tiles with online softmax; split-K decode merged by log-sum-exp for "
       "long contexts.",
       false, make<cpu::FlashEngine>},
      {"flash-bf16",
       "Flash engine computing as FlashAttention-2 does with bf16 inputs: bf16 K/V, P rounded "
       "to bf16 before P.V, f32 sums, rows rounded to bf16 (bf16 scenarios only).",
       false, make_with<cpu::FlashEngine>("bf16")},
      {"flash-f16",
       "Flash engine computing as FlashAttention-2 does with f16 inputs: f16 K/V, P rounded to "
       "f16 before P.V, f32 sums, rows rounded to f16 (f16 scenarios only).",
       false, make_with<cpu::FlashEngine>("f16")},
      {"contiguous-f16acc",
       "Contiguous engine summing P.V in f16 over runs of 4 keys, merged in f32, rows rounded "
       "to f16, as half-precision decode kernels do (f16 scenarios only).",
       false, make_with<cpu::ContiguousEngine>("f16acc")},
      {"flash-batch-split",
       "Flash engine whose split decode takes as many partitions as the batch's longest decode "
       "needs (shorter rows get empty ones, rows below the threshold split with a long "
       "neighbour), as vLLM-style decode kernels do.",
       false, make_split<cpu::SplitCount::batch_longest>},
      {"flash-fixed-split",
       "Flash engine whose split decode always takes 4 splits of the batch's longest decode "
       "context, rounded up to whole tiles (short rows get empty ones), as FlashDecoding's "
       "num_splits does.",
       false, make_split<cpu::SplitCount::fixed>},
      {"flash-split-bf16",
       "flash-fixed-split computing as FlashAttention-2's split-KV forward does with bf16 "
       "inputs: P rounded to bf16, each split's output normalised in f32 with its f32 "
       "log-sum-exp, combined by weights exp(lse_s - lse), rows rounded to bf16 (bf16 "
       "scenarios only).",
       false, make_split_with<cpu::SplitCount::fixed>("bf16-lse")},
      {"flash-f16-merge",
       "Flash engine whose split decode stores each partition's normalised output in f16 and "
       "merges them by their f32 log-sum-exps, as FlashInfer's merge_states and vLLM's "
       "merge_attn_states do; P rounded to f16, rows rounded to f16 (f16 scenarios only).",
       false, make_with<cpu::FlashEngine>("f16-merge")},
      {"paged-f16-normalised",
       "Paged engine normalising P before rounding it, as vLLM's paged attention kernel and "
       "ONNX Runtime's Attention in f16 do: P = exp(s - m) / (sum + 1e-6) rounded to f16, f32 "
       "sums, rows rounded to f16 (f16 scenarios only).",
       false, make_with<cpu::PagedEngine>("f16-normalised")},
      {"flash-bf16-rope-tables",
       "flash-bf16 rotating as HF transformers does in a bf16 model: RoPE's cos/sin tables "
       "cast to bf16, products and sums rounded to bf16, so rotated q and k are bf16; P "
       "rounded to bf16, rows rounded to bf16 (bf16 scenarios only).",
       false, make_with<cpu::FlashEngine>("bf16-rope-tables")},
      {"cuda-paged",
       "CUDA kernels (paged decode split-K merged by log-sum-exp, chunked prefill over block "
       "tables) on a device pool, run on the SIMT launcher without a GPU: f32 sums and rows, "
       "any storage dtype.",
       false, make_cuda<cuda::cuda_f32_options>},
      {"cuda-paged-bf16",
       "cuda-paged computing as FlashAttention-2 does with bf16 inputs: bf16 K/V, P rounded to "
       "bf16 before P.V, f32 sums, rows rounded to bf16 (bf16 scenarios only).",
       false, make_cuda<cuda::cuda_bf16_options>},
      {"mask-origin",
       "Paged engine whose causal mask restarts at the chunk: chunk row r sees positions [0, r].",
       true, mutants::make_mask_origin},
      {"stale-position",
       "Contiguous engine whose reset keeps the position counter, so the next request's "
       "positions continue from the old length.",
       true, mutants::make_stale_position},
      {"stale-kv",
       "Contiguous engine whose reset keeps the K/V buffer, so the next request also attends "
       "to the old request's keys.",
       true, mutants::make_stale_kv},
      {"page-tail-read",
       "Paged engine whose decode path reads to the end of the last page, poisoned tail "
       "included.",
       true, mutants::make_page_tail_read},
      {"wrong-kv-head",
       "Flash engine mapping q head h to kv head h % kv_heads instead of h / group (wrong "
       "under GQA).",
       true, mutants::make_wrong_kv_head},
      {"truncate-keeps-position",
       "Contiguous engine whose truncate shrinks the K/V buffer but keeps the position counter, "
       "so the next token is reported (and rotated) at the old length.",
       true, mutants::make_truncate_keeps_position},
      {"fork-restarts-positions",
       "Paged engine whose fork keeps the parent's pages but restarts the child's positions at "
       "0, so the child's tokens overwrite the prefix and see only each other.",
       true, mutants::make_fork_restarts_positions},
      {"truncate-shared-in-place",
       "Paged engine whose truncate poisons the dropped slots of a page a fork still shares, "
       "in place instead of in a copy, so the other holder loses its tokens.",
       true, mutants::make_truncate_shared_in_place},
      {"split-merge-first-max",
       "Flash engine whose split decode merges partitions relative to the first partition's "
       "max instead of the largest: exp overflows when a later partition's scores are far "
       "higher.",
       true, mutants::make_split_merge_first_max},
      {"split-edge-nan",
       "flash-batch-split whose merge skips the partitions past a shorter row's keys off by "
       "one: the empty partition right after a row ending on a partition edge gives 0 / 0.",
       true, mutants::make_split_edge_nan},
      {"block-table-u8",
       "Paged engine whose attention kernel keeps block-table entries in uint8_t, so a "
       "physical page past 255 is read as page mod 256.",
       true, mutants::make_block_table_u8},
      {"slot-offset-u16",
       "Paged engine whose attention kernel computes a key's physical slot in uint16_t, so a "
       "slot past 65535 is read at slot mod 65536.",
       true, mutants::make_slot_offset_u16},
      {"slot-mapping-i16",
       "Paged engine whose cache write keeps the slot mapping in int16_t and skips a negative "
       "(padding) slot, so tokens stored at slots 32768..65535 are never written.",
       true, mutants::make_slot_mapping_i16},
      {"window-evicts-early",
       "Paged engine whose decode path drops the page holding the window's first key once "
       "only its last slot is still visible, one token early.",
       true, mutants::make_window_evicts_early},
      {"reset-keeps-block-table",
       "Paged engine whose reset frees the sequence's pages but leaves them in its block "
       "table: once the next request outgrows them, the free list hands it one of them again "
       "and its later tokens overwrite its first.",
       true, mutants::make_reset_keeps_block_table},
      {"fork-shares-partial-page",
       "Paged engine whose fork hands the child the parent's partial last page itself, "
       "uncounted, instead of a copy: both append into its free slots, overwriting each "
       "other's tokens.",
       true, mutants::make_fork_shares_partial_page},
      {"cuda-missing-tile-sync",
       "cuda-paged whose chunked prefill reads a K/V tile from shared memory without the "
       "__syncthreads after loading it: threads read slots others have not written yet.",
       true, mutants::make_cuda_missing_tile_sync},
      {"cuda-empty-split-unwritten",
       "cuda-paged whose decode skips the splits a shorter row leaves empty without writing "
       "their partials, which the merge reads anyway.",
       true, mutants::make_cuda_empty_split_unwritten},
      {"cuda-half-warp-reduce",
       "cuda-paged whose decode softmax reduces max and sum with shuffles of width 16: each "
       "half warp alone, so a split's max and sum cover half its keys.",
       true, mutants::make_cuda_half_warp_reduce},
      {"cuda-split-bound-past-length",
       "cuda-paged whose decode bounds the last split at the length plus one: it reads the "
       "slot past the row's own key.",
       true, mutants::make_cuda_split_bound_past_length},
      {"cuda-offset-32bit",
       "cuda-paged over a pool whose pages lie past 2^32 elements, whose attention kernels "
       "compute K/V element offsets in 32 bits: reads wrap to the wrong memory.",
       true, mutants::make_cuda_offset_32bit},
      {"cuda-race-unsynced-pages",
       "cuda-paged whose decode has thread 0 stage the split's page ids in shared memory "
       "with no __syncthreads after: every other thread reads them unordered (a race the "
       "thread order hides; the launcher's race check names it).",
       true, mutants::make_cuda_race_unsynced_pages},
      {"cuda-barrier-per-branch",
       "cuda-paged whose decode writes the barrier after staging its page ids once in each "
       "branch of `if (t == 0)`: the block meets at two call sites (barrier-divergence).",
       true, mutants::make_cuda_barrier_per_branch},
      {"cuda-race-merge-no-syncwarp",
       "cuda-paged whose decode merge has lane 0 weigh the splits into shared memory with no "
       "__syncwarp after, as if the warp ran in lockstep: a race between lanes of one warp.",
       true, mutants::make_cuda_race_merge_no_syncwarp},
      {"softcap-twice-split",
       "Flash engine whose split decode path soft-caps its scores twice, cap tanh(tanh(s / "
       "cap)): the one-pass paths are right.",
       true, mutants::make_softcap_twice_split},
      {"sink-prefill-only",
       "Flash engine that joins the attention sink to the softmax on its prefill path only: "
       "a row decoded alone leaves the sink out.",
       true, mutants::make_sink_prefill_only},
      {"alibi-kv-head-slope",
       "Paged engine that takes a q head's ALiBi slope from its kv head's index instead of "
       "its own: wrong under GQA and MQA.",
       true, mutants::make_alibi_kv_head_slope},
      {"chunked-local-from-request",
       "Paged engine that counts chunked local attention's chunks from the request's first "
       "position instead of from 0: wrong after a truncate or fork off a chunk boundary.",
       true, mutants::make_chunked_local_from_request},
      {"fp8-v-scale-dropped",
       "Paged engine that reads its fp8 V cache without V's scale (K keeps its own): rows "
       "over a V scale other than 1 are off by that factor.",
       true, mutants::make_fp8_v_scale_dropped},
      {"q4_0-nibbles-swapped",
       "Flash engine that unpacks q4_0 blocks with element j in the high nibble and j + 16 "
       "in the low one, the reverse of ggml's packing.",
       true, mutants::make_q4_0_nibbles_swapped},
      {"affine-pack-high-first",
       "Flash engine that unpacks an affine group's quants from the top of each 32-bit word "
       "down, the reverse of MLX's packing (element k from bit k * bits up).",
       true, mutants::make_affine_pack_high_first},
      {"mla-value-at-key-end",
       "Paged engine that reads an MLA value (value_from_key) from the last value_dim "
       "elements of its key's row instead of the first: right only where value_dim equals "
       "head_dim.",
       true, mutants::make_mla_value_at_key_end},
      {"rope-interleaved-as-half-split",
       "Paged engine that declares RoPE's interleaved pairs and turns the half-split ones "
       "(x_i, x_{i+d/2}) whatever the layout says: right only without RoPE or in half-split "
       "layouts.",
       true, mutants::make_rope_interleaved_as_half_split},
      {"rope-part-at-front",
       "Paged engine that declares RoPE on part of the head (rope_dims) and turns the head's "
       "first rope_dims elements instead of its last (NeoX's partial rotary on an MLA row "
       "laid out [latent; RoPE part]): right only where RoPE turns the whole head.",
       true, mutants::make_rope_part_at_front},
  };
}

}  // namespace

const std::vector<EngineInfo>& engine_registry() {
  static const std::vector<EngineInfo> registry = build_registry();
  return registry;
}

const std::vector<EngineInfo>& model_engine_registry() {
  static const std::vector<EngineInfo> registry = model_engines::registry_entries();
  return registry;
}

const EngineInfo* find_engine(std::string_view name) {
  for (const auto* registry : {&engine_registry(), &model_engine_registry()}) {
    for (const EngineInfo& info : *registry) {
      if (info.name == name) return &info;
    }
  }
  return nullptr;
}

namespace {

// Levenshtein distance: insertions, deletions and substitutions.
size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

}  // namespace

std::string did_you_mean(std::string_view name) {
  const EngineInfo* best = nullptr;
  size_t best_distance = 3;  // at most two edits
  for (const auto* registry : {&engine_registry(), &model_engine_registry()}) {
    for (const EngineInfo& e : *registry) {
      const size_t distance = edit_distance(name, e.name);
      if (distance < best_distance) best = &e, best_distance = distance;
    }
  }
  return best ? " (did you mean '" + best->name + "'?)" : "";
}

std::string engine_names() {
  std::string names;
  for (const auto* registry : {&engine_registry(), &model_engine_registry()}) {
    for (const EngineInfo& e : *registry) names += (names.empty() ? "" : ", ") + e.name;
  }
  return names;
}

}  // namespace kvfuzz
