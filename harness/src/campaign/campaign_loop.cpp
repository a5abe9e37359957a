#include "campaign/campaign_loop.h"

#include <signal.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <ctime>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "campaign/campaign_support.h"
#include "kvfuzz/engine_spec.h"
#include "support/atomic_file.h"

namespace kvfuzz::campaign {

namespace fs = std::filesystem;

std::atomic<bool> g_campaign_stop{false};

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

namespace {

std::string machine_text() {
  utsname u{};
  uname(&u);
  return std::string(u.sysname) + " " + u.release + " " + u.machine + ", " +
         std::to_string(std::thread::hardware_concurrency()) + " cores";
}

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
      throw CampaignSetupError(
          "--targets: unknown target '" + spec.substr(start, end - start) +
          "'; expected properties, all, or a list of prefix, schedule, layout, "
          "poison, reset, batch, fixture");
    }
    if (std::find(targets.begin(), targets.end(), name) == targets.end()) targets.push_back(name);
    start = end + 1;
  }
  return targets;
}

void write_reports(const CampaignRecord& record, const CampaignPaths& paths) {
  for (const auto& [path, text] : {std::pair{paths.report_md(), campaign_markdown(record)},
                                   std::pair{paths.report_html(), campaign_html(record)}}) {
    write_file_atomically(path, text);
  }
}

CampaignRecord start_or_resume(const CampaignOptions& options, const CampaignPaths& paths,
                               const CampaignProgress& progress) {
  const double budget = options.budget_seconds;
  if (fs::exists(paths.record())) {
    CampaignRecord record = load_campaign(paths.record());
    if (record.engine != options.engine) {
      throw CampaignSetupError(paths.record().string() + ": engine: this campaign fuzzes '" +
                               record.engine + "', not '" + options.engine +
                               "'; use another --out");
    }
    if (record.targets.empty()) {
      throw CampaignSetupError(paths.record().string() +
                               ": targets: expected at least one fuzz target");
    }
    record.budget_seconds = budget;
    record.jobs = options.jobs;
    if (record.elapsed_seconds < budget) record.finished = false;
    progress.note("resuming " + paths.out.string() + " at " + clock_text(record.elapsed_seconds) +
                  " of " + clock_text(budget));
    return record;
  }
  CampaignRecord record;
  record.engine = options.engine;
  record.targets = parse_targets(options.targets);
  record.budget_seconds = budget;
  record.jobs = options.jobs;
  record.event_counters = options.event_counters;
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
      throw CampaignSetupError(
          std::string(flag) + ": '" + path +
          "' has a space or shell character; libFuzzer's fork mode cannot pass "
          "it to its jobs. Expected a plain path");
    }
  }
  // The fuzz targets resolve the same spec (KVFUZZ_ENGINE); resolving it here first turns
  // a bad plugin or a silent exec command into one line before any target starts.
  if (options.engine != "selftest-crash" && options.engine != "selftest-hang") {
    try {
      resolve_engine(options.engine);
    } catch (const EngineSpecError& e) {
      throw CampaignSetupError(e.what());
    }
  }
  for (const std::string& target : targets) {
    const fs::path binary = fs::path(options.fuzzers) / target;
    if (access(binary.c_str(), X_OK) != 0) {
      throw CampaignSetupError(
          "--fuzzers: no fuzz target " + binary.string() + "; " +
          (options.fuzzers_hint.empty()
               ? "a build with KVFUZZ_FUZZERS (scripts/build.sh fuzz or sanitize, clang) makes "
                 "them and its cmake --install installs them, or pass --fuzzers DIR"
               : options.fuzzers_hint));
    }
  }
}

// Seeds and a dictionary are optional to libFuzzer, but a campaign without them starts
// from nothing: said on the terminal, not only in a log.
void warn_about_missing_inputs(const CampaignOptions& options, const CampaignProgress& progress) {
  std::error_code error;
  if (!fs::is_directory(options.seeds, error)) {
    progress.note("warning: --seeds " + options.seeds +
                  ": no such directory; the targets start from their own corpora (" + options.out +
                  "/corpus/TARGET) only");
  }
  if (!fs::is_regular_file(options.dict, error)) {
    progress.note("warning: --dict " + options.dict +
                  ": no such file; fuzzing without the fixture dictionary");
  }
}

extern "C" void request_stop(int) {
  g_campaign_stop = true;
}

}  // namespace

CampaignRecord run_campaign(const CampaignOptions& options, const CampaignProgress& progress) {
  const double budget = options.budget_seconds;
  const double slice = options.slice_seconds;
  const CampaignPaths paths{options.out};
  g_campaign_stop = false;  // a stop belongs to the campaign it interrupted
  CampaignRecord record = start_or_resume(options, paths, progress);
  check_setup(options, record.targets);
  warn_about_missing_inputs(options, progress);
  FindingContext context{
      paths,
      options.fuzzers,
      options.regressions.empty() ? paths.regressions() : fs::path(options.regressions),
      fs::read_symlink("/proc/self/exe"),
      options.shrink_seconds,
      options.input_timeout,
      options.rss_limit_mb,
      progress.note};

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
    run_slice(record, options, paths, progress, target,
              std::min(turn, budget - record.elapsed_seconds));
    if (!g_campaign_stop) ++record.next_target;
    save_campaign(record, paths.record());
    process_artifacts(record, context);
  }
  if (!g_campaign_stop && !record.finished) {
    progress.note("merging the corpora");
    for (const std::string& target : record.targets) {
      if (g_campaign_stop) break;
      merge_corpus(record, options, paths, progress, target);
    }
    process_artifacts(record, context);
    record.finished = !g_campaign_stop;
  }
  save_campaign(record, paths.record());
  write_reports(record, paths);
  return record;
}

}  // namespace kvfuzz::campaign
