#include "py_engine.h"

#include <nanobind/stl/string.h>

#include <csignal>
#include <memory>
#include <utility>
#include <vector>

#include "arrays.h"
#include "doors/exec_protocol.h"
#include "kvfuzz/dtype.h"
#include "python_types.h"

namespace nb = nanobind;

namespace kvfuzz::python {

namespace {

// A sig_atomic_t: the SIGINT handler of a forked check sets it too, and run_check_plan polls it
// as its stop flag (check_binding.cpp).
volatile std::sig_atomic_t g_interrupted = 0;

// Calls `f`; a Python exception becomes an EngineError carrying its traceback.
template <typename F>
auto calling_python(std::string_view what, F&& f) -> decltype(f()) {
  // After Ctrl-C, every further call fails at once, so that the harness unwinds quickly.
  if (g_interrupted) throw EngineError("interrupted (KeyboardInterrupt)");
  try {
    return f();
  } catch (nb::python_error& e) {
    if (e.matches(PyExc_KeyboardInterrupt)) g_interrupted = 1;
    throw EngineError(std::string(what) + " raised " + format_python_error(e));
  }
}

// The declarations an engine object carries, read by the exec protocol's own strict
// reader of hello's reply (one definition of what a declaration may say): the attributes
// are written as that reply, and its complaints name the attribute ("$.numerics.output").
doors::HelloReply read_declarations(nb::handle engine, const Layout& layout) {
  nb::dict reply;
  reply["ok"] = true;
  reply["protocol"] = doors::kOldestProtocol;
  reply["name"] = "python";
  if (nb::hasattr(engine, "capabilities")) {
    reply["capabilities"] = engine.attr("capabilities");
  } else {
    nb::dict can;
    can["truncate"] = nb::hasattr(engine, "truncate");
    can["fork"] = nb::hasattr(engine, "fork");
    reply["capabilities"] = can;
  }
  for (const char* field : {"bitwise", "numerics", "supports"}) {
    if (nb::hasattr(engine, field)) reply[field] = engine.attr(field);
  }
  if (reply.contains("numerics")) {
    // Numerics may follow the layout's dtype (kvfuzz.exec_server.layout_numerics, the one
    // reading of that form for both Python doors).
    reply["numerics"] = calling_python("the engine's numerics for the layout", [&] {
      return nb::module_::import_("kvfuzz.exec_server")
          .attr("layout_numerics")(reply["numerics"], std::string(dtype_name(layout.dtype)));
    });
  }
  const std::string line = calling_python("writing the engine's declarations as JSON", [&] {
    return nb::cast<std::string>(nb::module_::import_("json").attr("dumps")(reply));
  });
  try {
    return doors::read_hello_reply(line, doors::kOldestProtocol);
  } catch (const EngineError& e) {
    // "the engine's answer to hello does not follow protocol 1: $.numerics...": here the
    // answer is the engine's attributes.
    std::string message = e.what();
    const std::string::size_type path = message.find("$.");
    if (path != std::string::npos) message = message.substr(path + 2);
    throw EngineError("the engine's declarations: " + message);
  }
}

// Engine objects whose class defines new_case(config), idle between uses: kvfuzz makes an
// engine for every case, property variant and shrink candidate (about 11 a case for all
// six properties), and such an object is handed the next one's config instead of being
// built again. Touched only with the GIL held.
using IdleEngines = std::vector<nb::object>;

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

  ~PythonEngine() override {
    nb::gil_scoped_acquire gil;
    if (idle_ && nb::hasattr(engine_, "new_case")) idle_->push_back(std::move(engine_));
    engine_.reset();
  }

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
    // kvfuzz needs the results' length and each by index: a generator or a set is the
    // engine's answer in the wrong shape, said as such (not as the TypeError of our len()).
    const auto sequence = [](nb::handle value) {
      return nb::hasattr(value, "__len__") && nb::hasattr(value, "__getitem__") &&
             !nb::isinstance<nb::str>(value);
    };
    if (!sequence(results)) {
      throw EngineError("step returned a " + python_type_of(results) + " (" + python_repr(results) +
                        "); expected a list of " + std::to_string(chunks.size()) +
                        " (positions, out) pairs, one per chunk, in the chunks' order");
    }
    const size_t count = calling_python("len() of step's result", [&] { return nb::len(results); });
    if (count != chunks.size()) {
      throw EngineError("step returned " + std::to_string(count) + " results for " +
                        std::to_string(chunks.size()) +
                        " chunks; expected one (positions, out) pair per chunk");
    }
    for (size_t i = 0; i < chunks.size(); ++i) {
      const std::string what = "step's result " + std::to_string(i);
      const nb::object pair = calling_python(what, [&] { return results[i]; });
      if (!sequence(pair) || calling_python(what, [&] { return nb::len(pair); }) != 2) {
        throw EngineError(what + " is a " + python_type_of(pair) + " (" + python_repr(pair) +
                          "); expected a (positions, out) pair");
      }
      const auto tokens = static_cast<size_t>(chunks[i].tokens);
      read_positions(pair[0], tokens, what + "'s positions", outs[i].positions);
      read_output(pair[1],
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
  info->description = "a Python engine, in-process";
  // The factory object lives as long as the EngineInfo (shared, so copies of `make` share it).
  auto held = std::shared_ptr<nb::object>(new nb::object(std::move(factory)), [](nb::object* p) {
    nb::gil_scoped_acquire gil;
    delete p;
  });
  auto idle = std::shared_ptr<IdleEngines>(new IdleEngines, [](IdleEngines* p) {
    nb::gil_scoped_acquire gil;
    delete p;
  });
  info->make = [held, idle](const EngineConfig& config) -> std::unique_ptr<Engine> {
    if (!idle->empty()) {
      // An engine of a finished case, handed this one (docs/python.md, "Engine reuse"): it
      // must forget everything of the last, as a new object would.
      nb::object engine = std::move(idle->back());
      idle->pop_back();
      calling_python("new_case", [&] { engine.attr("new_case")(nb::cast(config)); });
      return std::make_unique<PythonEngine>(std::move(engine), config, idle);
    }
    nb::object engine =
        calling_python("the engine factory", [&] { return (*held)(nb::cast(config)); });
    if (engine.is_none()) throw EngineError("the engine factory returned None");
    return std::make_unique<PythonEngine>(std::move(engine), config, idle);
  };
  return info;
}

}  // namespace kvfuzz::python
