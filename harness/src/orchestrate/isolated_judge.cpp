#include <nlohmann/json.hpp>

#include "kvfuzz/orchestrate.h"
#include "orchestrate/outcome_codec.h"
#include "support/isolated_call.h"

namespace kvfuzz {

PropertyOutcome judge_property(Property property, const Scenario& scenario,
                               const EngineInfo& engine, const Isolation& isolation,
                               std::string* ended) {
  if (!forks_for(engine, isolation)) return judge_property(property, scenario, engine);
  const IsolatedAnswer answer = call_isolated(
      [&] {
        return orchestrate::outcome_to_json(judge_property(property, scenario, engine))
            .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
      },
      isolation.timeout);
  if (answer.answer) return orchestrate::outcome_from_json(nlohmann::json::parse(*answer.answer));
  PropertyOutcome crashed;
  crashed.pass = false;
  crashed.report = describe_end(*answer.ended, "it was judged") + "\n";
  if (ended != nullptr) *ended = answer.ended->signature;
  return crashed;
}

}  // namespace kvfuzz
