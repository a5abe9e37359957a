// kvfuzz check: random scenarios from the generator against engines. Honest engines
// must pass every case; mutants must be rejected. A failing case is saved as a fixture
// before anything else is printed, then reported; the run ends with a table.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <deque>
#include <memory>
#include <numeric>
#include <optional>
#include <string>

#include "check_filters.h"
#include "cli_support.h"
#include "commands.h"
#include "corpus/fixture_names.h"
#include "corpus/provenance.h"
#include "generate/events.h"
#include "judge/report.h"
#include "kvfuzz/engine_spec.h"
#include "kvfuzz/fixture_io.h"
#include "kvfuzz/generator.h"
#include "kvfuzz/judge.h"
#include "kvfuzz/property.h"

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
  CaseFilters filters;
};

struct EngineTally {
  std::shared_ptr<const EngineInfo> engine;
  EngineDeclarations declared;  // probe_declarations
  int cases = 0;
  int skipped = 0;  // cases outside the engine's supports (only when engines' supports differ)
  std::string skipped_why;  // the first such case's reason
  long rows = 0;
  long unjudged = 0;  // rows that passed only because their tolerance reaches max |v|
  double seconds = 0;
  std::string failure;  // empty while passing
  std::string saved_to;
};

std::string save_failure(const CheckOptions& options, Scenario scenario, const EngineInfo& engine,
                         uint64_t seed, const Divergence& divergence) {
  scenario.name = check_fixture_stem(engine.name, seed);
  stamp_failure(scenario, "check", engine.name, std::nullopt, failure_line(divergence));
  scenario.provenance.seed = seed;
  const std::filesystem::path path = std::filesystem::path(options.out) / (scenario.name + ".json");
  save_fixture(scenario, path);
  return path.string();
}

bool verdict_ok(const EngineTally& t) {
  return t.engine->mutant ? !t.failure.empty() : t.failure.empty();
}

void print_table(const std::vector<EngineTally>& tallies) {
  std::printf("\n%-24s %-7s %6s %8s %9s %8s  %s\n", "engine", "kind", "cases", "rows", "unjudged",
              "seconds", "verdict");
  for (const EngineTally& t : tallies) {
    std::string verdict;
    if (t.engine->mutant) {
      verdict = t.failure.empty()
                    ? "NOT REJECTED (the suite missed this mutant)"
                    : "rejected at case " + std::to_string(t.cases) + ": " + t.failure;
    } else {
      verdict = t.failure.empty() ? "pass"
                                  : "FAIL at case " + std::to_string(t.cases) + ": " + t.failure +
                                        " -> " + t.saved_to;
    }
    std::printf("%-24s %-7s %6d %8ld %9ld %8.3f  %s %s\n", t.engine->name.c_str(),
                t.engine->mutant ? "mutant" : "honest", t.cases, t.rows, t.unjudged, t.seconds,
                verdict_ok(t) ? "ok  " : "BAD ", verdict.c_str());
  }
  const bool any_unjudged = std::any_of(tallies.begin(), tallies.end(),
                                        [](const EngineTally& t) { return t.unjudged > 0; });
  for (const EngineTally& t : tallies) {
    if (t.skipped == 0) continue;
    std::printf("%s: %d cases were not run on it (the first %s)\n", t.engine->name.c_str(),
                t.skipped, t.skipped_why.c_str());
  }
  if (any_unjudged) {
    std::printf(
        "unjudged: rows within their bound whose bound is at least the largest |v| they see "
        "(large scores with spread-out values: the engine's arithmetic allows any value in "
        "range there), so they were only checked to be finite; a bug confined to them passes\n");
  }
}

// Which cache states the run reached, and how often; the ones never reached by name.
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

// What every engine supports. When the engines share no storage dtype (flash-bf16 beside
// flash-f16), the union of their dtypes instead: each engine then skips the cases outside
// its own supports.
EngineSupports common_supports(const std::vector<EngineTally>& tallies) {
  EngineSupports common;
  std::vector<DType> any;
  const auto tighter = [](int a, int b) { return a == 0 ? b : b == 0 ? a : std::min(a, b); };
  for (const EngineTally& t : tallies) {
    const EngineSupports& s = t.declared.supports;
    std::erase_if(common.dtypes, [&](DType d) {
      return std::find(s.dtypes.begin(), s.dtypes.end(), d) == s.dtypes.end();
    });
    for (DType d : s.dtypes) {
      if (std::find(any.begin(), any.end(), d) == any.end()) any.push_back(d);
    }
    common.head_dim_multiple = std::lcm(common.head_dim_multiple, std::max(1, s.head_dim_multiple));
    common.max_head_dim = tighter(common.max_head_dim, s.max_head_dim);
    common.max_q_heads = tighter(common.max_q_heads, s.max_q_heads);
    common.max_context = tighter(common.max_context, s.max_context);
    common.value_dim_is_head_dim = common.value_dim_is_head_dim || s.value_dim_is_head_dim;
  }
  if (common.dtypes.empty()) common.dtypes = any;
  return common;
}

// One scenario per case serves every engine, so it uses only the optional operations that
// all of them announce, within what all of them support.
GeneratorOptions generator_options(const CheckOptions& options, std::vector<EngineTally>& tallies) {
  GeneratorOptions generator;
  for (EngineTally& t : tallies) {
    try {
      t.declared = probe_declarations(*t.engine);
    } catch (const EngineError& e) {
      throw UsageError(std::string("--engine: ") + e.what());
    }
    if (t.declared.supports.dtypes.empty()) {
      throw UsageError("--engine: " + t.engine->name + " supports no storage dtype");
    }
    generator.truncate = generator.truncate && t.declared.capabilities.truncate;
    generator.fork = generator.fork && t.declared.capabilities.fork;
  }
  generator.supports = common_supports(tallies);
  const auto cap = [](int limit, int& most, int& typical) {
    if (limit <= 0) return;
    most = std::min(most, limit);
    typical = std::min(typical, limit);
  };
  // Up to the default sizes' maximum a cap; beyond it, the long-context mode
  // (LongContextOptions), whose contexts reach the number given.
  if (options.max_tokens > generator.max_epoch_tokens) {
    generator.long_context = LongContextOptions{options.max_tokens};
  } else {
    cap(options.max_tokens, generator.max_epoch_tokens, generator.typical_epoch_tokens);
  }
  cap(options.max_head_dim, generator.max_head_dim, generator.typical_head_dim);
  cap(options.max_q_heads, generator.max_q_heads, generator.typical_q_heads);
  const EngineSupports& can = generator.supports;
  const int most_dim = std::min(can.max_head_dim > 0 ? can.max_head_dim : 128,
                                generator.long_context ? 16 : generator.max_head_dim);
  if (can.head_dim_multiple > most_dim) {
    throw UsageError("--engine: head_dim must be a multiple of " +
                     std::to_string(can.head_dim_multiple) + " for the engines, but at most " +
                     std::to_string(most_dim) + " here (--max-head-dim, long contexts: 16)");
  }
  if (options.model) generator.model = ModelOptions{};
  apply_filters(options.filters, generator);
  return generator;
}

int run_check(const CheckOptions& options) {
  if (options.cases < 1) throw UsageError("--cases: expected a positive number of cases");
  const uint64_t run_seed = parse_seed(options.seed_text);
  std::vector<EngineTally> tallies;
  for (const std::shared_ptr<const EngineInfo>& engine : select_engines(options.engines)) {
    EngineTally tally;
    tally.engine = engine;
    tallies.push_back(tally);
  }
  const GeneratorOptions generator = generator_options(options, tallies);

  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  auto last_progress = start;
  EventCounts events;
  for (int i = 0; i < options.cases; ++i) {
    const uint64_t seed = case_seed(run_seed, i);
    PrngChoiceSource choices(seed);
    const Scenario scenario = generate_scenario(choices, generator);
    events += count_events(scenario, generator.edges);
    // One Prepared per distinct declared numerics (the reference's bounds depend on them).
    std::deque<Prepared> prepared_for;  // (a deque: references stay valid as it grows)
    const auto prepared_of = [&](const EngineNumerics& numerics) -> const Prepared& {
      for (const Prepared& p : prepared_for) {
        if (p.numerics == numerics) return p;
      }
      return prepared_for.emplace_back(prepare(scenario, numerics));
    };
    for (EngineTally& tally : tallies) {
      if (!tally.failure.empty()) continue;  // one failure per engine is enough
      if (const auto outside = unjudgeable(scenario, tally.declared)) {
        if (tally.skipped++ == 0) tally.skipped_why = *outside;
        continue;
      }
      const Prepared& prepared = prepared_of(tally.declared.numerics);
      if (scenario.model) {
        // Model level: judged on the logits, located to a layer (judge_property).
        const auto started = Clock::now();
        const PropertyOutcome model = judge_property(Property::prefix, scenario, *tally.engine);
        tally.seconds += std::chrono::duration<double>(Clock::now() - started).count();
        ++tally.cases;
        tally.rows += static_cast<long>(prepared.slots.size());
        if (model.pass) continue;
        tally.saved_to = save_failure(options, scenario, *tally.engine, seed, *model.first);
        tally.failure = failure_line(*model.first);
        if (!tally.engine->mutant) {
          std::printf("FAIL %s, case %d (seed %llu), saved to %s\n%s\n", tally.engine->name.c_str(),
                      i + 1, static_cast<unsigned long long>(seed), tally.saved_to.c_str(),
                      model.report.c_str());
        }
        continue;
      }
      const CheckOutcome outcome = judge_engine(scenario, prepared, *tally.engine);
      ++tally.cases;
      tally.rows += outcome.verdict.rows_compared;
      tally.unjudged += outcome.verdict.rows_unjudged;
      tally.seconds += outcome.engine_seconds + outcome.compare_seconds;
      if (outcome.verdict.pass) continue;
      // Written to disk first: whatever happens next, the failing case is kept.
      tally.saved_to = save_failure(options, scenario, *tally.engine, seed, *outcome.verdict.first);
      const std::string report = describe_divergence(*outcome.verdict.first);
      tally.failure = failure_line(*outcome.verdict.first);
      if (!tally.engine->mutant) {
        std::printf("FAIL %s, case %d (seed %llu), saved to %s\n%s\n", tally.engine->name.c_str(),
                    i + 1, static_cast<unsigned long long>(seed), tally.saved_to.c_str(),
                    report.c_str());
      }
    }
    const auto now = Clock::now();
    if (!options.quiet && now - last_progress > std::chrono::seconds(2)) {
      last_progress = now;
      std::fprintf(stderr, "check: %d/%d cases, %.1f s\n", i + 1, options.cases,
                   std::chrono::duration<double>(now - start).count());
    }
  }
  print_table(tallies);
  print_events(events, options.cases);
  for (const EngineTally& t : tallies) {
    if (!verdict_ok(t)) return kExitMismatch;
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
      "1 an honest engine failed or a mutant was not rejected, 2 bad input.");
  cmd->add_option("--engine", options->engines,
                  "Engine name, comma-separated names, 'all' (honest), 'mutants', 'every', "
                  "plugin:PATH[:NAME] or exec:COMMAND")
      ->default_val("all");
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
  cmd->add_flag("--quiet", options->quiet, "No progress lines on stderr");
  add_filter_options(*cmd, options->filters);
  cmd->callback([options, &exit_status] { exit_status = run_check(*options); });
}

}  // namespace kvfuzz::cli
