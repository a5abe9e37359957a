// An overnight fuzzing campaign (`kvfuzz campaign`, docs/campaigns.md). The fuzz targets
// take turns (round robin, one slice each), each in libFuzzer's fork mode with N jobs,
// crashes, timeouts and out-of-memory ignored (so an engine that crashes or hangs becomes
// a finding, not the end of the campaign), seeded from the seeds folder. Every few
// seconds: a progress sample, the record saved to OUT/campaign.json. After each slice the
// new artifacts become findings (campaign_findings.cpp). At the end the corpora are
// merged and OUT/report.md and OUT/report.html written. Stopped (SIGINT, SIGTERM, SIGHUP)
// or killed, it resumes from OUT with the same options; nothing written before the stop
// is lost.
#pragma once

#include <filesystem>
#include <functional>
#include <stdexcept>
#include <string>

#include "campaign/campaign.h"

namespace kvfuzz::campaign {

struct CampaignOptions {
  std::string engine;  // a spec as --engine takes it (kvfuzz/engine_spec.h)
  double budget_seconds = 8 * 3600;
  double slice_seconds = 600;  // the longest turn of one target
  int jobs = 1;                // libFuzzer -fork=N
  std::string out = "kvfuzz-out/campaign";
  // For a new campaign: "properties" (the six), "all" (and the fixture parser), or a list
  // such as "prefix,reset". A resumed one keeps its record's targets.
  std::string targets = "properties";
  std::string fuzzers;         // directory of the built fuzz targets
  std::string fuzzers_hint;    // what builds them, for the error when one is missing
  std::string seeds;           // seed fixtures (the CLI's default: campaign_defaults.h)
  std::string regressions;     // where new signatures are filed; "" for OUT/regressions
  std::string dict;            // libFuzzer dictionary, skipped (with a warning) when missing
  double shrink_seconds = 60;  // per new signature
  int input_timeout = 10;      // seconds before an input is a hang
  int rss_limit_mb = 2048;
  double progress_seconds = 5;
  bool event_counters = true;  // cache-state events fed to libFuzzer as coverage
  std::string command;         // the command line, for the record and the report
};

// Where everything lives under OUT/.
struct CampaignPaths {
  std::filesystem::path out;
  std::filesystem::path record() const { return out / "campaign.json"; }
  std::filesystem::path corpus(const std::string& target) const { return out / "corpus" / target; }
  std::filesystem::path artifacts(const std::string& target) const {
    return out / "artifacts" / target;
  }
  std::filesystem::path events() const { return out / "events"; }
  std::filesystem::path findings() const { return out / "findings"; }
  std::filesystem::path shrunk() const { return out / "shrunk"; }
  std::filesystem::path logs() const { return out / "logs"; }
  std::filesystem::path report_md() const { return out / "report.md"; }
  std::filesystem::path report_html() const { return out / "report.html"; }
  // Where new signatures are filed unless --regressions says otherwise: nothing of a
  // campaign lands outside OUT unasked.
  std::filesystem::path regressions() const { return out / "regressions"; }
};

// A campaign that cannot start (a record of another engine, an unknown target, a path
// libFuzzer cannot pass on, a bad engine, a missing or broken fuzz target): one line,
// naming the option as the command line spells it; kvfuzz exits with status 2.
struct CampaignSetupError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// What the campaign says as it goes.
struct CampaignProgress {
  // A line: resuming, stopping, merging, a new finding, a target's odd exit status.
  std::function<void(const std::string& line)> note;
  // A progress tick, after `sample` was added to `record` and the record saved. `waiting`
  // says why its numbers are still zero or stale ("" when they are live): libFuzzer is
  // loading the seeds, its first job has not reported yet, or inputs run slower than one
  // a second.
  std::function<void(const CampaignSample& sample, const CampaignRecord& record,
                     const std::string& waiting)>
      tick;
};

// Runs the campaign (or resumes it from options.out) until its budget is spent or a
// signal stops it; returns the record as saved. SIGINT, SIGTERM and SIGHUP stop it (the
// current step finishes, the record is saved and the report written): it installs their
// handlers for the rest of the process, as the command that calls it wants. Throws
// CampaignSetupError; a record that does not load throws std::runtime_error.
CampaignRecord run_campaign(const CampaignOptions& options, const CampaignProgress& progress);

// "01:02:03": campaign time in progress lines.
std::string clock_text(double seconds);

}  // namespace kvfuzz::campaign
