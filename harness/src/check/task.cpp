#include "check/task.h"

#include <chrono>
#include <exception>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "corpus/provenance.h"

namespace kvfuzz::check {

const Scenario& CaseCache::scenario(const CheckPlan& plan, int case_index) {
  if (case_index != case_index_) {
    scenario_ = check_case_scenario(plan, plan.case_seeds.at(static_cast<size_t>(case_index)));
    prepared_.clear();
    case_index_ = case_index;
  }
  return scenario_;
}

const Prepared& CaseCache::prepared(const EngineNumerics& numerics) {
  for (const Prepared& p : prepared_) {
    if (p.numerics == numerics) return p;
  }
  return prepared_.emplace_back(prepare(scenario_, numerics));
}

std::string while_judging(const std::optional<Property>& property) {
  return property ? " while judging " + std::string(property_name(*property)) : "";
}

TaskResult judge_task(const CheckPlan& plan, TaskId task, CaseCache& cache,
                      const std::function<void(Property, const TaskResult&)>& judging) {
  const CheckEngine& engine = plan.engines.at(task.engine);
  const Scenario& scenario = cache.scenario(plan, task.case_index);
  TaskResult result;
  if (const auto outside = unjudgeable(scenario, engine.declared)) {
    result.skipped = *outside;
    return result;
  }
  const auto start = std::chrono::steady_clock::now();
  std::optional<Property> current;
  try {
    for (const Property property : plan.properties) {
      current = property;
      if (judging) judging(property, result);
      // The case's reference for the engine's numerics, shared with the other engines of
      // the case (prefix judges against it; the other properties prepare their variants).
      const Prepared& prepared = cache.prepared(engine.declared.numerics);
      const PropertyOutcome outcome = judge_property(property, scenario, prepared, *engine.info);
      if (property == Property::prefix) {
        // A model scenario's rows are its logits rows, all compared.
        result.rows =
            scenario.model ? static_cast<long>(prepared.slots.size()) : outcome.rows_compared;
        result.unjudged = outcome.rows_unjudged;
      }
      PropertyResult judged;
      judged.property = property;
      judged.pass = outcome.pass;
      if (!outcome.pass) {
        judged.signature = outcome.signature ? to_string(*outcome.signature) : "";
        judged.line = failure_line(outcome);
        judged.report = outcome.report;
      }
      result.properties.push_back(judged);
    }
  } catch (const std::exception& e) {
    // The properties turn an engine's errors into engine_error divergences; what still
    // escapes (a failure to create the engine outside a run) is the engine's error too.
    result.failure = TaskFailure{
        "engine-error", "engine error" + while_judging(current) + ": " + e.what(),
        "the engine failed outside a run" + while_judging(current) + ": " + e.what(), current};
  }
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return result;
}

std::string encode(const TaskResult& result) {
  nlohmann::json j;
  if (result.skipped) j["skipped"] = *result.skipped;
  j["rows"] = result.rows;
  j["unjudged"] = result.unjudged;
  j["seconds"] = result.seconds;
  j["properties"] = nlohmann::json::array();
  for (const PropertyResult& p : result.properties) {
    j["properties"].push_back({{"property", property_name(p.property)},
                               {"pass", p.pass},
                               {"signature", p.signature},
                               {"line", p.line},
                               {"report", p.report}});
  }
  if (result.failure) {
    j["failure"] = {{"signature", result.failure->signature},
                    {"line", result.failure->line},
                    {"report", result.failure->report}};
    if (result.failure->judging) {
      j["failure"]["judging"] = property_name(*result.failure->judging);
    }
  }
  // Replaced, not refused: an engine's message may hold bytes that are no UTF-8.
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

TaskResult decode(const std::string& text) {
  try {
    const nlohmann::json j = nlohmann::json::parse(text);
    TaskResult result;
    if (j.contains("skipped")) result.skipped = j.at("skipped").get<std::string>();
    result.rows = j.at("rows").get<long>();
    result.unjudged = j.at("unjudged").get<long>();
    result.seconds = j.at("seconds").get<double>();
    for (const nlohmann::json& p : j.at("properties")) {
      PropertyResult judged;
      const auto property = parse_property(p.at("property").get<std::string>());
      if (!property) throw std::runtime_error("unknown property");
      judged.property = *property;
      judged.pass = p.at("pass").get<bool>();
      judged.signature = p.at("signature").get<std::string>();
      judged.line = p.at("line").get<std::string>();
      judged.report = p.at("report").get<std::string>();
      result.properties.push_back(std::move(judged));
    }
    if (j.contains("failure")) {
      const nlohmann::json& f = j.at("failure");
      result.failure =
          TaskFailure{f.at("signature").get<std::string>(), f.at("line").get<std::string>(),
                      f.at("report").get<std::string>(), std::nullopt};
      if (f.contains("judging")) {
        result.failure->judging = parse_property(f.at("judging").get<std::string>());
        if (!result.failure->judging) throw std::runtime_error("unknown property");
      }
    }
    return result;
  } catch (const nlohmann::json::exception& e) {
    throw std::runtime_error(std::string("a worker's result does not decode: ") + e.what());
  }
}

}  // namespace kvfuzz::check
