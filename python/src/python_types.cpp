#include "python_types.h"

#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <string>

#include "kvfuzz/engine.h"

namespace nb = nanobind;

namespace kvfuzz::python {

void bind_engine_types(nb::module_& m) {
  nb::class_<EngineConfig>(m, "EngineConfig",
                           "What an engine is made for: the scenario's layout, its sequences and "
                           "its physical placement (the exec protocol's hello, as attributes).")
      .def_prop_ro("q_heads", [](const EngineConfig& c) { return c.layout.q_heads; })
      .def_prop_ro("kv_heads", [](const EngineConfig& c) { return c.layout.kv_heads; })
      .def_prop_ro(
          "group", [](const EngineConfig& c) { return c.layout.group(); },
          "q heads per kv head: q head h reads kv head h // group")
      .def_prop_ro("head_dim", [](const EngineConfig& c) { return c.layout.head_dim; })
      .def_prop_ro("value_dim", [](const EngineConfig& c) { return c.layout.value_dim; })
      .def_prop_ro("page_size", [](const EngineConfig& c) { return c.layout.page_size; })
      .def_prop_ro(
          "dtype", [](const EngineConfig& c) { return std::string(dtype_name(c.layout.dtype)); },
          "'f32', 'f16' or 'bf16': q, k and v are already rounded to it")
      .def_prop_ro("scale", [](const EngineConfig& c) { return c.layout.softmax_scale(); })
      .def_prop_ro(
          "rope_theta", [](const EngineConfig& c) { return c.layout.rope_theta; },
          "RoPE base (NeoX half-split), or None")
      .def_prop_ro(
          "window", [](const EngineConfig& c) { return c.layout.window; },
          "sliding window (the query at p sees keys p - window + 1 .. p), or None")
      .def_prop_ro("sequences", [](const EngineConfig& c) { return c.sequences; })
      .def_prop_ro(
          "page_order", [](const EngineConfig& c) { return c.page_order; },
          "the order in which a paged engine hands out its physical pages")
      .def_prop_ro(
          "poison", [](const EngineConfig& c) { return std::string(poison_name(c.poison)); },
          "'nan', '+inf', '-inf' or 'huge': what unused cache slots should hold")
      .def("__repr__", [](const EngineConfig& c) {
        const Layout& l = c.layout;
        return "EngineConfig(q_heads=" + std::to_string(l.q_heads) +
               ", kv_heads=" + std::to_string(l.kv_heads) +
               ", head_dim=" + std::to_string(l.head_dim) +
               ", value_dim=" + std::to_string(l.value_dim) + ", dtype='" +
               std::string(dtype_name(l.dtype)) + "', sequences=" + std::to_string(c.sequences) +
               ")";
      });

  nb::class_<Chunk>(m, "Chunk",
                    "One sequence's new tokens in a step: q[token, q_head, head_dim], "
                    "k[token, kv_head, head_dim], v[token, kv_head, value_dim] (float32 numpy "
                    "arrays the engine owns)")
      .def_ro("seq", &Chunk::seq)
      .def_ro("tokens", &Chunk::tokens)
      .def_ro("q", &Chunk::q)
      .def_ro("k", &Chunk::k)
      .def_ro("v", &Chunk::v)
      .def("__repr__", [](const Chunk& c) {
        return "Chunk(seq=" + std::to_string(c.seq) + ", tokens=" + std::to_string(c.tokens) + ")";
      });
}

}  // namespace kvfuzz::python
