#include "my_engine.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

namespace {

size_t to_size(int64_t n) {
  return static_cast<size_t>(n);
}

}  // namespace

MyEngine::MyEngine(const kvfuzz::EngineConfig& config)
    : layout_(config.layout),
      scale_(static_cast<float>(config.layout.softmax_scale())),
      sequences_(to_size(config.sequences)) {
  if (layout_.q_heads % layout_.kv_heads != 0) {
    throw kvfuzz::EngineError("kv_heads must divide q_heads");
  }
}

kvfuzz::EngineCapabilities MyEngine::capabilities() const {
  kvfuzz::EngineCapabilities can;
  can.truncate = true;
  can.fork = false;
  return can;
}

MyEngine::Sequence& MyEngine::sequence(int seq, const char* what) {
  if (seq < 0 || to_size(seq) >= sequences_.size()) {
    throw kvfuzz::EngineError(std::string(what) + ": no sequence " + std::to_string(seq));
  }
  return sequences_[to_size(seq)];
}

void MyEngine::reset(int seq) {
  sequence(seq, "reset") = Sequence{};
}

void MyEngine::truncate(int seq, int64_t keep) {
  Sequence& s = sequence(seq, "truncate");
  if (keep < 0 || keep > s.entries) {
    throw kvfuzz::EngineError("truncate: cannot keep " + std::to_string(keep) + " of " +
                              std::to_string(s.entries) + " tokens");
  }
  s.k.resize(to_size(keep * layout_.kv_heads * layout_.head_dim));
  s.v.resize(to_size(keep * layout_.kv_heads * layout_.value_dim));
  s.entries = keep;
  s.next_position = keep;  // the next token continues right after the kept ones
}

void MyEngine::step(std::span<const kvfuzz::ChunkIn> chunks, std::span<kvfuzz::ChunkOut> outs) {
  for (size_t i = 0; i < chunks.size(); ++i) append_chunk(chunks[i], outs[i]);
}

int64_t MyEngine::first_visible(int64_t entry, int64_t /*chunk_start*/) const {
  if (!layout_.window) return 0;
  return std::max<int64_t>(0, entry - *layout_.window + 1);
}

void MyEngine::append_chunk(const kvfuzz::ChunkIn& chunk, kvfuzz::ChunkOut& out) {
  Sequence& s = sequence(chunk.seq, "step");
  const size_t hd = to_size(layout_.head_dim);
  const size_t vd = to_size(layout_.value_dim);
  const size_t q_heads = to_size(layout_.q_heads);
  const size_t kv_heads = to_size(layout_.kv_heads);
  const int group = layout_.q_heads / layout_.kv_heads;
  const int64_t chunk_start = s.entries;
  out.out.resize(to_size(chunk.tokens) * q_heads * vd);
  out.positions.resize(to_size(chunk.tokens));
  std::vector<float> q(q_heads * hd);
  for (size_t t = 0; t < to_size(chunk.tokens); ++t) {
    const int64_t position = s.next_position++;
    out.positions[t] = position;

    // Store this token's K (rotated at its position) and V before attending: a token
    // sees itself.
    const float* k_in = chunk.k.data() + t * kv_heads * hd;
    const float* v_in = chunk.v.data() + t * kv_heads * vd;
    const int64_t entry = s.entries++;
    s.k.insert(s.k.end(), k_in, k_in + kv_heads * hd);
    s.v.insert(s.v.end(), v_in, v_in + kv_heads * vd);
    float* k = s.k.data() + to_size(entry) * kv_heads * hd;
    for (size_t h = 0; h < kv_heads; ++h) rotate(k + h * hd, position);

    std::copy_n(chunk.q.data() + t * q_heads * hd, q_heads * hd, q.data());
    for (size_t h = 0; h < q_heads; ++h) rotate(q.data() + h * hd, position);
    const int64_t first = first_visible(entry, chunk_start);
    for (int h = 0; h < layout_.q_heads; ++h) {
      // Grouped-query attention: q heads 0..group-1 share kv head 0, and so on.
      attend(s, q.data() + to_size(h) * hd, h / group, first, entry,
             out.out.data() + (t * q_heads + to_size(h)) * vd);
    }
  }
}

void MyEngine::rotate(float* x, int64_t position) const {
  if (!layout_.rope_theta) return;
  const int half = layout_.head_dim / 2;
  for (int i = 0; i < half; ++i) {
    const double inv_freq = std::pow(*layout_.rope_theta, -2.0 * i / layout_.head_dim);
    const double angle = static_cast<double>(position) * inv_freq;
    const auto c = static_cast<float>(std::cos(angle));
    const auto s = static_cast<float>(std::sin(angle));
    const float a = x[i];
    const float b = x[i + half];
    x[i] = a * c - b * s;
    x[i + half] = a * s + b * c;
  }
}

void MyEngine::attend(const Sequence& s, const float* q, int kv_head, int64_t first, int64_t last,
                      float* out) {
  const size_t hd = to_size(layout_.head_dim);
  const size_t vd = to_size(layout_.value_dim);
  const size_t kv_heads = to_size(layout_.kv_heads);
  const auto row = [&](int64_t entry) { return to_size(entry) * kv_heads + to_size(kv_head); };

  // Scores, and their maximum so that exp() cannot overflow.
  scores_.assign(to_size(last - first + 1), 0.0f);
  float max_score = -std::numeric_limits<float>::infinity();
  for (int64_t j = first; j <= last; ++j) {
    const float* k = s.k.data() + row(j) * hd;
    float dot = 0;
    for (size_t d = 0; d < hd; ++d) dot += q[d] * k[d];
    scores_[to_size(j - first)] = scale_ * dot;
    max_score = std::max(max_score, scale_ * dot);
  }
  std::fill(out, out + vd, 0.0f);
  float sum = 0;
  for (int64_t j = first; j <= last; ++j) {
    const float w = std::exp(scores_[to_size(j - first)] - max_score);
    const float* v = s.v.data() + row(j) * vd;
    for (size_t d = 0; d < vd; ++d) out[d] += w * v[d];
    sum += w;
  }
  for (size_t d = 0; d < vd; ++d) out[d] /= sum;
}
