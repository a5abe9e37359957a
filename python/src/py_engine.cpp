#include "py_engine.h"

#include <nanobind/stl/string.h>

#include <csignal>
#include <memory>
#include <utility>
#include <vector>

#include "arrays.h"
#include "doors/exec_protocol.h"
#include "kvfuzz/dtype.h"
#include "py_calls.h"
#include "py_model_engine.h"
#include "python_types.h"

namespace nb = nanobind;

namespace kvfuzz::python {

namespace {

// A sig_atomic_t: the SIGINT handler of a forked check sets it too, and run_check_plan polls it
// as its stop flag (check_binding.cpp).
volatile std::sig_atomic_t g_interrupted = 0;

class PythonEngine final : public Engine {
 public:
  PythonEngine(nb::object engine, const EngineConfig& config, std::shared_ptr<IdleEngines> idle)
      : engine_(std::move(engine)),
        layout_(config.layout),
        declared_(read_declarations(engine_, config.layout)),
        convert_(calling_python(
            "the engine's inputs",
            [&] {
              return nb::module_::import_("kvfuzz._inputs").attr("input_converter")(engine_);
            })),
        idle_(std::move(idle)) {}

  ~PythonEngine() override { release_engine(engine_, idle_.get()); }

  EngineCapabilities capabilities() const override { return declared_.capabilities; }
  BitwiseClaims bitwise_claims() const override { return declared_.bitwise; }
  EngineNumerics numerics() const override { return declared_.numerics; }
  EngineSupports supports() const override { return declared_.supports; }

  void step(std::span<const ChunkIn> chunks, std::span<ChunkOut> outs) override {
    const Layout& l = layout_;
    nb::list list;
    for (const ChunkIn& c : chunks) {
      const auto tokens = static_cast<size_t>(c.tokens);
      Chunk chunk{
          c.seq, c.tokens,
          input_array(c.q, tokens, static_cast<size_t>(l.q_heads), static_cast<size_t>(l.head_dim)),
          input_array(c.k, tokens, static_cast<size_t>(l.kv_heads),
                      static_cast<size_t>(l.head_dim)),
          input_array(c.v, tokens, static_cast<size_t>(l.kv_heads),
                      static_cast<size_t>(l.value_dim))};
      if (!convert_.is_none()) {  // the engine's `inputs` (kvfuzz/_inputs.py): torch tensors
        calling_python("making the inputs torch tensors (the engine's `inputs`)", [&] {
          for (nb::object* array : {&chunk.q, &chunk.k, &chunk.v}) *array = convert_(*array);
        });
      }
      list.append(std::move(chunk));
    }
    const nb::object results = calling_python("step", [&] { return engine_.attr("step")(list); });
    const auto pairs = step_pairs(results, chunks.size(), "out");
    for (size_t i = 0; i < chunks.size(); ++i) {
      const std::string what = "step's result " + std::to_string(i);
      const auto tokens = static_cast<size_t>(chunks[i].tokens);
      read_positions(pairs[i].first, tokens, what + "'s positions", outs[i].positions);
      read_output(pairs[i].second,
                  {tokens, static_cast<size_t>(l.q_heads), static_cast<size_t>(l.value_dim)},
                  what + "'s out", outs[i].out);
    }
  }

  void reset(int seq) override {
    calling_python("reset", [&] { engine_.attr("reset")(seq); });
  }
  void truncate(int seq, int64_t keep) override {
    calling_python("truncate", [&] { engine_.attr("truncate")(seq, keep); });
  }
  void fork(int src, int dst) override {
    calling_python("fork", [&] { engine_.attr("fork")(src, dst); });
  }

 private:
  nb::object engine_;
  Layout layout_;
  doors::HelloReply declared_;
  nb::object convert_;  // None, or what makes each input array what the engine's `inputs` asks
  std::shared_ptr<IdleEngines> idle_;
};

}  // namespace

std::string format_python_error(const nb::python_error& error) {
  // "ValueError: boom" first (what a one-line summary keeps), then the traceback.
  try {
    const nb::module_ traceback = nb::module_::import_("traceback");
    const nb::str join("");
    std::string text = nb::cast<std::string>(
        join.attr("join")(traceback.attr("format_exception_only")(error.type(), error.value())));
    if (error.traceback().is_valid() && !error.traceback().is_none()) {
      text +=
          "Traceback (most recent call last):\n" +
          nb::cast<std::string>(join.attr("join")(traceback.attr("format_tb")(error.traceback())));
    }
    while (!text.empty() && text.back() == '\n') text.pop_back();
    // Indented below the first line, so that a report's detail reads as one block.
    std::string indented;
    for (const char c : text) {
      indented += c;
      if (c == '\n') indented += "    ";
    }
    return indented;
  } catch (const std::exception&) {
    return error.what();
  }
}

bool interrupted() {
  return g_interrupted != 0;
}
void clear_interrupted() {
  g_interrupted = 0;
}
volatile std::sig_atomic_t* interrupted_flag() {
  return &g_interrupted;
}

std::shared_ptr<const EngineInfo> python_engine_info(nb::object factory, std::string name) {
  auto info = std::make_shared<EngineInfo>();
  info->name = std::move(name);
  // A class saying `whole_model = True` runs whole models (py_model_engine.cpp).
  const nb::object declared = nb::getattr(factory, "whole_model", nb::none());
  if (!declared.is_none() && !nb::isinstance<nb::bool_>(declared)) {
    throw nb::type_error(("the engine factory's whole_model: expected True or False, got a " +
                          python_type_of(declared) + " (" + python_repr(declared) + ")")
                             .c_str());
  }
  const bool whole_model = !declared.is_none() && nb::cast<bool>(declared);
  info->description =
      whole_model ? "a Python whole-model engine, in-process" : "a Python engine, in-process";
  // The factory lives as long as the EngineInfo (shared, so copies of `make` share it).
  auto held = held_by_cpp(std::move(factory));
  auto idle = idle_engines();
  if (whole_model) {
    info->make_model = python_model_factory(held, idle);
    return info;
  }
  info->make = [held, idle](const EngineConfig& config) -> std::unique_ptr<Engine> {
    nb::object engine = engine_object(*held, *idle, nb::cast(config));
    return std::make_unique<PythonEngine>(std::move(engine), config, idle);
  };
  return info;
}

}  // namespace kvfuzz::python
