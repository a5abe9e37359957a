// kvfuzz.quantize_row and kvfuzz.dequantize_row: the quantized KV formats' bytes
// (kvfuzz/kv_format.h), for an engine written in Python that stores them, and for the tests
// that hold them bit for bit against ml_dtypes and gguf (tests/python/test_kv_format.py).
#include "kv_format_binding.h"

#include <nanobind/ndarray.h>
#include <nanobind/stl/string.h>

#include <string>
#include <vector>

#include "kvfuzz/kv_format.h"

namespace nb = nanobind;

namespace kvfuzz::python {

namespace {

using Floats = nb::ndarray<const float, nb::ndim<1>, nb::c_contig, nb::device::cpu>;

KvFormat format_of(const std::string& name, double scale) {
  const std::optional<KvQuant> quant = parse_kv_quant(name);
  if (!quant || *quant == KvQuant::none) {
    std::string known;
    for (const KvQuant q : kQuantizedFormats) {
      known += (known.empty() ? "" : ", ") + std::string(kv_quant_name(q));
    }
    throw nb::value_error(("format: expected one of " + known + ", got '" + name + "'").c_str());
  }
  if (is_ggml_block(*quant) && scale != 1.0) {
    throw nb::value_error(("scale: a ggml block format stores its own scales; expected 1.0, got " +
                           std::to_string(scale))
                              .c_str());
  }
  if (!(scale > 0) || static_cast<double>(static_cast<float>(scale)) != scale) {
    throw nb::value_error(
        ("scale: expected a positive number f32 holds exactly, got " + std::to_string(scale))
            .c_str());
  }
  return KvFormat{*quant, {scale}};
}

int row_length(const KvFormat& format, size_t n) {
  if (is_ggml_block(format.quant) && n % kGgmlBlock != 0) {
    throw nb::value_error(("values: a ggml block format quantizes rows of a multiple of 32 "
                           "elements, got " +
                           std::to_string(n))
                              .c_str());
  }
  if (n > (size_t{1} << 24)) throw nb::value_error("values: at most 2^24 elements per call");
  return static_cast<int>(n);
}

}  // namespace

void bind_kv_formats(nb::module_& m) {
  m.def(
      "quantize_row",
      [](const std::string& format_name, Floats values, double scale) {
        const KvFormat format = format_of(format_name, scale);
        const int n = row_length(format, values.shape(0));
        std::string bytes(row_bytes(format.quant, n), '\0');
        encode_row(format, 0, values.data(), n, reinterpret_cast<uint8_t*>(bytes.data()));
        return nb::bytes(bytes.data(), bytes.size());
      },
      nb::arg("format"), nb::arg("values"), nb::arg("scale") = 1.0,
      "The bytes a cache of `format` ('fp8_e4m3fn', 'fp8_e5m2', 'q8_0', 'q4_0', 'q4_1', "
      "'q5_0', 'q5_1') stores for a float32 row: fp8 codes of values / scale, or ggml's "
      "blocks of 32 as quantize_row_*_ref writes them.");
  m.def(
      "dequantize_row",
      [](const std::string& format_name, nb::bytes data, int n, double scale) {
        const KvFormat format = format_of(format_name, scale);
        if (n < 0) throw nb::value_error("n: expected 0 or more elements");
        row_length(format, static_cast<size_t>(n));
        const size_t want = row_bytes(format.quant, n);
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
      "The float32 row a cache of `format` reads back from quantize_row's bytes for n "
      "elements (fp8 codes times scale; ggml's dequantize_row_*).");
}

}  // namespace kvfuzz::python
