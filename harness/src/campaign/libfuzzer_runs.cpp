// libFuzzer's runs in a campaign: one target's turn in fork mode (progress from its status
// lines, cache-state events from the files the targets write), and the final merge of a
// target's corpus.
#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "campaign/campaign_support.h"
#include "campaign/libfuzzer_status.h"
#include "generate/events.h"
#include "support/subprocess.h"

namespace kvfuzz::campaign {

namespace fs = std::filesystem;

int64_t count_files(const fs::path& dir) {
  std::error_code error;
  if (!fs::is_directory(dir, error)) return 0;
  int64_t n = 0;
  for (auto it = fs::recursive_directory_iterator(dir, error);
       !error && it != fs::recursive_directory_iterator(); it.increment(error)) {
    n += it->is_regular_file() ? 1 : 0;
  }
  return n;
}

namespace {

// Artifacts libFuzzer wrote so far (its inputs; the fixtures beside them not counted).
int count_artifacts(const CampaignRecord& record, const CampaignPaths& paths) {
  int n = 0;
  for (const std::string& target : record.targets) {
    std::error_code error;
    if (!fs::is_directory(paths.artifacts(target), error)) continue;
    for (const auto& entry : fs::directory_iterator(paths.artifacts(target), error)) {
      n += is_artifact_name(entry.path().filename().string()) ? 1 : 0;
    }
  }
  return n;
}

// Cache-state totals: the record's, plus what the targets running now have written.
struct EventTotals {
  std::array<int64_t, kEventCount> hits{};
  std::vector<bool> states = std::vector<bool>(kCacheStateCount, false);
  int events_reached() const {
    return static_cast<int>(
        std::count_if(hits.begin(), hits.end(), [](int64_t h) { return h > 0; }));
  }
  int states_reached() const {
    return static_cast<int>(std::count(states.begin(), states.end(), true));
  }
};

void add_event_files(EventTotals& totals, const fs::path& dir, bool remove) {
  std::error_code error;
  if (!fs::is_directory(dir, error)) return;
  for (const auto& entry : fs::directory_iterator(dir, error)) {
    if (entry.path().extension() != ".json") continue;
    try {
      std::ifstream in(entry.path());
      const nlohmann::json j = nlohmann::json::parse(in);
      for (int e = 0; e < kEventCount; ++e) {
        totals.hits[e] +=
            j.at("events").at(std::string(event_name(static_cast<Event>(e)))).get<int64_t>();
      }
      const std::string states = j.at("states").get<std::string>();
      for (size_t i = 0; i < states.size() && i < totals.states.size(); ++i) {
        if (states[i] == '1') totals.states[i] = true;
      }
    } catch (const std::exception&) {
      continue;  // a file being replaced right now; read again at the next tick
    }
    if (remove) fs::remove(entry.path(), error);
  }
}

EventTotals event_totals(const CampaignRecord& record, const CampaignPaths& paths) {
  EventTotals totals;
  totals.hits = record.event_hits;
  totals.states = record.cache_states;
  add_event_files(totals, paths.events(), false);
  return totals;
}

// Moves what the finished targets wrote into the record.
void fold_event_files(CampaignRecord& record, const CampaignPaths& paths) {
  EventTotals totals;
  totals.hits = record.event_hits;
  totals.states = record.cache_states;
  add_event_files(totals, paths.events(), true);
  record.event_hits = totals.hits;
  record.cache_states = totals.states;
}

std::vector<std::string> libfuzzer_flags(const CampaignOptions& options) {
  return {"-print_funcs=0", "-timeout=" + std::to_string(options.input_timeout),
          "-rss_limit_mb=" + std::to_string(options.rss_limit_mb)};
}

std::map<std::string, std::string> target_env(const CampaignRecord& record,
                                              const CampaignPaths& paths) {
  return {{"KVFUZZ_ENGINE", record.engine},
          {"KVFUZZ_EVENTS_DIR", paths.events().string()},
          {"KVFUZZ_EVENT_COUNTERS", record.event_counters ? "1" : "0"},
          // libFuzzer's own reports are what the campaign needs; no leak checks of the
          // fork-mode parent's bookkeeping.
          {"ASAN_OPTIONS", "detect_leaks=0:abort_on_error=0"},
          {"UBSAN_OPTIONS", "print_stacktrace=1:halt_on_error=1"}};
}

// Where a target's turn is: libFuzzer's fork mode runs every seed before it starts its
// first job, and reports only when a job ends, so the first numbers can take a while.
enum class SlicePhase { loading_seeds, first_job, reporting };

// "INFO: -fork=1: 96 seed inputs, starting to fuzz in /tmp/...": the count, when the line
// is that one.
std::optional<int64_t> fork_seed_count(const std::string& line) {
  static const std::regex pattern(R"(^INFO: -fork=\d+: (\d+) seed inputs, starting to fuzz)");
  std::smatch match;
  if (!std::regex_search(line, match, pattern)) return std::nullopt;
  return std::stoll(match[1].str());
}

// Why a progress line's numbers are zero or stale, or "".
std::string waiting_reason(SlicePhase phase, const LibFuzzerStatus& latest, int64_t seed_files) {
  switch (phase) {
    case SlicePhase::loading_seeds:
      return "loading " + std::to_string(seed_files) + " seed inputs (each runs once first)";
    case SlicePhase::first_job:
      return "first fuzzing job running (libFuzzer reports when a job ends)";
    case SlicePhase::reporting:
      break;
  }
  // A fork-mode job ends at its first crash, timeout or out-of-memory, so an engine that
  // fails on most inputs runs few of them a second; one that fails on none is just slow.
  if (latest.executions_per_second == 0) {
    return latest.crashes + latest.timeouts + latest.ooms > 0
               ? "under 1 input/s: each job ends at its first failure, and most inputs fail"
               : "under 1 input/s: a slow engine, or inputs that run until --input-timeout";
  }
  if (latest.coverage == 0) return "no coverage reported yet";
  return "";
}

}  // namespace

void run_slice(CampaignRecord& record, const CampaignOptions& options, const CampaignPaths& paths,
               const CampaignProgress& progress, const std::string& target, double seconds) {
  fs::create_directories(paths.corpus(target));
  fs::create_directories(paths.artifacts(target));
  fs::create_directories(paths.logs());
  std::vector<std::string> argv = {
      (fs::path(options.fuzzers) / target).string(),
      "-fork=" + std::to_string(record.jobs),
      "-ignore_crashes=1",
      "-ignore_timeouts=1",
      "-ignore_ooms=1",
      "-max_total_time=" + std::to_string(std::max(1L, std::lround(seconds))),
      "-artifact_prefix=" + paths.artifacts(target).string() + "/",
      "-print_final_stats=1"};
  for (const std::string& flag : libfuzzer_flags(options)) argv.push_back(flag);
  if (fs::exists(options.dict)) argv.push_back("-dict=" + options.dict);
  argv.push_back(paths.corpus(target).string());
  if (fs::is_directory(options.seeds)) argv.push_back(options.seeds);

  std::ofstream log(paths.logs() / (target + ".log"), std::ios::app);
  log << "== " << utc_now() << " slice of " << seconds << " s\n";
  Subprocess process(argv, target_env(record, paths));
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  const double elapsed_before = record.elapsed_seconds;
  const int64_t executions_before = record.executions;
  LibFuzzerStatus latest;
  auto next_tick = start + std::chrono::duration<double>(options.progress_seconds);
  bool stopping = false;
  SlicePhase phase = SlicePhase::loading_seeds;
  const int64_t seed_files = count_files(paths.corpus(target)) +
                             (fs::is_directory(options.seeds) ? count_files(options.seeds) : 0);
  auto tick = [&] {
    const double ran = std::chrono::duration<double>(Clock::now() - start).count();
    const EventTotals events = event_totals(record, paths);
    CampaignSample sample;
    sample.elapsed_seconds = elapsed_before + ran;
    sample.target = target;
    sample.executions = executions_before + latest.executions;
    sample.executions_per_second = static_cast<double>(latest.executions_per_second);
    sample.coverage = latest.coverage;
    sample.features = latest.features;
    sample.events_reached = events.events_reached();
    sample.cache_states = events.states_reached();
    sample.failures = count_artifacts(record, paths);
    record.samples.push_back(sample);
    record.elapsed_seconds = sample.elapsed_seconds;
    record.executions = sample.executions;
    save_campaign(record, paths.record());
    progress.tick(sample, record, waiting_reason(phase, latest, seed_files));
  };
  bool saw_status = false;
  std::string last_line;
  // libFuzzer checks -max_total_time only when a job ends, and a fork-mode job runs up to
  // min(300, job number) seconds: let the last job finish, but not eat the next turn.
  const double grace = std::min(300.0, seconds / 2) + options.input_timeout + 5;
  while (process.poll_lines(std::chrono::milliseconds(200), [&](const std::string& line) {
    log << line << "\n";
    if (!line.empty()) last_line = line;
    if (const auto status = parse_libfuzzer_status(line)) {
      latest = *status;
      saw_status = true;
      phase = SlicePhase::reporting;
    } else if (const auto seeds = fork_seed_count(line)) {
      if (phase == SlicePhase::loading_seeds) phase = SlicePhase::first_job;
      if (*seeds == 0) {
        progress.note("warning: " + target + " found no seed inputs (" +
                      paths.corpus(target).string() + " is empty and --seeds " + options.seeds +
                      (fs::is_directory(options.seeds) ? " has none it keeps" : " is missing") +
                      "): it fuzzes from scratch");
      }
    }
  })) {
    if (!stopping && Clock::now() > start + std::chrono::duration<double>(seconds + grace)) {
      stopping = true;
      log << "== slice over its time: stopping " << target << "\n";
      process.stop(std::chrono::seconds(5));
    }
    if (g_campaign_stop && !stopping) {
      stopping = true;
      progress.note("stopping (the record is saved; run the same command to resume)");
      process.stop(std::chrono::seconds(10));
    }
    if (Clock::now() >= next_tick) {
      tick();
      next_tick += std::chrono::duration<double>(options.progress_seconds);
    }
  }
  const ProcessResult result = process.wait();
  log << "== exit " << result.exit_code << " signal " << result.signal << "\n";
  const double ran = std::chrono::duration<double>(Clock::now() - start).count();
  // A target that cannot start (built from another tree, a bad flag) would otherwise make
  // the campaign spin through empty slices until the budget is gone.
  if (!stopping && !saw_status && ran < 5) {
    throw CampaignSetupError("--fuzzers: " + target + " exited at once with status " +
                             std::to_string(result.exit_code) + ": " + last_line +
                             " (log: " + (paths.logs() / (target + ".log")).string() + ")");
  }
  tick();
  fold_event_files(record, paths);
  save_campaign(record, paths.record());
  // The fork-mode parent exits with its last job's status: 1 a sanitizer report, 70 a
  // timeout, 71 out of memory, 77 a crash (-error_exitcode): findings, not trouble.
  const std::set<int> job_statuses = {0, 1, 70, 71, 77};
  if (!stopping && !job_statuses.count(result.exit_code)) {
    progress.note(target + " ended with status " + std::to_string(result.exit_code) +
                  " (log: " + (paths.logs() / (target + ".log")).string() + ")");
  }
}

// libFuzzer's merge: the smallest set of inputs that keeps every feature of the working
// corpus and the seeds. The old corpus is replaced only once the merge has finished.
void merge_corpus(CampaignRecord& record, const CampaignOptions& options,
                  const CampaignPaths& paths, const CampaignProgress& progress,
                  const std::string& target) {
  const fs::path merged = paths.out / "corpus" / (target + ".merging");
  fs::remove_all(merged);
  fs::create_directories(merged);
  fs::create_directories(paths.corpus(target));  // a target that never had its turn
  // Inputs that fail while merging are findings like any other (and must not land in the
  // current directory, libFuzzer's default).
  std::vector<std::string> argv = {(fs::path(options.fuzzers) / target).string(), "-merge=1",
                                   "-artifact_prefix=" + paths.artifacts(target).string() + "/",
                                   merged.string(), paths.corpus(target).string()};
  for (const std::string& flag : libfuzzer_flags(options)) argv.push_back(flag);
  if (fs::is_directory(options.seeds)) argv.push_back(options.seeds);
  const ProcessResult result =
      run_process(argv, target_env(record, paths), std::chrono::minutes(30), &g_campaign_stop);
  if (result.exit_code != 0) {
    progress.note("merging the corpus of " + target + " failed; kept it unmerged");
    fs::remove_all(merged);
    return;
  }
  const fs::path old = paths.out / "corpus" / (target + ".old");
  fs::remove_all(old);
  fs::rename(paths.corpus(target), old);
  fs::rename(merged, paths.corpus(target));
  fs::remove_all(old);
  for (CampaignCorpus& c : record.corpora) {
    if (c.target == target) c.inputs_after = count_files(paths.corpus(target));
  }
  fold_event_files(record, paths);
  save_campaign(record, paths.record());
}

}  // namespace kvfuzz::campaign
