// kvfuzz campaign --engine E --time 8h --jobs N --out DIR: an overnight fuzzing campaign
// (docs/campaigns.md). The fuzz targets take turns (round robin, one slice each), each in
// libFuzzer's fork mode with N jobs, crashes, timeouts and out-of-memory ignored (so an
// engine that crashes or hangs becomes a finding, not the end of the campaign), seeded
// from corpus/. Every few seconds: a progress line, a sample for the plots, the record
// saved to DIR/campaign.json. After each slice the new artifacts become findings
// (campaign_findings.cpp). At the end the corpora are merged and DIR/report.md and
// DIR/report.html written. Stopped (Ctrl-C) or killed, it resumes from DIR with the same
// command; nothing written before the stop is lost.
// Exit status: 0 no findings, 1 findings, 2 bad input.
#include <signal.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "campaign/campaign_support.h"
#include "campaign/libfuzzer_status.h"
#include "cli_support.h"
#include "commands.h"
#include "support/atomic_file.h"
#include "support/subprocess.h"

namespace kvfuzz::cli {

namespace fs = std::filesystem;

std::atomic<bool> g_campaign_stop{false};

namespace {

struct CampaignOptions {
  std::string engine;
  std::string time = "8h";
  int jobs = 1;
  std::string out = "kvfuzz-out/campaign";
  std::string targets = "properties";
  std::string fuzzers = KVFUZZ_DEFAULT_FUZZERS_DIR;
  std::string seeds = "corpus";
  std::string regressions = "corpus/regressions";
  std::string dict = "fuzzers/fixture.dict";
  std::string slice = "10m";
  double shrink_seconds = 60;
  int input_timeout = 10;
  int rss_limit_mb = 2048;
  double progress_seconds = 5;
  bool no_event_counters = false;
  std::string command;
};

const std::vector<std::string> kPropertyTargets = {"fuzz_prefix", "fuzz_schedule", "fuzz_layout",
                                                   "fuzz_poison", "fuzz_reset",    "fuzz_batch"};

std::vector<std::string> parse_targets(const std::string& spec) {
  if (spec == "properties") return kPropertyTargets;
  if (spec == "all") {
    std::vector<std::string> all = kPropertyTargets;
    all.push_back("fuzz_fixture");
    return all;
  }
  std::vector<std::string> targets;
  size_t start = 0;
  while (start <= spec.size()) {
    const size_t end = std::min(spec.find(',', start), spec.size());
    const std::string name = "fuzz_" + spec.substr(start, end - start);
    if (name != "fuzz_fixture" && std::find(kPropertyTargets.begin(), kPropertyTargets.end(),
                                            name) == kPropertyTargets.end()) {
      throw UsageError("--targets: unknown target '" + spec.substr(start, end - start) +
                       "'; expected properties, all, or a list of prefix, schedule, layout, "
                       "poison, reset, batch, fixture");
    }
    if (std::find(targets.begin(), targets.end(), name) == targets.end()) targets.push_back(name);
    start = end + 1;
  }
  return targets;
}

double duration_option(const std::string& flag, const std::string& text) {
  const auto seconds = parse_duration(text);
  if (!seconds) {
    throw UsageError(flag + ": expected a duration such as 90s, 30m, 8h or 1h30m, got '" + text +
                     "'");
  }
  return *seconds;
}

std::string clock_text(double seconds) {
  const auto s = static_cast<long>(seconds);
  char text[32];
  std::snprintf(text, sizeof text, "%02ld:%02ld:%02ld", s / 3600, s / 60 % 60, s % 60);
  return text;
}

std::string utc_now() {
  const std::time_t now = std::time(nullptr);
  char text[32];
  std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
  return text;
}

std::string machine_text() {
  utsname u{};
  uname(&u);
  return std::string(u.sysname) + " " + u.release + " " + u.machine + ", " +
         std::to_string(std::thread::hardware_concurrency()) + " cores";
}

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

// One target for `seconds`, in fork mode. Progress every few seconds.
void run_slice(CampaignRecord& record, const CampaignOptions& options, const CampaignPaths& paths,
               const std::string& target, double seconds) {
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
    std::fprintf(
        stderr,
        "campaign: %s / %s  %-14s  %6lld exec/s  cov %lld  ft %lld  events %d/%d  "
        "states %d/%d  failures %d\n",
        clock_text(sample.elapsed_seconds).c_str(), clock_text(record.budget_seconds).c_str(),
        target.c_str(), static_cast<long long>(latest.executions_per_second),
        static_cast<long long>(latest.coverage), static_cast<long long>(latest.features),
        sample.events_reached, kEventCount, sample.cache_states, kCacheStateCount, sample.failures);
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
    }
  })) {
    if (!stopping && Clock::now() > start + std::chrono::duration<double>(seconds + grace)) {
      stopping = true;
      log << "== slice over its time: stopping " << target << "\n";
      process.stop(std::chrono::seconds(5));
    }
    if (g_campaign_stop && !stopping) {
      stopping = true;
      std::fprintf(stderr,
                   "campaign: stopping (the record is saved; run the same command to resume)\n");
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
    throw UsageError("--fuzzers: " + target + " exited at once with status " +
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
    std::fprintf(stderr, "campaign: %s ended with status %d (log: %s)\n", target.c_str(),
                 result.exit_code, (paths.logs() / (target + ".log")).string().c_str());
  }
}

// libFuzzer's merge: the smallest set of inputs that keeps every feature of the working
// corpus and the seeds. The old corpus is replaced only once the merge has finished.
void merge_corpus(CampaignRecord& record, const CampaignOptions& options,
                  const CampaignPaths& paths, const std::string& target) {
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
    std::fprintf(stderr, "campaign: merging the corpus of %s failed; kept it unmerged\n",
                 target.c_str());
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

void write_reports(const CampaignRecord& record, const CampaignPaths& paths) {
  for (const auto& [path, text] : {std::pair{paths.report_md(), campaign_markdown(record)},
                                   std::pair{paths.report_html(), campaign_html(record)}}) {
    write_file_atomically(path, text);
  }
}

CampaignRecord start_or_resume(const CampaignOptions& options, const CampaignPaths& paths,
                               double budget) {
  if (fs::exists(paths.record())) {
    CampaignRecord record = load_campaign(paths.record());
    if (record.engine != options.engine) {
      throw UsageError(paths.record().string() + ": engine: this campaign fuzzes '" +
                       record.engine + "', not '" + options.engine + "'; use another --out");
    }
    if (record.targets.empty()) {
      throw UsageError(paths.record().string() + ": targets: expected at least one fuzz target");
    }
    record.budget_seconds = budget;
    record.jobs = options.jobs;
    if (record.elapsed_seconds < budget) record.finished = false;
    std::fprintf(stderr, "campaign: resuming %s at %s of %s\n", paths.out.string().c_str(),
                 clock_text(record.elapsed_seconds).c_str(), clock_text(budget).c_str());
    return record;
  }
  CampaignRecord record;
  record.engine = options.engine;
  record.targets = parse_targets(options.targets);
  record.budget_seconds = budget;
  record.jobs = options.jobs;
  record.event_counters = !options.no_event_counters;
  record.command = options.command;
  record.started = utc_now();
  record.machine = machine_text();
  for (const std::string& target : record.targets) {
    record.corpora.push_back({target, count_files(options.seeds), 0});
  }
  return record;
}

void check_setup(const CampaignOptions& options, const std::vector<std::string>& targets) {
  // libFuzzer's fork and merge modes run their jobs through system() with the arguments
  // joined by spaces, unquoted: such a path would break every job, silently.
  for (const auto& [flag, path] : {std::pair{"--out", options.out},
                                   {"--fuzzers", options.fuzzers},
                                   {"--seeds", options.seeds},
                                   {"--dict", options.dict}}) {
    if (path.find_first_of(" \t\n'\"\\$`;&|<>*?()") != std::string::npos) {
      throw UsageError(std::string(flag) + ": '" + path +
                       "' has a space or shell character; libFuzzer's fork mode cannot pass "
                       "it to its jobs. Expected a plain path");
    }
  }
  // The fuzz targets resolve the same spec (KVFUZZ_ENGINE); resolving it here first turns
  // a bad plugin or a silent exec command into one line before any target starts.
  if (options.engine != "selftest-crash" && options.engine != "selftest-hang") {
    select_engine(options.engine);
  }
  for (const std::string& target : targets) {
    const fs::path binary = fs::path(options.fuzzers) / target;
    if (access(binary.c_str(), X_OK) != 0) {
      throw UsageError("--fuzzers: no fuzz target " + binary.string() +
                       "; build them with scripts/build.sh sanitize (clang) or pass --fuzzers DIR");
    }
  }
}

extern "C" void request_stop(int) {
  g_campaign_stop = true;
}

int run_campaign(const CampaignOptions& options) {
  const double budget = duration_option("--time", options.time);
  const double slice = duration_option("--slice", options.slice);
  if (options.jobs < 1)
    throw UsageError("--jobs: expected at least 1, got " + std::to_string(options.jobs));
  const CampaignPaths paths{options.out};
  CampaignRecord record = start_or_resume(options, paths, budget);
  check_setup(options, record.targets);
  FindingContext context{paths,
                         options.fuzzers,
                         options.regressions,
                         fs::read_symlink("/proc/self/exe"),
                         options.shrink_seconds,
                         options.input_timeout,
                         options.rss_limit_mb};

  struct sigaction action {};
  action.sa_handler = request_stop;
  sigaction(SIGINT, &action, nullptr);
  sigaction(SIGTERM, &action, nullptr);
  sigaction(SIGHUP, &action, nullptr);

  // A run killed between the two renames of a merge left the old corpus as TARGET.old.
  for (const std::string& target : record.targets) {
    const fs::path old = paths.out / "corpus" / (target + ".old");
    if (!fs::exists(paths.corpus(target)) && fs::exists(old)) fs::rename(old, paths.corpus(target));
  }
  save_campaign(record, paths.record());
  process_artifacts(record, context);  // anything a killed run left unprocessed
  // Every target gets a turn even in a short campaign.
  const double turn =
      std::max(10.0, std::min(slice, budget / static_cast<double>(record.targets.size())));
  while (!g_campaign_stop && record.elapsed_seconds + 1 < budget) {
    const std::string target =
        record.targets[static_cast<size_t>(record.next_target) % record.targets.size()];
    run_slice(record, options, paths, target, std::min(turn, budget - record.elapsed_seconds));
    if (!g_campaign_stop) ++record.next_target;
    save_campaign(record, paths.record());
    process_artifacts(record, context);
  }
  if (!g_campaign_stop && !record.finished) {
    std::fprintf(stderr, "campaign: merging the corpora\n");
    for (const std::string& target : record.targets) {
      if (g_campaign_stop) break;
      merge_corpus(record, options, paths, target);
    }
    process_artifacts(record, context);
    record.finished = !g_campaign_stop;
  }
  save_campaign(record, paths.record());
  write_reports(record, paths);

  std::set<std::string> signatures;
  for (const CampaignFinding& f : record.findings) signatures.insert(f.signature);
  std::printf("campaign %s: %s on %s, %lld inputs, %zu findings with %zu signatures\n",
              record.finished ? "finished" : "stopped", clock_text(record.elapsed_seconds).c_str(),
              record.engine.c_str(), static_cast<long long>(record.executions),
              record.findings.size(), signatures.size());
  for (const CampaignFinding& f : record.findings) {
    if (!f.duplicate_of.empty() && f.filed.empty() &&
        f.duplicate_of.find('/') != std::string::npos && f.duplicate_of.ends_with(".json")) {
      std::printf("  %s: already filed as %s\n", f.signature.c_str(), f.duplicate_of.c_str());
    } else if (f.duplicate_of.empty()) {
      std::printf("  %s: %s%s\n", f.signature.c_str(),
                  f.filed.empty() ? f.fixture.c_str() : f.filed.c_str(),
                  f.note.empty() ? "" : ("  (" + f.note + ")").c_str());
    }
  }
  std::printf("report: %s and %s\n", paths.report_md().string().c_str(),
              paths.report_html().string().c_str());
  if (!record.finished) std::printf("resume with the same command\n");
  return record.findings.empty() ? kExitPass : kExitMismatch;
}

}  // namespace

void add_campaign_command(CLI::App& app, int& exit_status) {
  auto options = std::make_shared<CampaignOptions>();
  CLI::App* cmd = app.add_subcommand(
      "campaign",
      "Fuzz an engine for a long time with the libFuzzer targets (docs/campaigns.md): targets\n"
      "take turns in fork mode with N jobs, seeded from corpus/; crashes, timeouts and\n"
      "out-of-memory become findings; each new failure signature is shrunk and filed under\n"
      "the regressions folder; corpora are merged at the end; DIR/report.md and\n"
      "DIR/report.html summarise it. Progress on stderr every few seconds. Ctrl-C stops it;\n"
      "the same command resumes it. Exit status: 0 no findings, 1 findings, 2 bad input.");
  cmd->add_option("--engine", options->engine,
                  "Engine to fuzz: a name (see kvfuzz list), plugin:PATH[:NAME] or exec:COMMAND")
      ->required();
  cmd->add_option("--time", options->time, "Total time budget, e.g. 30m, 8h, 1h30m")
      ->default_val("8h");
  cmd->add_option("--jobs", options->jobs, "Parallel fuzzing processes (libFuzzer -fork=N)")
      ->default_val(1);
  cmd->add_option("--out", options->out, "Campaign directory (created, or resumed when it exists)")
      ->default_val("kvfuzz-out/campaign");
  cmd->add_option("--targets", options->targets,
                  "properties (the six), all (and the fixture parser), or a list such as "
                  "prefix,reset")
      ->default_val("properties");
  cmd->add_option("--fuzzers", options->fuzzers, "Directory of the built fuzz targets")
      ->default_val(KVFUZZ_DEFAULT_FUZZERS_DIR);
  cmd->add_option("--seeds", options->seeds, "Seed fixtures (every target reads fixtures)")
      ->default_val("corpus");
  cmd->add_option("--regressions", options->regressions, "Where new failure signatures are filed")
      ->default_val("corpus/regressions");
  cmd->add_option("--slice", options->slice, "Longest turn of one target before the next")
      ->default_val("10m");
  cmd->add_option("--shrink-time", options->shrink_seconds,
                  "Shrinking budget per new signature, seconds")
      ->default_val(60)
      ->check(CLI::Range(0.0, 1e6));
  cmd->add_option("--input-timeout", options->input_timeout,
                  "Seconds before one input counts as a hang")
      ->default_val(10)
      ->check(CLI::Range(1, 86400));
  cmd->add_option("--rss-limit-mb", options->rss_limit_mb, "Memory limit of a fuzzing process")
      ->default_val(2048)
      ->check(CLI::Range(64, 1 << 20));
  cmd->add_option("--progress", options->progress_seconds, "Seconds between progress lines")
      ->default_val(5)
      ->check(CLI::Range(0.2, 3600.0));
  cmd->add_flag("--no-event-counters", options->no_event_counters,
                "Do not feed cache-state events to libFuzzer as coverage");
  cmd->add_option("--dict", options->dict, "libFuzzer dictionary (skipped when missing)")
      ->default_val("fuzzers/fixture.dict");
  cmd->callback([options, &exit_status] {
    options->command = "kvfuzz campaign --engine " + options->engine + " --time " + options->time +
                       " --jobs " + std::to_string(options->jobs) + " --out " + options->out;
    if (options->targets != "properties") options->command += " --targets " + options->targets;
    exit_status = run_campaign(*options);
  });
}

}  // namespace kvfuzz::cli
