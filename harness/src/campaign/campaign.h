// What a fuzzing campaign (`kvfuzz campaign`, docs/campaigns.md) records, how that record
// is kept on disk so that a stopped campaign resumes without losing anything, and the
// final report in Markdown and as a self-contained HTML page with plots.
#pragma once

#include <array>
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "generate/events.h"

namespace kvfuzz {

// One progress tick (every few seconds while a target runs).
struct CampaignSample {
  double elapsed_seconds = 0;        // campaign time, summed over every run and resume
  std::string target;                // the fuzz target running, e.g. "fuzz_prefix"
  int64_t executions = 0;            // inputs run so far, every target together
  double executions_per_second = 0;  // of the running target, as libFuzzer reports it
  int64_t coverage = 0;              // libFuzzer's "cov" (code edges) of the running target
  int64_t features = 0;              // libFuzzer's "ft"
  int events_reached = 0;            // of kEventCount, every target together
  int cache_states = 0;              // of kCacheStateCount, every target together
  int failures = 0;                  // artifacts so far (crashes, timeouts, out-of-memory)
};

// One artifact libFuzzer wrote, and what became of it.
struct CampaignFinding {
  std::string artifact;   // file name under OUT/artifacts/TARGET/
  std::string target;     // fuzz target that wrote it
  std::string kind;       // "property" (a failed property), "crash", "timeout" or "oom"
  std::string signature;  // "prefix/mismatch"; for the other kinds, kind and target
  std::string failure;    // first line of the report (the first diverging row)
  std::string fixture;    // the fixture it became (shrunk when shrinking worked), or ""
  int tokens_before = 0;  // tokens of the fixture before and after shrinking
  int tokens_after = 0;
  std::string filed;         // path filed under the regressions folder, or "" when a duplicate
  std::string duplicate_of;  // the finding or regression with the same signature
  std::string note;          // anything that went wrong turning it into a fixture
};

// Corpus of one target before the campaign and after the final merge.
struct CampaignCorpus {
  std::string target;
  int64_t inputs_before = 0;
  int64_t inputs_after = 0;  // 0 until merged
};

struct CampaignRecord {
  int version = 1;
  std::string engine;
  std::vector<std::string> targets;
  double budget_seconds = 0;
  double elapsed_seconds = 0;
  int jobs = 1;
  bool event_counters = true;
  bool finished = false;  // the final merge and report are done
  std::string command;    // the command line that started it
  std::string started;    // UTC, ISO 8601
  std::string machine;    // uname and core count
  int next_target = 0;    // index into targets of the next slice (round robin)
  int64_t executions = 0;
  std::array<int64_t, kEventCount> event_hits{};
  std::vector<bool> cache_states = std::vector<bool>(kCacheStateCount, false);
  std::vector<CampaignSample> samples;
  std::vector<CampaignFinding> findings;
  std::vector<CampaignCorpus> corpora;
};

// OUT/campaign.json. save_campaign writes a temporary file and renames it, so a stop at
// any moment leaves the previous or the new record, never half of one. load_campaign
// throws FixtureError-style std::runtime_error naming the file and field on bad input.
void save_campaign(const CampaignRecord& record, const std::filesystem::path& path);
CampaignRecord load_campaign(const std::filesystem::path& path);

// The report: what ran, the findings (deduplicated, with their fixtures), events and cache
// states reached, corpus growth, and plots over time of coverage, cache-state events and
// executions per second. The HTML page is self-contained (inline SVG, no scripts, no
// external resources).
std::string campaign_markdown(const CampaignRecord& record);
std::string campaign_html(const CampaignRecord& record);

}  // namespace kvfuzz
