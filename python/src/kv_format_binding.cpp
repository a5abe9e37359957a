// kvfuzz.quantize_row and kvfuzz.dequantize_row: the quantized KV formats' bytes
// (kvfuzz/kv_format.h), for an engine written in Python that stores them, and for the tests
// that hold them bit for bit against ml_dtypes and gguf (tests/python/test_kv_format.py).
#include "kv_format_binding.h"

#include <nanobind/ndarray.h>
#include <nanobind/stl/string.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "kvfuzz/kv_format.h"

namespace nb = nanobind;

namespace kvfuzz::python {

namespace {

using Floats = nb::ndarray<const float, nb::ndim<1>, nb::c_contig, nb::device::cpu>;

KvFormat format_of(const std::string& name, double scale, int group) {
  const std::optional<KvQuant> quant = parse_kv_quant(name);
  if (!quant || *quant == KvQuant::none) {
    std::string known;
    for (const KvQuant q : kQuantizedFormats) {
      known += (known.empty() ? "" : ", ") + std::string(kv_quant_name(q));
    }
    throw nb::value_error(("format: expected one of " + known + ", got '" + name + "'").c_str());
  }
  if (is_channel(*quant)) {
    throw nb::value_error(("format: " + name +
                           " quantizes a group of keys by channel, not a row: "
                           "kvfuzz.quantize_group")
                              .c_str());
  }
  if (!is_fp8(*quant) && scale != 1.0) {
    throw nb::value_error(("scale: a " + name + " row stores its own scales; expected 1.0, got " +
                           std::to_string(scale))
                              .c_str());
  }
  if (!(scale > 0) || static_cast<double>(static_cast<float>(scale)) != scale) {
    throw nb::value_error(
        ("scale: expected a positive number f32 holds exactly, got " + std::to_string(scale))
            .c_str());
  }
  if (!is_affine(*quant)) return KvFormat{*quant, {scale}};
  if (std::find(std::begin(kAffineGroups), std::end(kAffineGroups), group) ==
      std::end(kAffineGroups)) {
    throw nb::value_error(
        ("group: expected 32, 64 or 128 (MLX's group sizes), got " + std::to_string(group))
            .c_str());
  }
  return KvFormat{*quant, {}, group};
}

DType dtype_of(const std::string& name) {
  const std::optional<DType> dtype = parse_dtype(name);
  if (!dtype) {
    throw nb::value_error(("dtype: expected 'f32', 'f16' or 'bf16', got '" + name + "'").c_str());
  }
  return *dtype;
}

int row_length(const KvFormat& format, size_t n) {
  if (is_ggml_block(format.quant) && n % kGgmlBlock != 0) {
    throw nb::value_error(("values: a ggml block format quantizes rows of a multiple of 32 "
                           "elements, got " +
                           std::to_string(n))
                              .c_str());
  }
  if (is_affine(format.quant) && n % static_cast<size_t>(format.group) != 0) {
    throw nb::value_error(("values: an affine format quantizes rows of a multiple of its group (" +
                           std::to_string(format.group) + "), got " + std::to_string(n))
                              .c_str());
  }
  if (n > (size_t{1} << 24)) throw nb::value_error("values: at most 2^24 elements per call");
  return static_cast<int>(n);
}

}  // namespace

void bind_kv_formats(nb::module_& m) {
  m.def(
      "quantize_group",
      [](const std::string& format_name,
         nb::ndarray<const float, nb::ndim<2>, nb::c_contig, nb::device::cpu> keys) {
        const std::optional<KvQuant> quant = parse_kv_quant(format_name);
        if (!quant || !is_channel(*quant)) {
          throw nb::value_error(
              ("format: expected 'channel_u8' or 'channel_u4', got '" + format_name + "'").c_str());
        }
        const size_t count = keys.shape(0), n = keys.shape(1);
        if (count == 0 || n == 0 || count * n > (size_t{1} << 24)) {
          throw nb::value_error("keys: expected 1 to 2^24 elements, [keys][elements]");
        }
        auto* out = new float[count * n];
        quantize_group(*quant, keys.data(), static_cast<int>(count), static_cast<int>(n), out);
        nb::capsule owner(out, [](void* p) noexcept { delete[] static_cast<float*>(p); });
        const size_t shape[2] = {count, n};
        return nb::ndarray<nb::numpy, float>(out, 2, shape, owner);
      },
      nb::arg("format"), nb::arg("keys"),
      "What a per-channel key cache ('channel_u8', 'channel_u4') reads back for one whole "
      "group of one kv head, keys [count][head_dim] float32 as stored in the layout's dtype: "
      "each channel's lo and scale (hi - lo) / (2^bits - 1) in f32, quants "
      "clamp(nearbyint((x - lo) / scale)), read back as q * scale + lo "
      "(docs/fixture-format.md).");
  m.def(
      "quantize_row",
      [](const std::string& format_name, Floats values, double scale, int group,
         const std::string& dtype) {
        const KvFormat format = format_of(format_name, scale, group);
        const int n = row_length(format, values.shape(0));
        // A NaN or infinity has no affine quant (MLX's rint of it is undefined to cast).
        if (is_affine(format.quant) && !std::all_of(values.data(), values.data() + n,
                                                    [](float x) { return std::isfinite(x); })) {
          throw nb::value_error("values: an affine format quantizes finite values only");
        }
        std::string bytes(row_bytes(format, n), '\0');
        encode_row(format, dtype_of(dtype), 0, values.data(), n,
                   reinterpret_cast<uint8_t*>(bytes.data()));
        return nb::bytes(bytes.data(), bytes.size());
      },
      nb::arg("format"), nb::arg("values"), nb::arg("scale") = 1.0,
      nb::arg("group") = kDefaultAffineGroup, nb::arg("dtype") = "f32",
      "The bytes a cache of `format` ('fp8_e4m3fn', 'fp8_e5m2', 'q8_0', 'q4_0', 'q4_1', "
      "'q5_0', 'q5_1', 'affine2', 'affine4', 'affine8') stores for a float32 row: fp8 codes "
      "of values / scale, ggml's blocks of 32 as quantize_row_*_ref writes them, or MLX's "
      "affine groups of `group` (each group's f32 scale and bias, rounded to `dtype`, then "
      "its quants packed low bits first into little-endian 32-bit words).");
  m.def(
      "dequantize_row",
      [](const std::string& format_name, nb::bytes data, int n, double scale, int group) {
        const KvFormat format = format_of(format_name, scale, group);
        if (n < 0) throw nb::value_error("n: expected 0 or more elements");
        row_length(format, static_cast<size_t>(n));
        const size_t want = row_bytes(format, n);
        if (data.size() != want) {
          throw nb::value_error(("data: expected " + std::to_string(want) + " bytes for " +
                                 std::to_string(n) + " elements, got " +
                                 std::to_string(data.size()))
                                    .c_str());
        }
        auto* out = new float[static_cast<size_t>(std::max(n, 1))];
        decode_row(format, 0, reinterpret_cast<const uint8_t*>(data.c_str()), n, out);
        nb::capsule owner(out, [](void* p) noexcept { delete[] static_cast<float*>(p); });
        const size_t shape[1] = {static_cast<size_t>(n)};
        return nb::ndarray<nb::numpy, float>(out, 1, shape, owner);
      },
      nb::arg("format"), nb::arg("data"), nb::arg("n"), nb::arg("scale") = 1.0,
      nb::arg("group") = kDefaultAffineGroup,
      "The float32 row a cache of `format` reads back from quantize_row's bytes for n "
      "elements (fp8 codes times scale; ggml's dequantize_row_*; scale * q + bias, the "
      "product rounded, for an affine group).");
}

}  // namespace kvfuzz::python
