// Arrays between the harness and a Python engine (docs/python.md, "Arrays").
//
// In: every chunk's q, k and v as a new float32 numpy array that owns its values (one copy
// of the runner's buffer, so the engine may keep it in its cache); torch.from_numpy() wraps
// it without another copy.
//
// Out: any array that speaks DLPack or the buffer protocol (numpy, torch, jax, cupy...):
// read in place, whatever its strides, when it is on the CPU in float32, float64, float16 or
// bfloat16; a tensor on a GPU is first moved with its own .cpu() (the judge compares on
// the host). Anything else (nested lists) goes through numpy.asarray(x, float32).
#pragma once

#include <nanobind/nanobind.h>

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace kvfuzz::python {

// A float32 numpy array of shape (d0, d1, d2) holding a copy of `values`.
nanobind::object input_array(std::span<const float> values, size_t d0, size_t d1, size_t d2);

// The values of `array` in C order, which must have exactly `shape`; throws EngineError
// naming `what`, the shape expected and the shape (or type) got.
void read_output(nanobind::handle array, const std::vector<size_t>& shape, std::string_view what,
                 std::vector<float>& into);

// One integer per token: a sequence or a 1-D array of integers. A wrong element is named
// with its index, type and value ("step's result 0's positions[0] is a float (0.0)").
void read_positions(nanobind::handle positions, size_t tokens, std::string_view what,
                    std::vector<int64_t>& into);

// A Python value's type as its messages name it ("numpy.ndarray", "generator").
std::string python_type_of(nanobind::handle value);
// repr(value), cut to `limit` characters.
std::string python_repr(nanobind::handle value, size_t limit = 40);

}  // namespace kvfuzz::python
