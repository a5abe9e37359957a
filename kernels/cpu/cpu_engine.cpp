#include "cpu/cpu_engine.h"

#include <algorithm>
#include <string>

#include "common/step_checks.h"

namespace kvfuzz::cpu {

namespace {

void require(bool ok, const std::string& message) {
  if (!ok) throw EngineError(message);
}

size_t as_size(int64_t n) {
  return static_cast<size_t>(n);
}

}  // namespace

CpuEngine::CpuEngine(const EngineConfig& config)
    : layout_(config.layout), sequences_(config.sequences) {
  common::check_engine_config(config);
  const Layout& l = layout_;
  scale_ = static_cast<float>(l.softmax_scale());
  seen_.assign(as_size(sequences_), 0);
  q_rot_.resize(as_size(int64_t{l.q_heads} * l.head_dim));
  k_rot_.resize(as_size(int64_t{l.kv_heads} * l.head_dim));
  cos_.resize(as_size(l.head_dim / 2));
  sin_.resize(as_size(l.head_dim / 2));
}

void CpuEngine::declare(const EngineNumerics& numerics, const EngineSupports& supports) {
  require(numerics.score_accumulation == DType::f32,
          "the CPU engines accumulate scores in f32 only");
  require(numerics.rotated_keys_in_storage.value_or(true),
          "the CPU engines cache rotated keys in the storage dtype");
  numerics_ = numerics;
  numerics_.rotated_keys_in_storage = true;
  numerics_.rope_angles_exact = true;  // rope_angles() computes them in double
  supports_ = with_features(supports);
  arithmetic_ = Arithmetic{.p = numerics.p,
                           .f16_values = numerics.value_accumulation == DType::f16,
                           .normalised_p = numerics.p_normalised,
                           .lse_combine = numerics.split_combine_lse,
                           .partials = numerics.split_partials};
}

void CpuEngine::check_seq(int seq, const char* what) const {
  common::check_sequence(seq, sequences_, what);
}

KeyRange CpuEngine::visible_range(int64_t index, int64_t /*chunk_start*/) const {
  return {layout_.first_visible(index), index};
}

LogitFeatures CpuEngine::logit_features(const Query& query) const {
  const auto h = static_cast<size_t>(query.q_head);
  LogitFeatures features;
  features.softcap = static_cast<float>(layout_.softcap.value_or(0.0));
  if (!layout_.alibi.empty()) features.slope = static_cast<float>(layout_.alibi[h]);
  features.query = query.index;
  if (!layout_.sinks.empty()) features.sink = static_cast<float>(layout_.sinks[h]);
  return features;
}

int CpuEngine::kv_head_for(int q_head) const {
  return q_head / layout_.group();
}

void CpuEngine::check_chunks(std::span<const ChunkIn> chunks, std::span<ChunkOut> outs) {
  ++step_count_;
  common::check_step_input(layout_, sequences_, chunks, outs, seen_, step_count_);
}

void CpuEngine::step(std::span<const ChunkIn> chunks, std::span<ChunkOut> outs) {
  check_chunks(chunks, outs);
  // Make room for every chunk before any token is stored: an exhausted pool throws before
  // any position moves (pages already reserved for earlier chunks stay reserved to them).
  for (const ChunkIn& c : chunks) begin_chunk(c.seq, c.tokens);
  for (size_t i = 0; i < chunks.size(); ++i) run_chunk(chunks[i], outs[i]);
}

void CpuEngine::run_chunk(const ChunkIn& chunk, ChunkOut& out) {
  const Layout& l = layout_;
  const size_t hd = as_size(l.head_dim);
  const size_t vd = as_size(l.value_dim);
  const size_t q_stride = as_size(l.q_heads) * hd;
  const size_t k_stride = as_size(l.kv_heads) * hd;
  const size_t v_stride = as_size(l.kv_heads) * vd;
  out.out.resize(as_size(chunk.tokens) * as_size(l.q_heads) * vd);
  out.positions.resize(as_size(chunk.tokens));
  int64_t chunk_start = 0;
  for (size_t t = 0; t < as_size(chunk.tokens); ++t) {
    const int64_t pos = next_position(chunk.seq);
    std::copy_n(chunk.q.data() + t * q_stride, q_stride, q_rot_.data());
    std::copy_n(chunk.k.data() + t * k_stride, k_stride, k_rot_.data());
    if (l.rope_theta) {
      const RopeShape shape = rope_shape();
      rope_angles(static_cast<int>(shape.dims), pos, *l.rope_theta, cos_.data(), sin_.data());
      const DType tables = numerics_.rope_tables;
      const auto rotate = [&](float* head) {
        if (tables == DType::f32) return rope_apply(head, shape, cos_.data(), sin_.data());
        rope_apply_in(head, shape, cos_.data(), sin_.data(), tables);
      };
      if (tables != DType::f32) {
        for (float& c : cos_) c = round_to_dtype(c, tables);
        for (float& s : sin_) s = round_to_dtype(s, tables);
      }
      for (size_t h = 0; h < as_size(l.q_heads); ++h) rotate(q_rot_.data() + h * hd);
      for (size_t h = 0; h < as_size(l.kv_heads); ++h) rotate(k_rot_.data() + h * hd);
    }
    const int64_t index = store(chunk.seq, k_rot_.data(), chunk.v.data() + t * v_stride);
    if (t == 0) chunk_start = index;
    const KeyRange keys = visible_range(index, chunk_start);
    for (int h = 0; h < l.q_heads; ++h) {
      const Query query{
          chunk.seq, h, index, chunk_start, chunk.tokens, q_rot_.data() + as_size(h) * hd};
      float* row = out.out.data() + (t * as_size(l.q_heads) + as_size(h)) * vd;
      attend(query, kv_head_for(h), keys, row);
      if (numerics_.output != DType::f32) {
        for (size_t d = 0; d < vd; ++d) row[d] = round_to_dtype(row[d], numerics_.output);
      }
    }
    out.positions[t] = pos;
  }
}

}  // namespace kvfuzz::cpu
