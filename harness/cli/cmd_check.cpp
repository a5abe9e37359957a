// kvfuzz check: random scenarios from the generator against engines, judged by the
// chosen properties (kvfuzz/check.h runs them, in forked workers). Honest engines must
// pass every case; mutants must be rejected. A failing case is saved as a fixture before
// anything else is printed, then reported with the command that re-runs it; the run ends
// with a table (docs/check.md).
#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "check_filters.h"
#include "check_known.h"
#include "check_reproduce.h"
#include "check_summary.h"
#include "cli_support.h"
#include "commands.h"
#include "generate/events.h"
#include "isolation_flags.h"
#include "kvfuzz/check.h"
#include "kvfuzz/generator.h"
#include "kvfuzz/orchestrate.h"
#include "kvfuzz/property.h"
#include "support/atomic_file.h"

namespace kvfuzz::cli {

namespace {

struct CheckOptions {
  std::string engines = "all";
  int cases = 100;
  std::string seed_text = "1";
  std::string out = "kvfuzz-out";
  bool quiet = false;
  // Caps on the generated sizes (0: the generator's own): a slow engine (a plain Python
  // one through exec:) can be checked on small scenarios first.
  int max_tokens = 0;
  int max_head_dim = 0;
  int max_q_heads = 0;
  bool model = false;  // model level: a tiny transformer around the attention
  std::string properties = "prefix,schedule,layout,poison,reset,batch";
  int jobs = 1;
  IsolationFlags isolation;    // --timeout (per case and engine), --no-fork
  std::string case_seed_text;  // empty: --cases cases from --seed
  int max_failures = 1;
  std::vector<std::string> ignore;
  std::vector<std::string> known;  // --known: fixtures and folders of bugs already filed
  double shrink_seconds = 30;      // --shrink-seconds: per finding
  bool settle = false;             // --shrink-seconds given: shrink and settle without --known
  std::string junit, json;
  CaseFilters filters;
};

// Ctrl-C: the summary so far, then this status (as a shell reports a command ended by SIGINT).
constexpr int kExitInterrupted = 130;

struct EngineTally {
  std::shared_ptr<const EngineInfo> engine;
  EngineDeclarations declared;  // probe_declarations
};

// Which cache states the run reached, and how often; the ones never reached by name. Only
// the cases actually judged count (not --cases when stopped early, nor cases that every
// engine skipped).
void print_events(const EventCounts& events, int cases) {
  std::printf("\ncache-state events over %d cases:\n", cases);
  std::string never;
  for (int i = 0; i < kEventCount; ++i) {
    const auto event = static_cast<Event>(i);
    std::printf("  %-34s %10lld\n", std::string(event_name(event)).c_str(),
                static_cast<long long>(events[event]));
    if (events[event] == 0) never += (never.empty() ? "" : ", ") + std::string(event_name(event));
  }
  if (!never.empty()) std::printf("never hit: %s\n", never.c_str());
}

// One scenario per case serves every engine (kvfuzz/orchestrate.h), then the flags' filters.
GeneratorOptions generator_options(const CheckOptions& options, std::vector<EngineTally>& tallies) {
  std::vector<NamedDeclarations> engines;
  for (EngineTally& t : tallies) {
    // In a child, as the cases are: an engine that crashes when made or asked is one line
    // (ProbeCrash), not the end of kvfuzz. --no-fork asks here, for a debugger.
    t.declared = declarations_of(*t.engine, options.isolation);
    engines.push_back({t.engine->name, t.declared});
  }
  GeneratorOptions generator;
  try {
    generator =
        generator_options_from_declarations(engines, SizeCaps{.max_tokens = options.max_tokens,
                                                              .max_head_dim = options.max_head_dim,
                                                              .max_q_heads = options.max_q_heads,
                                                              .model = options.model});
  } catch (const DeclarationError& e) {
    throw UsageError(std::string("--engine: ") + e.what());
  }
  apply_filters(options.filters, generator);
  return generator;
}

// Set by SIGINT: the plan stops dispatching and returns what it has (kvfuzz/check.h).
volatile std::sig_atomic_t g_interrupted = 0;

extern "C" void on_interrupt(int) {
  g_interrupted = 1;
  std::signal(SIGINT, SIG_DFL);  // a second Ctrl-C ends kvfuzz at once
}

std::vector<Property> chosen_properties(const std::string& list) {
  std::vector<Property> properties;
  size_t start = 0;
  while (start <= list.size()) {
    const size_t comma = std::min(list.find(',', start), list.size());
    const Property property = select_property(list.substr(start, comma - start));
    if (std::find(properties.begin(), properties.end(), property) == properties.end()) {
      properties.push_back(property);
    }
    start = comma + 1;
  }
  return properties;
}

std::string engine_list(const CheckPlan& plan, const std::vector<size_t>& engines) {
  std::string names;
  for (size_t e : engines) names += (names.empty() ? "" : ", ") + plan.engines[e].info->name;
  return names.empty() ? "-" : names;
}

void print_progress(const CheckPlan& plan, const CheckProgress& p) {
  std::string eta = "?";
  if (p.cases_done > 0) {
    eta = std::to_string(
              static_cast<long>(p.seconds / p.cases_done * (p.cases_total - p.cases_done))) +
          " s";
  }
  std::fprintf(stderr, "check: %d/%d cases, %d findings, %.0f s, ETA %s; running %s\n",
               p.cases_done, p.cases_total, p.findings, p.seconds, eta.c_str(),
               engine_list(plan, p.engines_busy).c_str());
}

// The finding as it is first seen: its fixture is already on disk.
void print_finding(const CheckPlan& plan, const CheckFinding& f, const std::string& command) {
  const EngineInfo& engine = *plan.engines[f.engine].info;
  if (engine.mutant && f.property) return;  // a mutant rejected as expected: the table says it
  std::printf("%s %s, case %d (case seed %llu): %s\n  saved to %s\n  reproduce: %s\n%s\n",
              engine.mutant ? "FOUND" : "FAIL", engine.name.c_str(), f.case_number,
              static_cast<unsigned long long>(f.seed), f.signature.c_str(), f.fixture.c_str(),
              command.c_str(), f.report.c_str());
  std::fflush(stdout);
}

std::string verdict_text(const CheckEngine& engine, const CheckEngineResult& t) {
  const CheckFinding* first = nullptr;
  int kept = 0, duplicates = 0, ignored = 0, known = 0, same_cause = 0;
  for (const CheckFinding& f : t.findings) {
    if (f.ignored) {
      ignored += 1 + f.duplicates;
      continue;
    }
    if (!f.known.empty()) {
      known += 1 + f.duplicates;
      continue;
    }
    if (!f.same_cause_as.empty()) {  // the root cause of a finding counted already
      same_cause += 1 + f.duplicates;
      continue;
    }
    if (first == nullptr) first = &f;
    ++kept;
    duplicates += f.duplicates;
  }
  std::string text;
  if (first == nullptr) {
    text = engine.info->mutant ? "NOT REJECTED (the suite missed this mutant)" : "pass";
  } else {
    text = std::string(engine.info->mutant ? "rejected" : "FAIL") + " at case " +
           std::to_string(first->case_number) + ": " + first->line;
    if (!engine.info->mutant) text += " -> " + first->fixture.string();
    if (kept > 1 || duplicates > 0 || same_cause > 0) {
      text +=
          " (" + std::to_string(kept) + " distinct, " + std::to_string(duplicates) + " duplicates" +
          (same_cause > 0 ? ", " + std::to_string(same_cause) + " of the same root cause" : "") +
          ")";
    }
  }
  if (ignored > 0) text += " [" + std::to_string(ignored) + " ignored]";
  if (known > 0) text += " [" + std::to_string(known) + " known]";
  return text;
}

void print_table(const CheckPlan& plan, const CheckResult& result) {
  // The name column as wide as the longest name (exec: and plugin: specs are long).
  int width = 6;
  for (const CheckEngine& e : plan.engines) {
    width = std::max(width, static_cast<int>(e.info->name.size()));
  }
  std::printf("\n%-*s %-7s %6s %8s %9s %6s %8s  %s\n", width, "engine", "kind", "cases", "rows",
              "unjudged", "bound", "seconds", "verdict");
  for (size_t e = 0; e < plan.engines.size(); ++e) {
    const CheckEngine& engine = plan.engines[e];
    const CheckEngineResult& t = result.engines[e];
    std::printf("%-*s %-7s %6d %8ld %9ld %6.3f %8.3f  %s %s\n", width, engine.info->name.c_str(),
                engine.info->mutant ? "mutant" : "honest", t.cases, t.rows, t.unjudged,
                t.bound_used, t.seconds, verdict_ok(engine, t) ? "ok  " : "BAD ",
                verdict_text(engine, t).c_str());
  }
  // Per property, the cases each failed (only when some did).
  const bool any_failing =
      std::any_of(result.engines.begin(), result.engines.end(), [](const CheckEngineResult& t) {
        return t.crashes > 0 ||
               std::any_of(t.failing.begin(), t.failing.end(), [](int n) { return n > 0; });
      });
  if (any_failing) {
    std::printf("\nfailing cases by property:\n%-*s", width, "engine");
    for (const Property p : plan.properties) {
      std::printf(" %8s", std::string(property_name(p)).c_str());
    }
    std::printf(" %8s\n", "crashes");
    for (size_t e = 0; e < plan.engines.size(); ++e) {
      const CheckEngineResult& t = result.engines[e];
      std::printf("%-*s", width, plan.engines[e].info->name.c_str());
      for (const Property p : plan.properties) {
        std::printf(" %8d", t.failing[static_cast<size_t>(p)]);
      }
      std::printf(" %8d\n", t.crashes);
    }
  }
  for (size_t e = 0; e < plan.engines.size(); ++e) {
    const CheckEngineResult& t = result.engines[e];
    if (t.skipped == 0) continue;
    std::printf("%s: %d cases were not run on it (the first %s)\n",
                plan.engines[e].info->name.c_str(), t.skipped, t.skipped_why.c_str());
  }
  std::printf(
      "bound: the largest share of its arithmetic bound a judged value used in a passing row, "
      "(error - the output dtype's half ulp) / bound: how close the engine came to failing "
      "prefix\n");
  const bool any_unjudged = std::any_of(result.engines.begin(), result.engines.end(),
                                        [](const CheckEngineResult& t) { return t.unjudged > 0; });
  if (any_unjudged) {
    std::printf(
        "unjudged: rows within their bound whose bound is at least the largest |v| they see "
        "(large scores with spread-out values: the engine's arithmetic allows any value in "
        "range there), so they were only checked to be finite; a bug confined to them passes\n");
  }
}

int run_check(const CheckOptions& options) {
  if (options.cases < 1) throw UsageError("--cases: expected a positive number of cases");
  if (options.jobs < 1) throw UsageError("--jobs: expected a positive number of workers");
  if (options.max_failures < 1) {
    throw UsageError("--max-failures: expected a positive number of findings per engine");
  }
  const Isolation isolation = options.isolation.isolation();  // --timeout checked
  CheckPlan plan;
  plan.properties = chosen_properties(options.properties);
  const uint64_t run_seed = parse_seed(options.seed_text);
  std::vector<EngineTally> tallies;
  for (const std::shared_ptr<const EngineInfo>& engine : select_engines(options.engines)) {
    tallies.push_back({engine, {}});
  }
  try {
    plan.generator = generator_options(options, tallies);
  } catch (const ProbeCrash& e) {
    std::fprintf(stderr,
                 "kvfuzz: check: %s; the run cannot start (--no-fork asks in this process, for "
                 "a debugger)\n",
                 e.what());
    return kExitCannotStart;
  }
  for (const EngineTally& t : tallies) plan.engines.push_back({t.engine, t.declared});
  if (options.case_seed_text.empty()) {
    for (int i = 0; i < options.cases; ++i) plan.case_seeds.push_back(case_seed(run_seed, i));
  } else {
    try {
      plan.case_seeds = {parse_seed(options.case_seed_text)};
    } catch (const UsageError&) {
      throw UsageError("--case-seed: expected an integer in [0, 18446744073709551615], got '" +
                       options.case_seed_text + "'");
    }
  }
  plan.jobs = options.jobs;
  plan.fork = isolation.fork;
  plan.timeout = isolation.timeout;
  plan.max_failures = options.max_failures;
  plan.ignore = options.ignore;
  plan.out = options.out;
  // Known bugs: loaded (bad input before anything runs), replayed, and room made for them.
  RootCauses causes = load_known(options.known);
  plan.max_failures += replay_known(causes, plan, isolation);

  const std::vector<std::string> argv = own_command_line();
  const auto command_of = [&](const CheckFinding& f) {
    return reproduction_command(argv, plan.engines[f.engine].info->name, f.seed);
  };
  EventCounts events;
  CheckCallbacks callbacks;
  callbacks.on_finding = [&](const CheckFinding& f) { print_finding(plan, f, command_of(f)); };
  callbacks.on_case = [&](const Scenario& scenario) {
    events += count_events(scenario, plan.generator.edges);
  };
  if (!options.quiet) {
    callbacks.on_progress = [&](const CheckProgress& p) { print_progress(plan, p); };
  }
  g_interrupted = 0;
  callbacks.stop = &g_interrupted;
  std::signal(SIGINT, on_interrupt);
  CheckResult result = run_check_plan(plan, callbacks);
  std::signal(SIGINT, SIG_DFL);

  if ((options.settle || !causes.known().empty()) && !result.interrupted) {
    settle_findings(causes, plan, result, isolation, options.shrink_seconds);
  }
  print_table(plan, result);
  print_events(events, result.cases_run);
  FindingCommands commands;
  for (const CheckEngineResult& t : result.engines) {
    commands.emplace_back();
    for (const CheckFinding& f : t.findings) commands.back().push_back(command_of(f));
  }
  if (!options.junit.empty()) {
    write_file_atomically(options.junit, junit_xml(plan, result, commands));
  }
  if (!options.json.empty()) {
    write_file_atomically(options.json, summary_json(plan, result, commands));
  }
  if (result.interrupted) {
    std::printf("interrupted after %d of %zu cases (Ctrl-C)\n", result.cases_run,
                plan.case_seeds.size());
    std::fflush(stdout);
    return kExitInterrupted;
  }
  for (size_t e = 0; e < plan.engines.size(); ++e) {
    if (!verdict_ok(plan.engines[e], result.engines[e])) return kExitMismatch;
  }
  return kExitPass;
}
}  // namespace

void add_check_command(CLI::App& app, int& exit_status) {
  auto options = std::make_shared<CheckOptions>();
  CLI::App* cmd = app.add_subcommand(
      "check",
      "Run random scenarios against engines: honest engines must pass every case, mutants must\n"
      "be rejected. Failing cases are saved as fixtures under --out. Exit status: 0 as expected,\n"
      "1 an honest engine failed or a mutant was not rejected, 2 bad input, 3 an engine crashed\n"
      "or hung while it was made and asked for its declarations (before any case), 130\n"
      "interrupted (Ctrl-C; the table and summaries so far are still written). See docs/check.md.");
  cmd->add_option("--engine", options->engines, kEnginesHelp)->default_val("all");
  cmd->add_option("--cases", options->cases, "Number of random scenarios")
      ->default_val(100)
      ->check(CLI::Range(1, 100000000));
  cmd->add_option("--seed", options->seed_text,
                  "Seed of the run (a decimal uint64); case i uses its own derived seed, which "
                  "the saved fixture records")
      ->default_val("1");
  cmd->add_option("--out", options->out, "Directory for failing fixtures")
      ->default_val("kvfuzz-out");
  cmd->add_option("--max-tokens", options->max_tokens,
                  "At most this many tokens per sequence and request (default: up to 160). Above "
                  "160, long contexts: at most 2 sequences, at most 4 q heads and head_dim 16, a "
                  "first prefill of up to this many tokens, long decode runs, windows up to the "
                  "context")
      ->check(CLI::Range(1, 16384));
  cmd->add_option("--max-head-dim", options->max_head_dim,
                  "At most this head dimension (default: up to 128)")
      ->check(CLI::Range(1, 128));
  cmd->add_option("--max-q-heads", options->max_q_heads,
                  "At most this many query heads (default: up to 16)")
      ->check(CLI::Range(1, 32));
  cmd->add_flag("--model", options->model,
                "Model level: each scenario runs a tiny transformer (random vocabulary, width, "
                "layers) whose attention is the engine, judged on the logits and located to a "
                "layer");
  cmd->add_option("--property", options->properties,
                  "Comma-separated properties to judge every case by (default: all six: " +
                      property_list(" and ") + ")")
      ->default_val("prefix,schedule,layout,poison,reset,batch");
  cmd->add_option("--jobs", options->jobs,
                  "Worker processes judging cases in parallel; the results are the same for "
                  "every number")
      ->default_val(1)
      ->check(CLI::Range(1, 1024));
  add_isolation_options(*cmd, options->isolation,
                        "Seconds one case may take on one engine (all properties) before its "
                        "worker is killed and the case is a timeout finding; also how long an "
                        "engine may take to be made and give its declarations before any case",
                        "Judge in this process, not in a forked worker: no crash isolation and "
                        "no --timeout, but a debugger sees the engine");
  cmd->add_option("--case-seed", options->case_seed_text,
                  "Run exactly one case, the one of this case seed (what a failure prints and "
                  "its fixture records as provenance.seed); --cases and --seed are then unused");
  cmd->add_option("--max-failures", options->max_failures,
                  "Distinct findings (by signature) per engine before it is no longer run; "
                  "later cases with a known signature are counted as duplicates")
      ->default_val(1)
      ->check(CLI::Range(1, 1000000));
  cmd->add_option("--ignore", options->ignore,
                  "A finding signature (prefix/mismatch, crash/SIGSEGV, timeout, ...) to count "
                  "as ignored: it neither fails the run nor ends it (repeatable)");
  cmd->add_option("--known", options->known,
                  "A fixture, or a folder of fixtures, of a bug already known (repeatable): "
                  "replayed first and reported as still failing or now passing; a finding "
                  "that shrinks to one is set aside, not failing the run, while the run looks "
                  "for others");
  cmd->add_option("--shrink-seconds", options->shrink_seconds,
                  "Shrink each finding of an honest engine for at most this many seconds after "
                  "the run (its shrunk fixture written beside the raw one) and group findings "
                  "by root cause: one that shrinks to an earlier finding's case is counted as "
                  "that finding's cause, one that shrinks to a --known bug is set aside. "
                  "Implied, at 30 s, by --known")
      ->default_val(30)
      ->check(CLI::Range(0.0, 86400.0))
      ->each([options](const std::string&) { options->settle = true; });
  cmd->add_option("--junit", options->junit, "Write a JUnit XML report to this file");
  cmd->add_option("--json", options->json, "Write a JSON summary to this file");
  cmd->add_flag("--quiet", options->quiet, "No progress lines on stderr");
  add_filter_options(*cmd, options->filters);
  cmd->callback([options, &exit_status] { exit_status = run_check(*options); });
}

}  // namespace kvfuzz::cli
