// probe_declarations_isolated (kvfuzz/check.h): an engine is made and asked for its
// declarations in a forked child (call_isolated), as its cases later are in workers, so
// that a plugin that crashes or hangs in its create, its declarations or its destroy is one
// line instead of kvfuzz dying with it before the first case. The answer crosses a pipe as
// JSON, every field of it (run/declarations_json.h).
#include <cstdio>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>

#include "kvfuzz/check.h"
#include "run/declarations_json.h"
#include "support/isolated_call.h"

namespace kvfuzz {

namespace {

using Json = nlohmann::json;

// In the child: the declarations, or the engine's error.
std::string probe_answer(const EngineInfo& engine) {
  Json j;
  try {
    j["declarations"] = declarations_json(probe_declarations(engine));
  } catch (const std::exception& e) {
    j["error"] = e.what();
  }
  // Replaced, not refused: an engine's message may hold bytes that are no UTF-8.
  return j.dump(-1, ' ', false, Json::error_handler_t::replace);
}

}  // namespace

EngineDeclarations probe_declarations_isolated(const EngineInfo& engine,
                                               std::chrono::milliseconds timeout) {
  if (engine.out_of_process) return probe_declarations(engine);
  const IsolatedAnswer answer = call_isolated([&] { return probe_answer(engine); }, timeout);
  const std::string who = "engine '" + engine.name + "'";
  if (!answer.answer) {
    const IsolatedEnd& end = *answer.ended;
    if (end.signature == "timeout") {
      char limit[32];
      std::snprintf(limit, sizeof limit, "%g", std::chrono::duration<double>(timeout).count());
      throw ProbeCrash(engine.name, "timeout",
                       who + " was still being made or asked for its declarations after " + limit +
                           " s (in a child process, now killed)");
    }
    throw ProbeCrash(engine.name, end.signature,
                     who + " " + end.how +
                         " while it was made and asked for its declarations (in a child process)");
  }
  const auto undecodable = [&](const char* why) {
    return std::runtime_error("kvfuzz check: the declarations of " + who +
                              " do not decode: " + why);
  };
  Json j;
  try {
    j = Json::parse(*answer.answer);
    if (j.contains("error")) throw EngineError(j.at("error").get<std::string>());
    return declarations_from_json(j.at("declarations"));
  } catch (const Json::exception& e) {
    throw undecodable(e.what());
  } catch (const std::invalid_argument& e) {
    throw undecodable(e.what());
  }
}

}  // namespace kvfuzz
