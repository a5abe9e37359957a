// The pieces of `kvfuzz campaign` (cmd_campaign.cpp runs the loop): where everything lives
// under OUT/, and how the artifacts libFuzzer wrote become deduplicated, shrunk fixtures.
#pragma once

#include <atomic>
#include <filesystem>
#include <string>

#include "campaign/campaign.h"

namespace kvfuzz::cli {

// Set by SIGINT/SIGTERM: finish the current step, save, write the report, exit.
extern std::atomic<bool> g_campaign_stop;

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
};

struct FindingContext {
  CampaignPaths paths;
  std::filesystem::path fuzzers;      // where the fuzz target binaries are
  std::filesystem::path regressions;  // where new signatures are filed
  std::filesystem::path self;         // this kvfuzz binary (for `kvfuzz shrink`)
  double shrink_seconds = 60;
  int input_timeout = 10;  // seconds, as the targets ran
  int rss_limit_mb = 2048;
};

// Turns every artifact not yet in record.findings into a finding: its fixture (written by
// the target for a failed property; decoded from the input for a crash, timeout or
// out-of-memory), the signature, a shrunk fixture for the first of each signature, and
// filing under the regressions folder unless one with that signature is there already.
// Saves the record after each finding. Returns how many were new.
int process_artifacts(CampaignRecord& record, const FindingContext& context);

// libFuzzer's artifact names: crash-, timeout-, oom- or leak- and a SHA-1 (not the
// fixture beside it, nor a temporary file a killed target left).
bool is_artifact_name(const std::string& file_name);

// Number of tokens the fixture's program feeds (0 when it does not load).
int fixture_tokens(const std::filesystem::path& path);

}  // namespace kvfuzz::cli
