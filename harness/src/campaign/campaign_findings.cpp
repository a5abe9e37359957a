#include <algorithm>
#include <chrono>
#include <exception>
#include <map>
#include <memory>
#include <optional>
#include <regex>
#include <set>
#include <vector>

#include "campaign/campaign_support.h"
#include "corpus/fixture_names.h"
#include "corpus/provenance.h"
#include "kvfuzz/engine_spec.h"
#include "kvfuzz/fixture_io.h"
#include "kvfuzz/property.h"
#include "kvfuzz/shrink.h"
#include "support/subprocess.h"
#include "support/text.h"

namespace kvfuzz::campaign {

namespace fs = std::filesystem;

namespace {

// libFuzzer names an artifact KIND-SHA1: crash, timeout, oom, leak (slow-unit only with a
// flag the campaign does not pass).
std::string kind_of(const std::string& file_name) {
  const std::string prefix = file_name.substr(0, file_name.find('-'));
  if (prefix == "timeout" || prefix == "oom") return prefix;
  return "crash";
}

std::string last_line(const std::string& text) {
  std::string trimmed = text;
  while (!trimmed.empty() && trimmed.back() == '\n') trimmed.pop_back();
  const size_t at = trimmed.rfind('\n');
  return at == std::string::npos ? trimmed : trimmed.substr(at + 1);
}

// The property a target judges: fuzz_prefix -> prefix.
std::string property_of(const std::string& target) {
  return target.starts_with("fuzz_") ? target.substr(5) : target;
}

// A fixture already filed under `stem`, what every fixture of one signature begins with
// (failure_fixture_prefix, crash_fixture_prefix).
std::optional<fs::path> filed_with_signature(const fs::path& regressions, const std::string& stem) {
  std::error_code error;
  if (!fs::is_directory(regressions, error)) return std::nullopt;
  for (const auto& entry : fs::directory_iterator(regressions, error)) {
    const std::string name = entry.path().filename().string();
    if (name.starts_with(stem) && name.ends_with(".json")) return entry.path();
  }
  return std::nullopt;
}

// The fixture of a crash, timeout or out-of-memory: the target decodes the input again
// without running the engine (KVFUZZ_DECODE_OUT).
std::optional<fs::path> decode_artifact(const FindingContext& context, const CampaignRecord& record,
                                        const std::string& target, const fs::path& artifact,
                                        std::string& note) {
  const fs::path out = context.paths.findings() /
                       (decoded_fixture_stem(target, artifact.filename().string()) + ".json");
  fs::create_directories(out.parent_path());
  const ProcessResult result =
      run_process({(context.fuzzers / target).string(), artifact.string()},
                  {{"KVFUZZ_DECODE_OUT", out.string()}, {"KVFUZZ_ENGINE", record.engine}},
                  std::chrono::seconds(60));
  if (fs::exists(out)) return out;
  note = "could not decode the input into a fixture: " + last_line(result.output);
  return std::nullopt;
}

// `kvfuzz shrink` in its own process, so that an engine that crashes while shrinking costs
// this finding its shrinking, not the campaign.
void shrink_finding(const FindingContext& context, const CampaignRecord& record,
                    CampaignFinding& finding) {
  const ProcessResult result =
      run_process({context.self.string(), "shrink", finding.fixture, "--engine", record.engine,
                   "--property", property_of(finding.target), "--time",
                   std::to_string(context.shrink_seconds), "--out", context.paths.shrunk().string(),
                   "--raw", (context.paths.findings() / "raw").string(), "--quiet"},
                  {}, std::chrono::seconds(static_cast<int64_t>(context.shrink_seconds) + 120),
                  &g_campaign_stop);
  if (result.exit_code == 1) {
    const size_t at = result.output.find("saved to ");
    if (at != std::string::npos) {
      std::string path = first_line(result.output.substr(at + 9));
      path = path.substr(0, path.find(" (raw fixture"));
      finding.fixture = path;
      finding.tokens_after = fixture_tokens(path);
      return;
    }
  }
  finding.note = result.exit_code == 0
                     ? "the fixture passed when replayed: the engine is not deterministic"
                     : "shrinking failed: " + last_line(result.output);
}

// Whether the target still ends the way `kind` says on `scenario`, given to it as a
// fixture input: a sanitizer report or signal (crash), libFuzzer's timeout, or its
// out-of-memory. A property failure is another failure, not this one.
bool target_still_fails(const FindingContext& context, const CampaignRecord& record,
                        const std::string& target, const std::string& kind,
                        const Scenario& scenario) {
  const fs::path input = context.paths.findings() / "shrink-candidate.json";
  try {
    save_fixture(scenario, input);
  } catch (const std::exception&) {
    return false;
  }
  // Candidates' own artifacts go to a scratch folder (libFuzzer's default is the current
  // directory, usually the checkout).
  const fs::path scratch = context.paths.findings() / "candidates";
  fs::create_directories(scratch);
  const ProcessResult result = run_process(
      {(context.fuzzers / target).string(), "-artifact_prefix=" + scratch.string() + "/",
       "-timeout=" + std::to_string(context.input_timeout),
       "-rss_limit_mb=" + std::to_string(context.rss_limit_mb), input.string()},
      {{"KVFUZZ_ENGINE", record.engine}, {"ASAN_OPTIONS", "detect_leaks=0:symbolize=0"}},
      std::chrono::seconds(context.input_timeout + 60), &g_campaign_stop);
  const std::string& out = result.output;
  const bool timeout = out.find("ERROR: libFuzzer: timeout") != std::string::npos;
  const bool oom = out.find("ERROR: libFuzzer: out-of-memory") != std::string::npos;
  const bool property = out.find("; fixture written to ") != std::string::npos;
  if (kind == "timeout") return timeout;
  if (kind == "oom") return oom;
  return result.exit_code != 0 && !timeout && !oom && !property;
}

// A crash, timeout or out-of-memory has no property to keep failing: the scenario
// shrinker runs with the target itself as the judge, one process per candidate.
void shrink_crash(const FindingContext& context, const CampaignRecord& record,
                  CampaignFinding& finding) {
  ShrinkOptions options;
  options.time_budget_seconds = context.shrink_seconds;
  std::optional<ShrinkResult> result;
  try {
    result = shrink_with(
        load_fixture(finding.fixture),
        [&](const Scenario& candidate) {
          return target_still_fails(context, record, finding.target, finding.kind, candidate);
        },
        options);
  } catch (const std::exception& e) {
    finding.note = std::string("shrinking failed: ") + e.what();
    return;
  }
  if (!result) {
    finding.note = "the target did not fail again on the fixture (flaky, or too large to judge)";
    return;
  }
  Scenario shrunk = result->scenario;
  shrunk.name = crash_fixture_stem(record.engine, finding.kind, finding.target, finding.artifact);
  shrunk.note = "Shrunk by kvfuzz campaign: " + record.engine + " " +
                (finding.kind == "crash" ? std::string("crashes") : "hits " + finding.kind) +
                " in " + finding.target + ". Reproduce with KVFUZZ_ENGINE=" + record.engine + " " +
                finding.target + " FIXTURE.";
  stamp_failure(shrunk, "shrink", record.engine, parse_property(property_of(finding.target)),
                finding.signature);
  const fs::path path = context.paths.shrunk() / (shrunk.name + ".json");
  save_fixture(shrunk, path);
  finding.fixture = path.string();
  finding.tokens_after = fixture_tokens(path);
}

void file_finding(const fs::path& regressions, CampaignFinding& finding, const std::string& stem) {
  if (const auto existing = filed_with_signature(regressions, stem)) {
    finding.duplicate_of = existing->string();
    return;
  }
  std::error_code error;
  fs::create_directories(regressions, error);
  const fs::path target = regressions / fs::path(finding.fixture).filename();
  fs::copy_file(finding.fixture, target, fs::copy_options::overwrite_existing, error);
  if (error) {
    finding.note = "could not file it: " + error.message();
  } else {
    finding.filed = target.string();
  }
}

// Signature and failure line of a property failure, judged again here, in the campaign's
// process (a plugin engine is loaded into it; a property failure did not crash the
// target, so judging the same input again is safe). Nothing when the fixture passes or
// the engine exists only in the fuzz targets (selftest-*); an engine that cannot be
// resolved here (an exec command gone missing) throws, and the caller notes why.
std::optional<std::pair<FailureSignature, std::string>> judge(const fs::path& fixture,
                                                              const std::string& engine_name,
                                                              const std::string& target) {
  const auto property = parse_property(property_of(target));
  if (!property || engine_name.starts_with("selftest-")) return std::nullopt;
  const std::shared_ptr<const EngineInfo> engine = resolve_engine(engine_name);
  const Scenario scenario = load_fixture(fixture);
  const PropertyOutcome outcome = judge_property(*property, scenario, *engine);
  if (outcome.pass || !outcome.signature) return std::nullopt;
  return std::pair{*outcome.signature, scenario.provenance.failure.value_or("")};
}

CampaignFinding make_finding(const FindingContext& context, const CampaignRecord& record,
                             const std::string& target, const fs::path& artifact,
                             std::string& file_stem) {
  CampaignFinding finding;
  finding.target = target;
  finding.artifact = target + "/" + artifact.filename().string();
  const fs::path written = fs::path(artifact.string() + ".json");
  if (fs::exists(written)) {
    finding.kind = "property";
    finding.fixture = written.string();
    try {
      if (const auto judged = judge(written, record.engine, target)) {
        finding.signature = to_string(judged->first);
        finding.failure = judged->second;
        file_stem =
            failure_fixture_prefix(record.engine, judged->first.property, judged->first.kind);
      } else {
        finding.signature = property_of(target) + "/?";
        finding.note = "the fixture passed when replayed here";
      }
    } catch (const std::exception& e) {
      finding.signature = property_of(target) + "/?";
      finding.note = first_line(e.what());
    }
  } else {
    finding.kind = kind_of(artifact.filename().string());
    finding.signature = finding.kind + " in " + target;
    if (target == "fuzz_fixture") {
      finding.fixture = artifact.string();  // a parser input is its own reproducer
      finding.note = "a parser input: reproduce with fuzz_fixture " + artifact.string();
    } else if (auto decoded = decode_artifact(context, record, target, artifact, finding.note)) {
      finding.fixture = decoded->string();
    }
  }
  finding.tokens_before = finding.tokens_after = fixture_tokens(finding.fixture);
  return finding;
}

}  // namespace

bool is_artifact_name(const std::string& name) {
  static const std::regex pattern("(crash|timeout|oom|leak)-[0-9a-f]{40}");
  return std::regex_match(name, pattern);
}

int fixture_tokens(const fs::path& path) {
  try {
    return program_tokens(load_fixture(path));
  } catch (const std::exception&) {
    return 0;
  }
}

int process_artifacts(CampaignRecord& record, const FindingContext& context) {
  std::set<std::string> known;
  std::map<std::string, std::string> first_of_signature;  // signature -> artifact
  for (const CampaignFinding& f : record.findings) {
    known.insert(f.artifact);
    first_of_signature.emplace(f.signature, f.artifact);  // keeps the first of each
  }
  int added = 0;
  for (const std::string& target : record.targets) {
    std::error_code error;
    const fs::path dir = context.paths.artifacts(target);
    if (!fs::is_directory(dir, error)) continue;
    std::vector<fs::path> artifacts;
    for (const auto& entry : fs::directory_iterator(dir, error)) {
      const std::string name = entry.path().filename().string();
      if (is_artifact_name(name) && !known.count(target + "/" + name)) {
        artifacts.push_back(entry.path());
      }
    }
    std::sort(artifacts.begin(), artifacts.end());
    for (const fs::path& artifact : artifacts) {
      if (g_campaign_stop) {
        save_campaign(record, context.paths.record());
        return added;
      }
      std::string stem;
      CampaignFinding finding = make_finding(context, record, target, artifact, stem);
      const auto first = first_of_signature.find(finding.signature);
      if (first != first_of_signature.end()) {
        finding.duplicate_of = first->second;
      } else {
        first_of_signature.emplace(finding.signature, finding.artifact);
        if (finding.kind == "property" && !stem.empty()) {
          context.note("new failure " + finding.signature + " (" + finding.artifact +
                       "); shrinking it");
          shrink_finding(context, record, finding);
          if (finding.note.empty()) file_finding(context.regressions, finding, stem);
        } else if (finding.kind != "property" && finding.target != "fuzz_fixture" &&
                   !finding.fixture.empty()) {
          context.note("new finding " + finding.signature + " (" + finding.artifact +
                       "); shrinking it");
          shrink_crash(context, record, finding);
          // Under crashes/: replayed on the honest engines by ctest like every fixture,
          // but not judged by a property on the engine that crashed.
          if (finding.note.empty()) {
            file_finding(context.regressions / "crashes", finding,
                         crash_fixture_prefix(record.engine, finding.kind, finding.target));
          }
        } else {
          context.note("new finding " + finding.signature + " (" + finding.artifact + ")");
        }
      }
      // Saved after every shrink (the expensive step) and every 50 duplicates: a mutant can
      // leave thousands of artifacts, and the record grows with each. Anything a kill
      // leaves unsaved is processed again on resume.
      const bool shrunk = finding.duplicate_of.empty() || !finding.filed.empty();
      record.findings.push_back(std::move(finding));
      ++added;
      if (shrunk || added % 50 == 0) save_campaign(record, context.paths.record());
    }
  }
  save_campaign(record, context.paths.record());
  return added;
}

}  // namespace kvfuzz::campaign
