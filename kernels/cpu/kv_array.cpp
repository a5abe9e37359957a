#include "cpu/kv_array.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cassert>
#include <cmath>
#include <cstring>

namespace kvfuzz::cpu {

namespace {

// Room for the rows one call decodes (a head's row; a tile reads one row at a time). Slot 1
// holds a whole row decoded for a part of it (KvArray::read), which dot and add_scaled may
// be reading into slot 0.
std::vector<float>& scratch(size_t n, size_t slot = 0) {
  thread_local std::array<std::vector<float>, 2> buffers;
  std::vector<float>& buffer = buffers[slot];
  if (buffer.size() < n) buffer.resize(n);
  return buffer;
}

}  // namespace

KvArray::KvArray(DType dtype, const KvFormat& format, int row, int kv_heads)
    : dtype_(dtype),
      format_(format),
      row_(static_cast<size_t>(std::max(row, 1))),
      kv_heads_(static_cast<size_t>(std::max(kv_heads, 1))),
      row_bytes_(row_bytes(format, std::max(row, 1))),
      plain_(dtype) {}

size_t KvArray::size() const {
  return quantized() ? bytes_.size() / row_bytes_ * row_ : plain_.size();
}

void KvArray::clear() {
  plain_.clear();
  bytes_.clear();
}

void KvArray::poison_row(float value, int kv_head, uint8_t* out) const {
  if (is_fp8(format_.quant)) {
    const uint8_t code = f32_to_fp8(value / format_.scale_of(kv_head), format_.quant);
    std::fill_n(out, row_bytes_, code);
    return;
  }
  std::fill_n(out, row_bytes_, uint8_t{0x77});
  if (is_affine(format_.quant)) {
    // Each group's scale and bias (little-endian f32, at its start) the value, so that every
    // element reads back as value * q + value.
    const auto bits = std::bit_cast<uint32_t>(value);
    const size_t bytes = row_bytes_ / (row_ / static_cast<size_t>(format_.group));
    for (size_t at = 0; at < row_bytes_; at += bytes) {
      for (size_t b = 0; b < 8; ++b) out[at + b] = static_cast<uint8_t>(bits >> (8 * (b % 4)));
    }
    return;
  }
  const uint16_t d = f32_to_f16(value);
  const size_t block = row_bytes_ / (row_ / kGgmlBlock);
  const bool has_min = format_.quant == KvQuant::q4_1 || format_.quant == KvQuant::q5_1;
  for (size_t at = 0; at < row_bytes_; at += block) {
    for (size_t half = 0; half < (has_min ? 2u : 1u); ++half) {
      out[at + 2 * half] = static_cast<uint8_t>(d & 0xFF);
      out[at + 2 * half + 1] = static_cast<uint8_t>(d >> 8);
    }
  }
}

void KvArray::assign(size_t n, float value) {
  if (!quantized()) return plain_.assign(n, value);
  assert(n % row_ == 0);
  bytes_.assign(rows(n) * row_bytes_, 0);
  poison_rows(value, 0, rows(n));
}

void KvArray::fill(size_t at, size_t n, float value) {
  if (!quantized()) return plain_.fill(at, n, value);
  assert(at % row_ == 0 && n % row_ == 0 && at + n <= size());
  poison_rows(value, rows(at), rows(n));
}

void KvArray::poison_rows(float value, size_t first, size_t count) {
  // One row per kv head (the rows differ only by the head's scale), copied to each row: a
  // page pool holds thousands of rows, and every engine made fills its whole pool.
  const size_t heads = std::min(kv_heads_, count);
  std::vector<uint8_t> head_rows(kv_heads_ * row_bytes_);
  for (size_t r = first; r < first + heads; ++r) {
    poison_row(value, head_of(r), head_rows.data() + static_cast<size_t>(head_of(r)) * row_bytes_);
  }
  for (size_t r = first; r < first + count; ++r) {
    std::memcpy(bytes_.data() + r * row_bytes_,
                head_rows.data() + static_cast<size_t>(head_of(r)) * row_bytes_, row_bytes_);
  }
}

void KvArray::encode(size_t row, const float* src) {
  std::vector<float>& rounded = scratch(row_);
  for (size_t i = 0; i < row_; ++i) rounded[i] = round_to_dtype(src[i], dtype_);
  encode_row(format_, dtype_, head_of(row), rounded.data(), static_cast<int>(row_),
             bytes_.data() + row * row_bytes_);
}

void KvArray::append(const float* src, size_t n) {
  if (!quantized()) return plain_.append(src, n);
  assert(n % row_ == 0);
  const size_t first = rows(size());
  bytes_.resize(bytes_.size() + rows(n) * row_bytes_);
  for (size_t r = 0; r < rows(n); ++r) encode(first + r, src + r * row_);
}

void KvArray::write(size_t at, const float* src, size_t n) {
  if (!quantized()) return plain_.write(at, src, n);
  assert(at % row_ == 0 && n % row_ == 0 && at + n <= size());
  for (size_t r = 0; r < rows(n); ++r) encode(rows(at) + r, src + r * row_);
}

void KvArray::copy_within(size_t from, size_t to, size_t n) {
  if (!quantized()) return plain_.copy_within(from, to, n);
  assert(from % row_ == 0 && to % row_ == 0 && n % row_ == 0);
  std::copy_n(bytes_.begin() + static_cast<std::ptrdiff_t>(rows(from) * row_bytes_),
              rows(n) * row_bytes_,
              bytes_.begin() + static_cast<std::ptrdiff_t>(rows(to) * row_bytes_));
}

void KvArray::truncate(size_t n) {
  if (!quantized()) return plain_.truncate(n);
  assert(n % row_ == 0);
  bytes_.resize(rows(n) * row_bytes_);
}

void KvArray::read(size_t at, float* dst, size_t n) const {
  if (!quantized()) return plain_.read(at, dst, n);
  assert(at + n <= size());
  if (at % row_ == 0 && n % row_ == 0) {
    for (size_t r = 0; r < rows(n); ++r) {
      const size_t row = rows(at) + r;
      decoder_(format_, head_of(row), bytes_.data() + row * row_bytes_, static_cast<int>(row_),
               dst + r * row_);
    }
    return;
  }
  // Part of a row (MLA's value: the first value_dim elements of its key's row): each row
  // touched is decoded whole, as a row is the unit a format's scales cover, and the part
  // copied out.
  std::vector<float>& whole = scratch(row_, 1);
  while (n > 0) {
    const size_t row = rows(at), in = at % row_, take = std::min(n, row_ - in);
    decoder_(format_, head_of(row), bytes_.data() + row * row_bytes_, static_cast<int>(row_),
             whole.data());
    std::copy_n(whole.begin() + static_cast<std::ptrdiff_t>(in), take, dst);
    dst += take;
    at += take;
    n -= take;
  }
}

float KvArray::dot(size_t at, const float* x, size_t n) const {
  if (!quantized()) return plain_.dot(at, x, n);
  std::vector<float>& elements = scratch(n);
  read(at, elements.data(), n);
  float sum = 0;
  for (size_t i = 0; i < n; ++i) sum += x[i] * elements[i];
  return sum;
}

void KvArray::add_scaled(size_t at, float w, float* acc, size_t n) const {
  if (!quantized()) return plain_.add_scaled(at, w, acc, n);
  std::vector<float>& elements = scratch(n);
  read(at, elements.data(), n);
  for (size_t i = 0; i < n; ++i) acc[i] += w * elements[i];
}

}  // namespace kvfuzz::cpu
