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

// libFuzzer's command line for a target's turn of `seconds` in fork mode, the folders it
// writes into created.
std::vector<std::string> slice_argv(const CampaignRecord& record, const CampaignOptions& options,
                                    const CampaignPaths& paths, const std::string& target,
                                    double seconds) {
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
  return argv;
}

// A target's turn while libFuzzer runs, started with it: what its lines said, the progress
// samples it adds to the record, its time limits, and what is left to do once it exits.
class SliceWatch {
 public:
  using Clock = std::chrono::steady_clock;
  // A time in fractions of the clock's ticks (progress_seconds need not be whole).
  using TickTime = decltype(Clock::time_point{} + std::chrono::duration<double>{});

  SliceWatch(CampaignRecord& record, const CampaignOptions& options, const CampaignPaths& paths,
             const CampaignProgress& progress, const std::string& target, double seconds,
             std::ofstream& log)
      : record_(record),
        options_(options),
        paths_(paths),
        progress_(progress),
        target_(target),
        seconds_(seconds),
        log_(log),
        start_(Clock::now()),
        elapsed_before_(record.elapsed_seconds),
        executions_before_(record.executions),
        next_tick_(start_ + std::chrono::duration<double>(options.progress_seconds)),
        seed_files_(count_files(paths.corpus(target)) +
                    (fs::is_directory(options.seeds) ? count_files(options.seeds) : 0)),
        // libFuzzer checks -max_total_time only when a job ends, and a fork-mode job runs up
        // to min(300, job number) seconds: let the last job finish, but not eat the next turn.
        grace_(std::min(300.0, seconds / 2) + options.input_timeout + 5) {}

  // One line of libFuzzer's output: logged, and read for its status or its seed count.
  void read(const std::string& line) {
    log_ << line << "\n";
    if (!line.empty()) last_line_ = line;
    if (const auto status = parse_libfuzzer_status(line)) {
      latest_ = *status;
      saw_status_ = true;
      phase_ = SlicePhase::reporting;
    } else if (const auto seeds = fork_seed_count(line)) {
      if (phase_ == SlicePhase::loading_seeds) phase_ = SlicePhase::first_job;
      if (*seeds == 0) {
        progress_.note("warning: " + target_ + " found no seed inputs (" +
                       paths_.corpus(target_).string() + " is empty and --seeds " + options_.seeds +
                       (fs::is_directory(options_.seeds) ? " has none it keeps" : " is missing") +
                       "): it fuzzes from scratch");
      }
    }
  }

  // Between polls: stops the target past its time and grace or when the campaign stops,
  // and ticks when a tick is due.
  void keep_time(Subprocess& process) {
    if (!stopping_ && Clock::now() > start_ + std::chrono::duration<double>(seconds_ + grace_)) {
      stopping_ = true;
      log_ << "== slice over its time: stopping " << target_ << "\n";
      process.stop(std::chrono::seconds(5));
    }
    if (g_campaign_stop && !stopping_) {
      stopping_ = true;
      progress_.note("stopping (the record is saved; run the same command to resume)");
      process.stop(std::chrono::seconds(10));
    }
    if (Clock::now() >= next_tick_) {
      tick();
      next_tick_ += std::chrono::duration<double>(options_.progress_seconds);
    }
  }

  // After the target exited: a last sample, its event files folded into the record, and a
  // note on an exit status that is not a finding. Throws CampaignSetupError when it could
  // not start.
  void finish(const ProcessResult& result) {
    log_ << "== exit " << result.exit_code << " signal " << result.signal << "\n";
    const double ran = std::chrono::duration<double>(Clock::now() - start_).count();
    // A target that cannot start (built from another tree, a bad flag) would otherwise make
    // the campaign spin through empty slices until the budget is gone.
    if (!stopping_ && !saw_status_ && ran < 5) {
      throw CampaignSetupError("--fuzzers: " + target_ + " exited at once with status " +
                               std::to_string(result.exit_code) + ": " + last_line_ +
                               " (log: " + (paths_.logs() / (target_ + ".log")).string() + ")");
    }
    tick();
    fold_event_files(record_, paths_);
    save_campaign(record_, paths_.record());
    // The fork-mode parent exits with its last job's status: 1 a sanitizer report, 70 a
    // timeout, 71 out of memory, 77 a crash (-error_exitcode): findings, not trouble.
    const std::set<int> job_statuses = {0, 1, 70, 71, 77};
    if (!stopping_ && !job_statuses.count(result.exit_code)) {
      progress_.note(target_ + " ended with status " + std::to_string(result.exit_code) +
                     " (log: " + (paths_.logs() / (target_ + ".log")).string() + ")");
    }
  }

 private:
  // A progress sample: the record's totals plus this turn's, saved with the record.
  void tick() {
    const double ran = std::chrono::duration<double>(Clock::now() - start_).count();
    const EventTotals events = event_totals(record_, paths_);
    CampaignSample sample;
    sample.elapsed_seconds = elapsed_before_ + ran;
    sample.target = target_;
    sample.executions = executions_before_ + latest_.executions;
    sample.executions_per_second = static_cast<double>(latest_.executions_per_second);
    sample.coverage = latest_.coverage;
    sample.features = latest_.features;
    sample.events_reached = events.events_reached();
    sample.cache_states = events.states_reached();
    sample.failures = count_artifacts(record_, paths_);
    record_.samples.push_back(sample);
    record_.elapsed_seconds = sample.elapsed_seconds;
    record_.executions = sample.executions;
    save_campaign(record_, paths_.record());
    progress_.tick(sample, record_, waiting_reason(phase_, latest_, seed_files_));
  }

  CampaignRecord& record_;
  const CampaignOptions& options_;
  const CampaignPaths& paths_;
  const CampaignProgress& progress_;
  const std::string& target_;
  const double seconds_;
  std::ofstream& log_;
  const Clock::time_point start_;
  const double elapsed_before_;
  const int64_t executions_before_;
  TickTime next_tick_;
  const int64_t seed_files_;
  const double grace_;
  LibFuzzerStatus latest_;
  SlicePhase phase_ = SlicePhase::loading_seeds;
  bool stopping_ = false;
  bool saw_status_ = false;
  std::string last_line_;
};

}  // namespace

void run_slice(CampaignRecord& record, const CampaignOptions& options, const CampaignPaths& paths,
               const CampaignProgress& progress, const std::string& target, double seconds) {
  const std::vector<std::string> argv = slice_argv(record, options, paths, target, seconds);
  std::ofstream log(paths.logs() / (target + ".log"), std::ios::app);
  log << "== " << utc_now() << " slice of " << seconds << " s\n";
  Subprocess process(argv, target_env(record, paths));
  SliceWatch watch(record, options, paths, progress, target, seconds, log);
  while (process.poll_lines(std::chrono::milliseconds(200),
                            [&](const std::string& line) { watch.read(line); })) {
    watch.keep_time(process);
  }
  watch.finish(process.wait());
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
