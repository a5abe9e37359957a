#include <nlohmann/json.hpp>
#include <utility>
#include <vector>

#include "corpus/provenance.h"
#include "kvfuzz/orchestrate.h"
#include "orchestrate/outcome_codec.h"
#include "support/isolated_call.h"

namespace kvfuzz {

FixtureReplay replay_fixture(const Scenario& scenario, const Prepared& prepared,
                             const EngineInfo& engine, const EngineDeclarations& declared) {
  FixtureReplay replay;
  if (auto problem = judge_expect(scenario, prepared)) {
    replay.status = FixtureReplay::Status::wrong_expect;
    replay.detail = std::move(*problem);
    return replay;
  }
  // A program the engine cannot be given (an operation it does not announce, a layout
  // outside its supports, attention for a whole-model engine) says nothing about it.
  if (auto why = unjudgeable(scenario, declared)) {
    replay.status = FixtureReplay::Status::skipped;
    replay.detail = std::move(*why);
    return replay;
  }
  // Prefix, which every fixture states, then the property a regression was shrunk under.
  std::vector<Property> properties = {Property::prefix};
  if (const Property recorded = recorded_property(scenario); recorded != Property::prefix) {
    properties.push_back(recorded);
  }
  for (const Property property : properties) {
    PropertyOutcome outcome = judge_property(property, scenario, prepared, engine);
    if (!outcome.pass) {
      replay.status = FixtureReplay::Status::fail;
      replay.property = property;
      replay.detail = outcome.report;
      replay.outcome = std::move(outcome);
      return replay;
    }
    if (property == Property::prefix) replay.outcome = std::move(outcome);
  }
  return replay;
}

namespace {

using Json = nlohmann::json;

// What crosses the pipe from the child: the whole replay.
std::string encode(const FixtureReplay& r) {
  return Json{{"status", static_cast<int>(r.status)},
              {"detail", r.detail},
              {"property", static_cast<int>(r.property)},
              {"outcome", orchestrate::outcome_to_json(r.outcome)}}
      .dump(-1, ' ', false, Json::error_handler_t::replace);
}

FixtureReplay decode(const std::string& text) {
  const Json j = Json::parse(text);
  FixtureReplay r;
  r.status = static_cast<FixtureReplay::Status>(j.at("status").get<int>());
  r.detail = j.at("detail").get<std::string>();
  r.property = static_cast<Property>(j.at("property").get<int>());
  r.outcome = orchestrate::outcome_from_json(j.at("outcome"));
  return r;
}

}  // namespace

bool forks_for(const EngineInfo& engine, const Isolation& isolation) {
  return isolation.fork && !engine.out_of_process;
}

FixtureReplay replay_fixture(const Scenario& scenario, const Prepared& prepared,
                             const EngineInfo& engine, const EngineDeclarations& declared,
                             const Isolation& isolation) {
  if (!forks_for(engine, isolation)) return replay_fixture(scenario, prepared, engine, declared);
  const IsolatedAnswer answer =
      call_isolated([&] { return encode(replay_fixture(scenario, prepared, engine, declared)); },
                    isolation.timeout);
  if (answer.answer) return decode(*answer.answer);
  FixtureReplay crashed;
  crashed.status = FixtureReplay::Status::crashed;
  crashed.crash_signature = answer.ended->signature;
  crashed.detail = describe_end(*answer.ended, "it replayed the fixture");
  crashed.outcome.pass = false;
  return crashed;
}

}  // namespace kvfuzz
