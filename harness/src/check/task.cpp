#include "check/task.h"

#include <chrono>
#include <exception>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "corpus/provenance.h"

namespace kvfuzz::check {

CaseJudge& CaseCache::judge(const CheckPlan& plan, int case_index) {
  if (case_index != case_index_ || !judge_) {
    judge_.emplace(check_case_scenario(plan, plan.case_seeds.at(static_cast<size_t>(case_index))));
    case_index_ = case_index;
  }
  return *judge_;
}

namespace {

// The case judge's verdict as a task's result (what crosses a worker's pipe).
TaskResult task_result(const CaseVerdict& verdict) {
  TaskResult result;
  result.skipped = verdict.skipped;
  result.rows = verdict.rows_compared;
  result.unjudged = verdict.rows_unjudged;
  result.bound_used = verdict.bound_used;
  for (const auto& [property, outcome] : verdict.outcomes) {
    PropertyResult judged;
    judged.property = property;
    judged.pass = outcome.pass;
    if (!outcome.pass) {
      judged.signature = outcome.signature ? to_string(*outcome.signature) : "";
      judged.line = failure_line(outcome);
      judged.report = outcome.report;
    }
    result.properties.push_back(std::move(judged));
  }
  if (verdict.engine_error) {
    const std::string& what = *verdict.engine_error;
    const std::string under = while_judging(verdict.error_while);
    result.failure =
        TaskFailure{"engine-error", "engine error" + under + ": " + what,
                    "the engine failed outside a run" + under + ": " + what, verdict.error_while};
  }
  return result;
}

}  // namespace

TaskResult judge_task(const CheckPlan& plan, TaskId task, CaseCache& cache,
                      const std::function<void(Property, const TaskResult&)>& judging) {
  const CheckEngine& engine = plan.engines.at(task.engine);
  CaseJudge& judge = cache.judge(plan, task.case_index);
  const auto start = std::chrono::steady_clock::now();
  std::function<void(Property, const CaseVerdict&)> before;
  if (judging) {
    before = [&judging](Property p, const CaseVerdict& so_far) { judging(p, task_result(so_far)); };
  }
  TaskResult result =
      task_result(judge.judge(plan.properties, *engine.info, engine.declared, before));
  if (!result.skipped) {
    result.seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }
  return result;
}

std::string encode(const TaskResult& result) {
  nlohmann::json j;
  if (result.skipped) j["skipped"] = *result.skipped;
  j["rows"] = result.rows;
  j["unjudged"] = result.unjudged;
  j["bound_used"] = result.bound_used;
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
    result.bound_used = j.at("bound_used").get<double>();
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
