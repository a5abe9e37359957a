#include "check_summary.h"

#include <cstdio>
#include <nlohmann/json.hpp>

#include "support/text.h"

namespace kvfuzz::cli {

std::string engine_verdict(const CheckEngine& engine, const CheckEngineResult& result) {
  if (engine.info->mutant) return result.failed() ? "rejected" : "not-rejected";
  return result.failed() ? "fail" : "pass";
}

bool verdict_ok(const CheckEngine& engine, const CheckEngineResult& result) {
  return engine.info->mutant == result.failed();
}

namespace {

// What kind of test case a finding belongs to: its property, or the first part of its
// signature ("crash", "exit", "timeout", "engine-error").
std::string finding_case(const CheckFinding& finding) {
  if (finding.property) return std::string(property_name(*finding.property));
  return finding.signature.substr(0, finding.signature.find('/'));
}

std::string failure_text(const CheckFinding& finding, const std::string& command) {
  return "case " + std::to_string(finding.case_number) + " (case seed " +
         std::to_string(finding.seed) + "), " + std::to_string(finding.duplicates) +
         " later duplicates\nfixture: " + finding.fixture.string() + "\nreproduce: " + command +
         "\n\n" + finding.report;
}

}  // namespace

std::string junit_xml(const CheckPlan& plan, const CheckResult& result,
                      const FindingCommands& commands) {
  std::string suites;
  int tests = 0, failures = 0;
  for (size_t e = 0; e < plan.engines.size(); ++e) {
    const CheckEngine& engine = plan.engines[e];
    const CheckEngineResult& tally = result.engines[e];
    std::vector<std::string> names;
    for (const Property p : plan.properties) names.emplace_back(property_name(p));
    for (const CheckFinding& f : tally.findings) {
      const std::string name = finding_case(f);
      if (std::find(names.begin(), names.end(), name) == names.end()) names.push_back(name);
    }
    if (engine.info->mutant) names.emplace_back("rejected");
    std::string cases;
    int suite_failures = 0;
    for (const std::string& name : names) {
      std::string body;
      for (size_t i = 0; i < tally.findings.size(); ++i) {
        const CheckFinding& f = tally.findings[i];
        if (finding_case(f) != name) continue;
        const std::string text = failure_text(f, commands[e][i]);
        if (f.ignored) {
          body += "<system-out>" + markup_text("ignored (--ignore " + f.signature + "): " + text) +
                  "</system-out>";
        } else if (!f.known.empty()) {
          body += "<system-out>" +
                  markup_text("known bug (--known " + f.known.string() + "): " + text) +
                  "</system-out>";
        } else if (!engine.info->mutant) {
          body += "<failure type=\"" + markup_text(f.signature) + "\" message=\"" +
                  markup_text(f.line) + "\">" + markup_text(text) + "</failure>";
          ++suite_failures;
        } else {
          body += "<system-out>" + markup_text("rejected by: " + text) + "</system-out>";
        }
      }
      if (name == "rejected" && !tally.failed()) {
        body +=
            "<failure type=\"not-rejected\" message=\"the suite missed this mutant\">" +
            markup_text("no chosen property failed in " + std::to_string(tally.cases) + " cases") +
            "</failure>";
        ++suite_failures;
      }
      cases += "<testcase classname=\"" + markup_text(engine.info->name) + "\" name=\"" +
               markup_text(name) + "\">" + body + "</testcase>\n";
    }
    char seconds[32];
    std::snprintf(seconds, sizeof seconds, "%.3f", tally.seconds);
    suites += "<testsuite name=\"" + markup_text(engine.info->name) + "\" tests=\"" +
              std::to_string(names.size()) + "\" failures=\"" + std::to_string(suite_failures) +
              "\" errors=\"0\" time=\"" + seconds + "\">\n" + cases + "</testsuite>\n";
    tests += static_cast<int>(names.size());
    failures += suite_failures;
  }
  return "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuites name=\"kvfuzz check\" tests=\"" +
         std::to_string(tests) + "\" failures=\"" + std::to_string(failures) +
         "\" errors=\"0\">\n" + suites + "</testsuites>\n";
}

std::string summary_json(const CheckPlan& plan, const CheckResult& result,
                         const FindingCommands& commands) {
  nlohmann::json engines = nlohmann::json::array();
  nlohmann::json findings = nlohmann::json::array();
  for (size_t e = 0; e < plan.engines.size(); ++e) {
    const CheckEngine& engine = plan.engines[e];
    const CheckEngineResult& tally = result.engines[e];
    nlohmann::json failing = nlohmann::json::object();
    for (const Property p : plan.properties) {
      failing[std::string(property_name(p))] = tally.failing[static_cast<size_t>(p)];
    }
    int ignored = 0;
    for (size_t i = 0; i < tally.findings.size(); ++i) {
      const CheckFinding& f = tally.findings[i];
      if (f.ignored) ignored += 1 + f.duplicates;
      findings.push_back(
          {{"engine", engine.info->name},
           {"signature", f.signature},
           {"case", f.case_number},
           {"seed", f.seed},
           // The same as a string: case seeds are uint64, and a JSON reader that keeps
           // numbers as doubles (JavaScript's) rounds those above 2^53.
           {"seed_text", std::to_string(f.seed)},
           {"fixture", f.ignored ? nlohmann::json() : nlohmann::json(f.fixture.string())},
           {"command", commands[e][i]},
           // The property that failed, or the one being judged when it crashed, exited,
           // hung or failed (null when none was yet).
           {"property", f.property  ? nlohmann::json(property_name(*f.property))
                        : f.judging ? nlohmann::json(property_name(*f.judging))
                                    : nlohmann::json()},
           {"message", f.line},
           {"duplicates", f.duplicates},
           {"ignored", f.ignored},
           // The known bug's fixture it shrank to (--known), or null.
           {"known", f.known.empty() ? nlohmann::json() : nlohmann::json(f.known.string())},
           // The earlier finding it shares its root cause with (--known), or null.
           {"same_cause_as",
            f.same_cause_as.empty() ? nlohmann::json() : nlohmann::json(f.same_cause_as)}});
    }
    engines.push_back({{"name", engine.info->name},
                       {"kind", engine.info->mutant ? "mutant" : "honest"},
                       {"verdict", engine_verdict(engine, tally)},
                       {"ok", verdict_ok(engine, tally)},
                       {"cases", tally.cases},
                       {"skipped", tally.skipped},
                       {"rows", tally.rows},
                       {"unjudged", tally.unjudged},
                       {"bound_used", tally.bound_used},
                       {"failing_cases", failing},
                       {"crashes", tally.crashes},
                       {"ignored", ignored}});
  }
  nlohmann::json properties = nlohmann::json::array();
  for (const Property p : plan.properties) properties.push_back(std::string(property_name(p)));
  const nlohmann::json summary = {{"cases", result.cases_run},
                                  {"cases_planned", plan.case_seeds.size()},
                                  {"interrupted", result.interrupted},
                                  {"properties", properties},
                                  {"engines", engines},
                                  {"findings", findings}};
  return summary.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

}  // namespace kvfuzz::cli
