#include "arrays.h"

#include <nanobind/ndarray.h>
#include <nanobind/stl/string.h>  // nb::cast<std::string>: without it a message is a bad_cast

#include <cstring>
#include <memory>
#include <string>

#include "kvfuzz/dtype.h"
#include "kvfuzz/engine.h"

namespace nb = nanobind;

namespace kvfuzz::python {

namespace {

using AnyArray = nb::ndarray<nb::ro, nb::device::cpu>;

std::string shape_text(const std::vector<size_t>& shape) {
  std::string text = "(";
  for (size_t i = 0; i < shape.size(); ++i) {
    text += (i ? ", " : "") + std::to_string(shape[i]);
  }
  return text + (shape.size() == 1 ? ",)" : ")");
}

// One value of a CPU array of a floating dtype, or false for another dtype.
bool element_reader(const nb::dlpack::dtype& dtype, float (*&read)(const void*, int64_t)) {
  using Code = nb::dlpack::dtype_code;
  if (dtype.lanes != 1) return false;
  if (dtype == nb::dtype<float>()) {
    read = [](const void* p, int64_t i) { return static_cast<const float*>(p)[i]; };
  } else if (dtype == nb::dtype<double>()) {
    read = [](const void* p, int64_t i) {
      return static_cast<float>(static_cast<const double*>(p)[i]);
    };
  } else if (dtype.code == static_cast<uint8_t>(Code::Float) && dtype.bits == 16) {
    read = [](const void* p, int64_t i) { return f16_to_f32(static_cast<const uint16_t*>(p)[i]); };
  } else if (dtype.code == static_cast<uint8_t>(Code::Bfloat) && dtype.bits == 16) {
    read = [](const void* p, int64_t i) { return bf16_to_f32(static_cast<const uint16_t*>(p)[i]); };
  } else {
    return false;
  }
  return true;
}

// `value` as a CPU array: itself when it is one, its .cpu() when it is on a device, else
// numpy.asarray(value, float32). Throws EngineError when none works.
AnyArray cpu_array(nb::handle value, std::string_view what) {
  AnyArray array;
  if (nb::try_cast(value, array, false)) return array;
  nb::object moved;
  if (nb::hasattr(value, "__dlpack_device__") && nb::hasattr(value, "cpu")) {
    moved = value.attr("cpu")();
    if (nb::try_cast(moved, array, false)) return array;
  }
  try {
    moved = nb::module_::import_("numpy").attr("asarray")(value, "float32");
  } catch (const nb::python_error&) {
    throw EngineError(std::string(what) + " is a " + python_type_of(value) +
                      ", which is no array of numbers (expected a numpy array, a tensor or "
                      "nested lists)");
  }
  if (nb::try_cast(moved, array, false)) return array;
  throw EngineError(std::string(what) + " is a " + python_type_of(value) + ", which is no array");
}

}  // namespace

nb::object input_array(std::span<const float> values, size_t d0, size_t d1, size_t d2) {
  auto owned = std::make_unique<float[]>(values.size());
  std::memcpy(owned.get(), values.data(), values.size_bytes());
  float* data = owned.get();
  nb::capsule owner(owned.release(), [](void* p) noexcept { delete[] static_cast<float*>(p); });
  return nb::cast(nb::ndarray<nb::numpy, float, nb::ndim<3>>(data, {d0, d1, d2}, owner));
}

void read_output(nb::handle value, const std::vector<size_t>& shape, std::string_view what,
                 std::vector<float>& into) {
  const AnyArray array = cpu_array(value, what);
  std::vector<size_t> got(array.ndim());
  for (size_t i = 0; i < got.size(); ++i) got[i] = array.shape(i);
  if (got != shape) {
    throw EngineError(std::string(what) + " has shape " + shape_text(got) + "; expected " +
                      shape_text(shape));
  }
  float (*read)(const void*, int64_t) = nullptr;
  if (!element_reader(array.dtype(), read)) {
    throw EngineError(std::string(what) +
                      " is not of a floating dtype (float32, float64, float16 or bfloat16)");
  }
  size_t total = 1;
  for (size_t d : shape) total *= d;
  into.resize(total);
  // Every element by its strides (in elements), so that a transposed or sliced view is read
  // in place without a copy.
  std::vector<size_t> index(shape.size(), 0);
  for (size_t n = 0; n < total; ++n) {
    int64_t offset = 0;
    for (size_t d = 0; d < shape.size(); ++d)
      offset += static_cast<int64_t>(index[d]) * array.stride(d);
    into[n] = read(array.data(), offset);
    for (size_t d = shape.size(); d-- > 0;) {
      if (++index[d] < shape[d]) break;
      index[d] = 0;
    }
  }
}

std::string python_type_of(nb::handle value) {
  return nb::cast<std::string>(nb::type_name(value.type()));
}

std::string python_repr(nb::handle value, size_t limit) {
  try {
    std::string text = nb::cast<std::string>(nb::repr(value));
    return text.size() > limit ? text.substr(0, limit) + "..." : text;
  } catch (const std::exception&) {
    return "?";
  }
}

void read_positions(nb::handle positions, size_t tokens, std::string_view what,
                    std::vector<int64_t>& into) {
  into.clear();
  const std::string expected = "a sequence of " + std::to_string(tokens) + " integers";
  nb::object items;
  try {
    items = nb::hasattr(positions, "tolist") ? positions.attr("tolist")()
                                             : nb::borrow<nb::object>(positions);
    for (nb::handle p : items) {
      // An int, not a bool (an int to Python) nor a float that happens to be whole: a
      // position is an index, and a float one says the engine computed it wrongly.
      if (!nb::isinstance<nb::int_>(p) || nb::isinstance<nb::bool_>(p)) {
        std::string message = std::string(what) + "[" + std::to_string(into.size()) + "] is a " +
                              python_type_of(p) + " (" + python_repr(p) +
                              "); expected an integer position: " + expected;
        if (nb::isinstance<nb::list>(p) || nb::isinstance<nb::tuple>(p)) {
          message += " (is the pair (out, positions) instead of (positions, out)?)";
        }
        throw EngineError(message);
      }
      into.push_back(nb::cast<int64_t>(p));
    }
  } catch (const nb::python_error&) {
    throw EngineError(std::string(what) + " is a " + python_type_of(positions) + " (" +
                      python_repr(positions) + "); expected " + expected);
  } catch (const nb::cast_error&) {
    throw EngineError(std::string(what) + "[" + std::to_string(into.size()) +
                      "] is an integer out of the range of int64; expected " + expected);
  }
  if (into.size() != tokens) {
    throw EngineError(std::string(what) + " holds " + std::to_string(into.size()) +
                      " positions; expected " + std::to_string(tokens) + ", one per token");
  }
}

}  // namespace kvfuzz::python
