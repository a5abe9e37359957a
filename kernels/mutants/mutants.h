// Deliberately wrong engines that the suite must reject. Each is an honest engine with one
// hook overridden; the registry names them and says what each gets wrong.
#pragma once

#include <memory>

#include "kvfuzz/engine.h"

namespace kvfuzz::mutants {

// What every mutant derives from: its honest engine, claiming nothing bit for bit. A
// mutant is judged by the tolerance, as an engine without claims is, so that its bug (not
// a claim it would otherwise inherit) is what the properties find, with the same failure
// kinds as before claims existed.
template <class Honest>
class Mutant : public Honest {
 public:
  using Honest::Honest;
  BitwiseClaims bitwise_claims() const final { return {}; }
  // The honest engine's supports, but for the per-channel keys only `contiguous` stores (so
  // that every mutant's scenarios stay as they were before it did).
  EngineSupports supports() const override {
    EngineSupports supports = Honest::supports();
    supports.kv_channel = false;
    return supports;
  }
};

std::unique_ptr<Engine> make_mask_origin(const EngineConfig& config);
std::unique_ptr<Engine> make_stale_position(const EngineConfig& config);
std::unique_ptr<Engine> make_stale_kv(const EngineConfig& config);
std::unique_ptr<Engine> make_page_tail_read(const EngineConfig& config);
std::unique_ptr<Engine> make_wrong_kv_head(const EngineConfig& config);
std::unique_ptr<Engine> make_truncate_keeps_position(const EngineConfig& config);
std::unique_ptr<Engine> make_fork_restarts_positions(const EngineConfig& config);
std::unique_ptr<Engine> make_truncate_shared_in_place(const EngineConfig& config);
std::unique_ptr<Engine> make_split_merge_first_max(const EngineConfig& config);
std::unique_ptr<Engine> make_split_edge_nan(const EngineConfig& config);
std::unique_ptr<Engine> make_block_table_u8(const EngineConfig& config);
std::unique_ptr<Engine> make_slot_offset_u16(const EngineConfig& config);
std::unique_ptr<Engine> make_slot_mapping_i16(const EngineConfig& config);
std::unique_ptr<Engine> make_window_evicts_early(const EngineConfig& config);
std::unique_ptr<Engine> make_reset_keeps_block_table(const EngineConfig& config);
std::unique_ptr<Engine> make_fork_shares_partial_page(const EngineConfig& config);
// One per attention feature (Layout: softcap, sinks, alibi, chunked_local).
std::unique_ptr<Engine> make_softcap_twice_split(const EngineConfig& config);
std::unique_ptr<Engine> make_sink_prefill_only(const EngineConfig& config);
std::unique_ptr<Engine> make_alibi_kv_head_slope(const EngineConfig& config);
std::unique_ptr<Engine> make_chunked_local_from_request(const EngineConfig& config);
// One per family of quantized KV cache (Layout::k_format, v_format).
std::unique_ptr<Engine> make_fp8_v_scale_dropped(const EngineConfig& config);
std::unique_ptr<Engine> make_q4_0_nibbles_swapped(const EngineConfig& config);
std::unique_ptr<Engine> make_affine_pack_high_first(const EngineConfig& config);
// MLA's value read from its key (Layout::value_from_key).
std::unique_ptr<Engine> make_mla_value_at_key_end(const EngineConfig& config);
std::unique_ptr<Engine> make_rope_interleaved_as_half_split(const EngineConfig& config);
std::unique_ptr<Engine> make_rope_part_at_front(const EngineConfig& config);
// The CUDA engine with one kernel fault (cuda_kernel_faults.cpp).
std::unique_ptr<Engine> make_cuda_missing_tile_sync(const EngineConfig& config);
std::unique_ptr<Engine> make_cuda_empty_split_unwritten(const EngineConfig& config);
std::unique_ptr<Engine> make_cuda_half_warp_reduce(const EngineConfig& config);
std::unique_ptr<Engine> make_cuda_split_bound_past_length(const EngineConfig& config);
std::unique_ptr<Engine> make_cuda_offset_32bit(const EngineConfig& config);
// Hazards the SIMT launcher's checks name (a race, a divergent barrier), which give the
// right rows in thread order.
std::unique_ptr<Engine> make_cuda_race_unsynced_pages(const EngineConfig& config);
std::unique_ptr<Engine> make_cuda_barrier_per_branch(const EngineConfig& config);
std::unique_ptr<Engine> make_cuda_race_merge_no_syncwarp(const EngineConfig& config);

}  // namespace kvfuzz::mutants
