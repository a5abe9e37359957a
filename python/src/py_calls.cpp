#include "py_calls.h"

#include <nanobind/stl/string.h>

#include <string>
#include <utility>

#include "arrays.h"
#include "kvfuzz/dtype.h"

namespace nb = nanobind;

namespace kvfuzz::python {

doors::HelloReply read_declarations(nb::handle engine, const Layout& layout) {
  // The attributes are written as hello's reply and read by its reader.
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

namespace {

// kvfuzz needs a result's length and each element by index: a generator or a set is the
// engine's answer in the wrong shape, said as such (not as the TypeError of our len()).
bool is_sequence(nb::handle value) {
  return nb::hasattr(value, "__len__") && nb::hasattr(value, "__getitem__") &&
         !nb::isinstance<nb::str>(value);
}

}  // namespace

std::vector<std::pair<nb::object, nb::object>> step_pairs(nb::handle results, size_t chunks,
                                                          std::string_view values) {
  const std::string pair_name = "(positions, " + std::string(values) + ") pair";
  if (!is_sequence(results)) {
    throw EngineError("step returned a " + python_type_of(results) + " (" + python_repr(results) +
                      "); expected a list of " + std::to_string(chunks) + " " + pair_name +
                      "s, one per chunk, in the chunks' order");
  }
  const size_t count = calling_python("len() of step's result", [&] { return nb::len(results); });
  if (count != chunks) {
    throw EngineError("step returned " + std::to_string(count) + " results for " +
                      std::to_string(chunks) + " chunks; expected one " + pair_name + " per chunk");
  }
  std::vector<std::pair<nb::object, nb::object>> pairs;
  for (size_t i = 0; i < chunks; ++i) {
    const std::string what = "step's result " + std::to_string(i);
    const nb::object pair = calling_python(what, [&] { return results[i]; });
    if (!is_sequence(pair) || calling_python(what, [&] { return nb::len(pair); }) != 2) {
      throw EngineError(what + " is a " + python_type_of(pair) + " (" + python_repr(pair) +
                        "); expected a " + pair_name);
    }
    pairs.emplace_back(calling_python(what, [&] { return nb::object(pair[0]); }),
                       calling_python(what, [&] { return nb::object(pair[1]); }));
  }
  return pairs;
}

std::shared_ptr<nb::object> held_by_cpp(nb::object object) {
  return std::shared_ptr<nb::object>(new nb::object(std::move(object)), [](nb::object* p) {
    nb::gil_scoped_acquire gil;
    delete p;
  });
}

std::shared_ptr<IdleEngines> idle_engines() {
  return std::shared_ptr<IdleEngines>(new IdleEngines, [](IdleEngines* p) {
    nb::gil_scoped_acquire gil;
    delete p;
  });
}

nb::object engine_object(nb::handle factory, IdleEngines& idle, nb::handle config) {
  if (!idle.empty()) {
    // An engine of a finished case, handed this one (docs/python.md, "Engine reuse"): it must
    // forget everything of the last, as a new object would.
    nb::object engine = std::move(idle.back());
    idle.pop_back();
    calling_python("new_case", [&] { engine.attr("new_case")(config); });
    return engine;
  }
  nb::object engine = calling_python("the engine factory", [&] { return factory(config); });
  if (engine.is_none()) throw EngineError("the engine factory returned None");
  return engine;
}

void release_engine(nb::object& engine, IdleEngines* idle) {
  nb::gil_scoped_acquire gil;
  if (idle != nullptr && engine.is_valid() && nb::hasattr(engine, "new_case")) {
    idle->push_back(std::move(engine));
  }
  engine.reset();
}

}  // namespace kvfuzz::python
