#include "cuda/engine/cuda_engine.h"

#include <algorithm>
#include <string>
#include <utility>

#include "common/step_checks.h"
#include "cpu/attention_math.h"
#include "cuda/chunked_prefill.cuh"
#include "cuda/kv_cache.cuh"
#include "cuda/paged_decode.cuh"

namespace kvfuzz::cuda {

namespace {

int storage_dtype(DType dtype) {
  return dtype == DType::f32 ? kStorageF32 : dtype == DType::f16 ? kStorageF16 : kStorageBf16;
}

int rounding(std::optional<DType> dtype) {
  if (!dtype || *dtype == DType::f32) return kNoRounding;
  return *dtype == DType::f16 ? kStorageF16 : kStorageBf16;
}

const EngineConfig& checked(const EngineConfig& config) {
  common::check_engine_config(config);
  return config;
}

// Runs `body`, its launches on the SIMT launcher in the thread order `threads` with the
// hazard checks on (unless KVFUZZ_SIMT_CHECKS or an enclosing LaunchSettings says
// otherwise), turning the launcher's
// LaunchError (a divergent barrier, a bad warp mask, too much shared memory: what a device
// reports as an error or undefined behaviour) into the engine error a caller expects, and
// its HazardError into one of the hazard's kind.
template <class Body>
void guarded(const ThreadSchedule& threads, Body&& body) {
#ifdef __CUDACC__
  (void)threads;
  body();
#else
  try {
    const simt::LaunchSettings settings(threads);
    body();
  } catch (const simt::HazardError& e) {
    throw EngineError(e.hazard == simt::Hazard::race ? EngineErrorKind::race
                                                     : EngineErrorKind::barrier_divergence,
                      std::string("kernel hazard: ") + e.what());
  } catch (const simt::LaunchError& e) {
    throw EngineError(std::string("kernel launch failed: ") + e.what());
  }
#endif
}

template <class T>
size_t bytes_of(const std::vector<T>& v) {
  return v.size() * sizeof(T);
}

template <class T>
void put(DeviceBuffer& buffer, const std::vector<T>& host) {
  buffer.ensure(bytes_of(host));
  buffer.upload(host.data(), bytes_of(host));
}

}  // namespace

CudaEngineOptions cuda_f32_options() {
  CudaEngineOptions o;
  o.numerics = {.rotated_keys_in_storage = true, .rope_angles_exact = true};
  o.supports = {.max_head_dim = kPrefillMaxDim,
                .softcap = true,
                .sinks = true,
                .alibi = true,
                .chunked_local = true,
                .kv_fp8 = true,
                .kv_ggml_blocks = true,
                .kv_affine = true,
                .value_from_key = true,
                .rope_interleaved = true,
                .rope_dims = true};
  return o;
}

CudaEngineOptions cuda_bf16_options() {
  CudaEngineOptions o;
  o.numerics = {.output = DType::bf16,
                .p = DType::bf16,
                .rotated_keys_in_storage = true,
                .rope_angles_exact = true};
  o.supports = {.dtypes = {DType::bf16},
                .max_head_dim = kPrefillMaxDim,
                .softcap = true,
                .sinks = true,
                .alibi = true,
                .chunked_local = true,
                .kv_fp8 = true,
                .kv_ggml_blocks = true,
                .kv_affine = true,
                .value_from_key = true,
                .rope_interleaved = true,
                .rope_dims = true};
  return o;
}

CudaEngine::CudaEngine(const EngineConfig& config, CudaEngineOptions options)
    : layout_(checked(config).layout),
      options_(std::move(options)),
      scale_(static_cast<float>(config.layout.softmax_scale())),
      pool_(config.layout, config.sequences, config.page_order, config.poison, options_.wide_pool),
      seen_(static_cast<size_t>(config.sequences), 0),
      threads_(config.threads) {
  // The per-head features live on the device for the engine's life.
  std::vector<float> per_head;
  for (const double slope : layout_.alibi) per_head.push_back(static_cast<float>(slope));
  for (const double sink : layout_.stored_sinks()) per_head.push_back(static_cast<float>(sink));
  if (!per_head.empty()) put(features_, per_head);
  if (layout_.head_dim > kPrefillMaxDim || layout_.value_dim > kPrefillMaxDim) {
    throw EngineError("the CUDA kernels take head_dim and value_dim up to " +
                      std::to_string(kPrefillMaxDim) + ", not " +
                      std::to_string(std::max(layout_.head_dim, layout_.value_dim)));
  }
}

BitwiseClaims CudaEngine::bitwise_claims() const {
  if (options_.faults != 0) return {};  // a mutant is judged by the tolerance
  return {.layout = true, .poison = true};
}

void CudaEngine::reset(int seq) {
  common::check_sequence(seq, pool_.sequences(), "reset");
  guarded(threads_, [&] { pool_.release(seq); });
}

void CudaEngine::truncate(int seq, int64_t keep) {
  common::check_sequence(seq, pool_.sequences(), "truncate");
  guarded(threads_, [&] { pool_.truncate(seq, keep); });
}

void CudaEngine::fork(int src, int dst) {
  common::check_sequence(src, pool_.sequences(), "fork");
  common::check_sequence(dst, pool_.sequences(), "fork");
  guarded(threads_, [&] { pool_.fork(src, dst); });
}

void CudaEngine::step(std::span<const ChunkIn> chunks, std::span<ChunkOut> outs) {
  common::check_step_input(layout_, pool_.sequences(), chunks, outs, seen_, ++step_count_);
  guarded(threads_, [&] {
    // Room for every chunk before any token is stored: an exhausted pool throws before any
    // position moves.
    std::vector<int64_t> first_pos;
    int tokens = 0;
    bool decode_only = true;
    for (const ChunkIn& c : chunks) {
      first_pos.push_back(pool_.length(c.seq));
      pool_.reserve(c.seq, c.tokens);
      tokens += c.tokens;
      decode_only = decode_only && c.tokens <= 1;
    }
    const size_t row = static_cast<size_t>(layout_.q_heads) * layout_.value_dim;
    host_out_.assign(static_cast<size_t>(tokens) * row, 0.0f);
    if (tokens > 0) {
      store_tokens(chunks, first_pos, tokens);
      for (const ChunkIn& c : chunks) pool_.grow(c.seq, c.tokens);
      if (decode_only) {
        decode(chunks);
      } else {
        prefill(chunks, first_pos, tokens);
      }
      out_.download(host_out_.data(), bytes_of(host_out_));
    }
    size_t at = 0;
    for (size_t i = 0; i < chunks.size(); ++i) {
      const auto n = static_cast<size_t>(chunks[i].tokens);
      const auto first = host_out_.begin() + static_cast<std::ptrdiff_t>(at * row);
      outs[i].out.assign(first, first + static_cast<std::ptrdiff_t>(n * row));
      outs[i].positions.resize(n);
      for (size_t t = 0; t < n; ++t) outs[i].positions[t] = first_pos[i] + static_cast<int64_t>(t);
      at += n;
    }
  });
}

void CudaEngine::store_tokens(std::span<const ChunkIn> chunks, std::span<const int64_t> first_pos,
                              int tokens) {
  const Layout& l = layout_;
  host_q_.clear();
  host_k_.clear();
  host_v_.clear();
  host_slots_.clear();
  host_cos_.clear();
  host_sin_.clear();
  const RopeShape shape = l.rope_shape();
  std::vector<float> cos(shape.pairs()), sin(shape.pairs());
  for (size_t i = 0; i < chunks.size(); ++i) {
    const ChunkIn& c = chunks[i];
    host_q_.insert(host_q_.end(), c.q.begin(), c.q.end());
    host_k_.insert(host_k_.end(), c.k.begin(), c.k.end());
    host_v_.insert(host_v_.end(), c.v.begin(), c.v.end());
    for (int t = 0; t < c.tokens; ++t) {
      const int64_t pos = first_pos[i] + t;
      host_slots_.push_back(pool_.device_slot(c.seq, pos));
      if (!l.rope_theta) continue;
      // The angles in double, cos and sin rounded to f32: a cos/sin cache's entries.
      cpu::rope_angles(static_cast<int>(shape.dims), pos, *l.rope_theta, cos.data(), sin.data());
      host_cos_.insert(host_cos_.end(), cos.begin(), cos.end());
      host_sin_.insert(host_sin_.end(), sin.begin(), sin.end());
    }
  }
  put(q_, host_q_);
  put(k_, host_k_);
  put(v_, host_v_);
  put(slots_, host_slots_);
  put(cos_, host_cos_);
  put(sin_, host_sin_);
  const PagedKv kv = pool_.view();
  AppendArgs a;
  a.k_pool = const_cast<void*>(kv.k);
  a.v_pool = const_cast<void*>(kv.v);  // nullptr for MLA: only keys are cached
  a.dtype = storage_dtype(l.dtype);
  a.k_type = kv.k_type;
  a.v_type = kv.v_type;
  a.k_scales = kv.k_scales;
  a.v_scales = kv.v_scales;
  a.k = k_.as<float>();
  a.v = v_.as<float>();
  a.slots = slots_.as<long long>();
  if (l.rope_theta) {
    a.rope = {
        .cos = cos_.as<float>(),
        .sin = sin_.as<float>(),
        .dims = static_cast<int>(shape.dims),
        .offset = options_.faults & kFaultRopePartAtFront ? 0 : static_cast<int>(shape.offset()),
        .interleaved = shape.style == RopeStyle::interleaved};
  }
  a.kv_heads = l.kv_heads;
  a.head_dim = l.head_dim;
  a.value_dim = l.value_dim;
  a.group = kv.group;
  const dim3 grid(static_cast<unsigned>(tokens));
  KVFUZZ_RUN(append_kv, grid, dim3(kCacheThreads), 0, a);
  q_rot_.ensure(bytes_of(host_q_));
  KVFUZZ_RUN(rope_queries, grid, dim3(kCacheThreads), 0, q_.as<float>(), q_rot_.as<float>(), a.rope,
             l.q_heads, l.head_dim);
}

void CudaEngine::decode(std::span<const ChunkIn> chunks) {
  const Layout& l = layout_;
  // Rows: the chunks of one token (a chunk of none has no row); q_rot_ holds them in order.
  host_ints_.clear();
  int longest = 0;
  for (const ChunkIn& c : chunks) {
    if (c.tokens == 1) host_ints_.push_back(c.seq);
  }
  const int batch = static_cast<int>(host_ints_.size());
  for (int b = 0; b < batch; ++b) {
    const auto length = static_cast<int>(pool_.length(host_ints_[static_cast<size_t>(b)]));
    host_ints_.push_back(length);
    longest = std::max(longest, length);
  }
  put(ints_, host_ints_);
  DecodeArgs a;
  a.kv = pool_.view();
  a.batch_seq = ints_.as<int>();
  a.lengths = ints_.as<int>() + batch;
  a.q = q_rot_.as<float>();
  a.q_heads = l.q_heads;
  a.window = l.window.value_or(0);
  a.scale = scale_;
  a.features = logit_features();
  decode_splits(batch, l.kv_heads, longest, multiprocessors(), a.splits, a.keys_per_split);
  if (a.splits > kDecodeMaxSplits) {
    throw EngineError("decode of a context of " + std::to_string(longest) + " tokens takes " +
                      std::to_string(a.splits) + " splits; the merge weighs at most " +
                      std::to_string(kDecodeMaxSplits));
  }
  a.p_dtype = rounding(options_.numerics.p);
  a.out_dtype = rounding(options_.numerics.output);
  a.faults = options_.faults;
  const size_t heads = static_cast<size_t>(batch) * static_cast<size_t>(l.q_heads);
  const size_t parts = heads * static_cast<size_t>(a.splits);
  partial_out_.ensure(parts * static_cast<size_t>(l.value_dim) * sizeof(float));
  partial_stats_.ensure(2 * parts * sizeof(float));  // every split's max, then its sum
  out_.ensure(heads * static_cast<size_t>(l.value_dim) * sizeof(float));
  // The split scratch is poisoned before every decode, so that a partial no block wrote
  // reads NaN on both backends (on a device, compute-sanitizer's initcheck flags it).
  const auto stats = static_cast<long long>(2 * parts);
  KVFUZZ_RUN(fill_elements, element_grid(stats), dim3(kCacheThreads), 0, partial_stats_.data(), 0LL,
             stats, 0x7FC00000u /* a quiet NaN */, static_cast<int>(kStorageF32));
  a.partial_out = partial_out_.as<float>();
  a.partial_max = partial_stats_.as<float>();
  a.partial_sum = partial_stats_.as<float>() + parts;
  a.out = out_.as<float>();
  KVFUZZ_RUN(paged_decode_split, decode_split_grid(batch, l.q_heads, l.kv_heads, a.splits),
             dim3(kDecodeThreads), 0, a);
  KVFUZZ_RUN(paged_decode_merge, decode_merge_grid(batch, l.q_heads), dim3(kDecodeMergeThreads), 0,
             a);
}

void CudaEngine::prefill(std::span<const ChunkIn> chunks, std::span<const int64_t> first_pos,
                         int tokens) {
  const Layout& l = layout_;
  // Chunks of no token have no rows: left out. Layout of host_ints_: chunk_seq[chunks],
  // chunk_first_token[chunks + 1], chunk_first_pos[chunks].
  std::vector<int> seqs, firsts{0}, positions;
  int longest = 0;
  for (size_t i = 0; i < chunks.size(); ++i) {
    if (chunks[i].tokens == 0) continue;
    seqs.push_back(chunks[i].seq);
    firsts.push_back(firsts.back() + chunks[i].tokens);
    positions.push_back(static_cast<int>(first_pos[i]));
    longest = std::max(longest, chunks[i].tokens);
  }
  const int n = static_cast<int>(seqs.size());
  host_ints_ = seqs;
  host_ints_.insert(host_ints_.end(), firsts.begin(), firsts.end());
  host_ints_.insert(host_ints_.end(), positions.begin(), positions.end());
  put(ints_, host_ints_);
  out_.ensure(static_cast<size_t>(tokens) * static_cast<size_t>(l.q_heads) *
              static_cast<size_t>(l.value_dim) * sizeof(float));
  PrefillArgs a;
  a.kv = pool_.view();
  a.q = q_rot_.as<float>();
  a.chunk_seq = ints_.as<int>();
  a.chunk_first_token = ints_.as<int>() + n;
  a.chunk_first_pos = ints_.as<int>() + 2 * n + 1;
  a.chunks = n;
  a.q_heads = l.q_heads;
  a.window = l.window.value_or(0);
  a.scale = scale_;
  a.features = logit_features();
  a.p_dtype = rounding(options_.numerics.p);
  a.out_dtype = rounding(options_.numerics.output);
  a.faults = options_.faults;
  a.out = out_.as<float>();
  const size_t shared = prefill_shared_bytes(l.head_dim, l.value_dim);
#ifdef __CUDACC__
  // Past 48 KiB a kernel must ask for its dynamic shared memory (98 KiB at 256 dims).
  if (cudaFuncSetAttribute(chunked_prefill, cudaFuncAttributeMaxDynamicSharedMemorySize,
                           static_cast<int>(shared)) != cudaSuccess) {
    throw EngineError("CUDA: cannot give chunked_prefill " + std::to_string(shared) +
                      " bytes of shared memory");
  }
#endif
  KVFUZZ_RUN(chunked_prefill, prefill_grid(n, longest, l.q_heads), dim3(kPrefillThreads), shared,
             a);
}

LogitFeatures CudaEngine::logit_features() const {
  LogitFeatures f;
  f.softcap = static_cast<float>(layout_.softcap.value_or(0.0));
  f.chunked_local = layout_.chunked_local.value_or(0);
  const auto heads = static_cast<size_t>(layout_.q_heads);
  if (!layout_.alibi.empty()) f.alibi = features_.as<float>();
  if (!layout_.sinks.empty()) f.sinks = features_.as<float>() + (layout_.alibi.empty() ? 0 : heads);
  return f;
}

}  // namespace kvfuzz::cuda
