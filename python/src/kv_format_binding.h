// kvfuzz.quantize_row and kvfuzz.dequantize_row (kvfuzz/kv_format.h from Python).
#pragma once

#include <nanobind/nanobind.h>

namespace kvfuzz::python {

void bind_kv_formats(nanobind::module_& m);

}  // namespace kvfuzz::python
