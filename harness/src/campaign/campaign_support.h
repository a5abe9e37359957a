// The pieces of `kvfuzz campaign` (campaign_loop.cpp runs the loop): where everything lives
// under OUT/, running one target's turn and merging its corpus (libfuzzer_runs.cpp), and
// how the artifacts libFuzzer wrote become deduplicated, shrunk fixtures
// (campaign_findings.cpp).
#pragma once

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>

#include "campaign/campaign.h"
#include "campaign/campaign_loop.h"

namespace kvfuzz::campaign {

// Set by SIGINT/SIGTERM/SIGHUP: finish the current step, save, write the report, exit.
extern std::atomic<bool> g_campaign_stop;

// One target's turn of `seconds`, in fork mode: progress ticks every few seconds, the
// record saved at each. Throws CampaignSetupError when the target exits at once without
// running (built from another tree, a bad flag).
void run_slice(CampaignRecord& record, const CampaignOptions& options, const CampaignPaths& paths,
               const CampaignProgress& progress, const std::string& target, double seconds);

// libFuzzer's merge of one target's corpus with the seeds: the smallest set of inputs that
// keeps every feature. The old corpus is replaced only once the merge has finished.
void merge_corpus(CampaignRecord& record, const CampaignOptions& options,
                  const CampaignPaths& paths, const CampaignProgress& progress,
                  const std::string& target);

// Now, UTC, ISO 8601: "2024-05-01T22:10:00Z".
std::string utc_now();

// Regular files below `dir` (0 when it is no directory).
int64_t count_files(const std::filesystem::path& dir);

struct FindingContext {
  CampaignPaths paths;
  std::filesystem::path fuzzers;      // where the fuzz target binaries are
  std::filesystem::path regressions;  // where new signatures are filed
  std::filesystem::path self;         // this kvfuzz binary (for `kvfuzz shrink`)
  double shrink_seconds = 60;
  int input_timeout = 10;  // seconds, as the targets ran
  int rss_limit_mb = 2048;
  std::function<void(const std::string&)> note;  // a new finding, as CampaignProgress::note
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

}  // namespace kvfuzz::campaign
