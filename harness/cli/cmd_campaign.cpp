// kvfuzz campaign --engine E --time 8h --jobs N --out DIR: an overnight fuzzing campaign
// (docs/campaigns.md; the loop is campaign/campaign_loop.h). Here: the options, their
// validation, the progress lines on stderr and the summary on stdout.
// Exit status: 0 no findings, 1 findings, 2 bad input.
#include <cstdio>
#include <memory>
#include <set>
#include <string>

#include "campaign/campaign_defaults.h"
#include "campaign/campaign_loop.h"
#include "cli_support.h"
#include "commands.h"
#include "generate/events.h"
#include "support/duration.h"

namespace kvfuzz::cli {

namespace {

using campaign::clock_text;

// The flags as given; durations are parsed and checked when the command runs.
struct CampaignFlags {
  campaign::CampaignOptions options;
  std::string time = "8h";
  std::string slice = "10m";
  bool no_event_counters = false;
  bool sanitize = false;  // the ASan + UBSan targets instead of the coverage-only ones
  campaign::CampaignDefaults defaults;
};

double duration_option(const std::string& flag, const std::string& text) {
  const auto seconds = parse_duration(text);
  if (!seconds) {
    throw UsageError(flag + ": expected a duration such as 90s, 30m, 8h or 1h30m, got '" + text +
                     "'");
  }
  return *seconds;
}

void print_note(const std::string& line) {
  std::fprintf(stderr, "campaign: %s\n", line.c_str());
}

void print_tick(const CampaignSample& sample, const CampaignRecord& record,
                const std::string& waiting) {
  std::fprintf(
      stderr,
      "campaign: %s / %s  %-14s  %6lld exec/s  cov %lld  ft %lld  events %d/%d  "
      "states %d/%d  failures %d%s%s\n",
      clock_text(sample.elapsed_seconds).c_str(), clock_text(record.budget_seconds).c_str(),
      sample.target.c_str(), static_cast<long long>(sample.executions_per_second),
      static_cast<long long>(sample.coverage), static_cast<long long>(sample.features),
      sample.events_reached, kEventCount, sample.cache_states, kCacheStateCount, sample.failures,
      waiting.empty() ? "" : "  (", waiting.empty() ? "" : (waiting + ")").c_str());
}

int run_campaign_command(CampaignFlags& flags) {
  campaign::CampaignOptions& options = flags.options;
  options.budget_seconds = duration_option("--time", flags.time);
  options.slice_seconds = duration_option("--slice", flags.slice);
  if (options.jobs < 1)
    throw UsageError("--jobs: expected at least 1, got " + std::to_string(options.jobs));
  options.event_counters = !flags.no_event_counters;
  // --fuzzers names the targets itself; otherwise --sanitize picks which build's.
  if (options.fuzzers.empty()) {
    options.fuzzers = flags.sanitize ? flags.defaults.sanitized_fuzzers : flags.defaults.fuzzers;
    if (!flags.defaults.installed)
      options.fuzzers_hint = campaign::how_to_build_fuzzers(flags.sanitize);
  } else if (flags.sanitize) {
    throw UsageError(
        "--sanitize: picks the sanitize build's targets, and --fuzzers names a "
        "directory itself; expected one of them");
  }
  CampaignRecord record;
  try {
    record = campaign::run_campaign(options, {print_note, print_tick});
  } catch (const campaign::CampaignSetupError& e) {
    throw UsageError(e.what());
  }

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
  const campaign::CampaignPaths paths{options.out};
  std::printf("report: %s and %s\n", paths.report_md().string().c_str(),
              paths.report_html().string().c_str());
  if (!record.finished) std::printf("resume with the same command\n");
  return record.findings.empty() ? kExitPass : kExitMismatch;
}

}  // namespace

void add_campaign_command(CLI::App& app, int& exit_status) {
  auto flags = std::make_shared<CampaignFlags>();
  campaign::CampaignOptions* options = &flags->options;
  flags->defaults = campaign::campaign_defaults();
  const campaign::CampaignDefaults& defaults = flags->defaults;
  const std::string from = defaults.installed ? " (installed)" : " (build tree)";
  CLI::App* cmd = app.add_subcommand(
      "campaign",
      "Fuzz an engine for a long time with the libFuzzer targets (docs/campaigns.md): targets\n"
      "take turns in fork mode with N jobs, seeded from kvfuzz's corpus; crashes, timeouts\n"
      "and out-of-memory become findings; each new failure signature is shrunk and filed\n"
      "under DIR/regressions; corpora are merged at the end; DIR/report.md and\n"
      "DIR/report.html summarise it. Progress on stderr every few seconds. Ctrl-C stops it;\n"
      "the same command resumes it. Exit status: 0 no findings, 1 findings, 2 bad input.");
  cmd->add_option("--engine", options->engine,
                  "Engine to fuzz: a name (see kvfuzz list), plugin:PATH[:NAME] or exec:COMMAND")
      ->required();
  cmd->add_option("--time", flags->time, "Total time budget, e.g. 30m, 8h, 1h30m")
      ->default_val("8h");
  cmd->add_option("--jobs", options->jobs, "Parallel fuzzing processes (libFuzzer -fork=N)")
      ->default_val(1);
  cmd->add_option("--out", options->out, "Campaign directory (created, or resumed when it exists)")
      ->default_val("kvfuzz-out/campaign");
  cmd->add_option("--targets", options->targets,
                  "properties (the six), all (and the fixture parser), or a list such as "
                  "prefix,reset")
      ->default_val("properties");
  cmd->add_option("--fuzzers", options->fuzzers,
                  "Directory of the built fuzz targets" + from + "; default " + defaults.fuzzers +
                      " (coverage only, no sanitizers: scripts/build.sh fuzz)");
  cmd->add_flag("--sanitize", flags->sanitize,
                "Run the ASan + UBSan targets (" + defaults.sanitized_fuzzers +
                    ", scripts/build.sh sanitize): memory errors of the engine become crashes, "
                    "at several times fewer inputs a second");
  cmd->add_option("--seeds", options->seeds, "Seed fixtures (every target reads fixtures)" + from)
      ->default_val(defaults.seeds);
  cmd->add_option("--regressions", options->regressions,
                  "Where new failure signatures are filed (default DIR/regressions; "
                  "corpus/regressions files them into a checkout's corpus)");
  cmd->add_option("--slice", flags->slice, "Longest turn of one target before the next")
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
  cmd->add_flag("--no-event-counters", flags->no_event_counters,
                "Do not feed cache-state events to libFuzzer as coverage");
  cmd->add_option("--dict", options->dict,
                  "libFuzzer dictionary (skipped, with a warning, when missing)" + from)
      ->default_val(defaults.dict);
  cmd->callback([flags, options, &exit_status] {
    options->command = "kvfuzz campaign --engine " + options->engine + " --time " + flags->time +
                       " --jobs " + std::to_string(options->jobs) + " --out " + options->out;
    if (options->targets != "properties") options->command += " --targets " + options->targets;
    if (flags->sanitize) options->command += " --sanitize";
    exit_status = run_campaign_command(*flags);
  });
}

}  // namespace kvfuzz::cli
