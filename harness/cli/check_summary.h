// What kvfuzz check leaves for CI besides its table: a JUnit XML report (--junit) and a
// machine summary (--json), written atomically, also after Ctrl-C (docs/check.md).
#pragma once

#include <string>
#include <vector>

#include "kvfuzz/check.h"

namespace kvfuzz::cli {

// The reproduction command of every finding: commands[engine][finding], as the result's
// findings are ordered.
using FindingCommands = std::vector<std::vector<std::string>>;

// The verdict of one engine: "pass", "fail", "rejected" or "not-rejected"; and whether it
// is the one expected (honest engines pass, mutants are rejected).
std::string engine_verdict(const CheckEngine& engine, const CheckEngineResult& result);
bool verdict_ok(const CheckEngine& engine, const CheckEngineResult& result);

// testsuites > testsuite per engine > testcase per property, one per kind of crash seen
// (crash, exit, timeout, engine-error) and, for a mutant, "rejected".
std::string junit_xml(const CheckPlan& plan, const CheckResult& result,
                      const FindingCommands& commands);
// engines (with rows, unjudged, cases and findings), cases, findings.
std::string summary_json(const CheckPlan& plan, const CheckResult& result,
                         const FindingCommands& commands);

}  // namespace kvfuzz::cli
