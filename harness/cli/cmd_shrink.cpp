// kvfuzz shrink FIXTURE --engine NAME: reduces a failing fixture to a local minimum that
// fails the same way, and saves it canonically with its provenance.
//
// Order of work, so that nothing is lost: the raw failing fixture is written to RAW/
// (default_raw_dir: under DIR, never inside a corpus) before shrinking starts (an
// interrupted shrink or a crashing engine keeps it), then the shrinker runs under the time
// budget, then the result is written to DIR/ (default kvfuzz-out/shrunk: nothing goes into
// the working directory's corpus/ unless asked).
// Exit status: 0 the fixture passes (nothing to shrink), 1 a failure was shrunk and saved,
// 2 bad input.
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>

#include "cli_support.h"
#include "commands.h"
#include "corpus/fixture_names.h"
#include "corpus/provenance.h"
#include "isolation_flags.h"
#include "judge/report.h"
#include "kvfuzz/engine_spec.h"
#include "kvfuzz/fixture_io.h"
#include "kvfuzz/judge.h"
#include "kvfuzz/orchestrate.h"
#include "kvfuzz/property.h"
#include "kvfuzz/shrink.h"
#include "support/isolated_call.h"
#include "support/text.h"

namespace kvfuzz::cli {

namespace {

struct ShrinkCommandOptions {
  std::string path;
  std::string engine;
  std::string property = "prefix";
  double seconds = 60;
  int max_candidates = 0;  // 0: no limit
  std::string out = "kvfuzz-out/shrunk";
  std::string raw;  // empty: default_raw_dir(out)
  bool quiet = false;
  IsolationFlags isolation;  // --timeout (per judgement), --no-fork
};

// Where the raw fixture goes unless --raw says: OUT/raw, beside the result it was shrunk
// to. Not when OUT lies inside a corpus (a folder named corpus on its path, as
// corpus/regressions when filing a regression): every fixture below corpus/ is a test,
// and an unshrunk one must not become one, so there kvfuzz-out/raw, as before.
std::filesystem::path default_raw_dir(const std::filesystem::path& out) {
  for (const std::filesystem::path& part : std::filesystem::absolute(out).lexically_normal()) {
    if (part == "corpus") return std::filesystem::path("kvfuzz-out") / "raw";
  }
  return out / "raw";
}

// Rows at most this many: the final report lists every row (kvfuzz explain's lines).
constexpr size_t kExplainRows = 24;

struct Size {
  int ops = 0;
  int tokens = 0;
};

Size size_of(const Scenario& s) {
  return Size{static_cast<int>(s.program.size()), program_tokens(s)};
}

std::string size_text(Size size) {
  return std::to_string(size.ops) + (size.ops == 1 ? " op" : " ops") + ", " +
         std::to_string(size.tokens) + (size.tokens == 1 ? " token" : " tokens");
}

// What the shrink did to the fixture's size, as a phrase after "fails SIGNATURE: ". A size
// "from X to X" would read as a shrink that did nothing visible, so those cases say so.
std::string outcome_text(Size before, Size after, const ShrinkResult& result) {
  if (result.kept_input) {
    return "kept at " + size_text(before) + ": every smaller fixture found was longer as text";
  }
  if (result.accepted == 0) {
    return result.timed_out || result.out_of_candidates
               ? "no smaller fixture than " + size_text(before) + " found before the " +
                     (result.timed_out ? "time" : "candidate") + " budget ran out"
               : "already minimal for the moves at " + size_text(before) +
                     ": no candidate fails the same way";
  }
  if (before.ops == after.ops && before.tokens == after.tokens) {
    return "simplified at " + size_text(after) + " (layout or values; no op or token dropped)";
  }
  return "shrunk from " + size_text(before) + " to " + size_text(after);
}

// The per-move table: the moves that had a candidate reach judgement, in the order the
// search tries them, and the totals.
void print_move_counts(const ShrinkResult& result) {
  std::printf("candidates by move (seen: not judged again, equal to one rejected before):\n");
  std::printf("  %-24s %7s %9s %6s\n", "move", "tried", "accepted", "seen");
  for (const MoveCounts& row : result.moves) {
    if (row.tried + row.skipped_seen == 0) continue;
    std::printf("  %-24s %7d %9d %6d\n", row.move.c_str(), row.tried, row.accepted,
                row.skipped_seen);
  }
  std::printf("  %-24s %7d %9d %6d\n", "all moves", result.tried, result.accepted,
              result.skipped_seen);
}

// A fixture that crashes (or hangs) the engine: shrunk keeping that end, each candidate in a
// child that must end the same way (shrink_with), then saved as
// ENGINE-SIGNATURE-HASH.json. The raw fixture is saved first.
int shrink_crash(const ShrinkCommandOptions& options, const EngineInfo& engine, Property property,
                 const Scenario& input, const Isolation& isolation, const std::string& signature,
                 const std::string& line) {
  const std::filesystem::path out(options.out);
  const std::string stem =
      file_safe_name(engine.name) + "-" + file_safe_name(signature) + "-" + scenario_hash(input);
  Scenario raw = input;
  raw.name = stem;
  stamp_failure(raw, "shrink", engine.name, property, line);
  const std::filesystem::path raw_dir =
      options.raw.empty() ? default_raw_dir(out) : std::filesystem::path(options.raw);
  const std::filesystem::path raw_path = raw_dir / (raw.name + ".json");
  save_fixture(raw, raw_path);
  std::fprintf(stderr, "shrink: saved the raw failing fixture to %s\n", raw_path.string().c_str());
  ShrinkOptions shrink_options;
  shrink_options.time_budget_seconds = options.seconds;
  shrink_options.max_candidates = options.max_candidates;
  const auto start = std::chrono::steady_clock::now();
  const std::optional<ShrinkResult> result = shrink_with(
      input,
      [&](const Scenario& candidate) {
        std::string ended;
        judge_property(property, candidate, engine, isolation, &ended);
        return ended == signature;
      },
      shrink_options);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (!result) {
    throw UsageError(options.path + ": the fixture ended the engine (" + signature +
                     ") once and then did not on " + engine.name +
                     "; the engine is not deterministic (raw fixture kept at " + raw_path.string() +
                     ")");
  }
  Scenario shrunk = result->scenario;
  shrunk.name =
      file_safe_name(engine.name) + "-" + file_safe_name(signature) + "-" + scenario_hash(shrunk);
  const std::string what_shrank = outcome_text(size_of(input), size_of(shrunk), *result);
  char timing[192];
  std::snprintf(timing, sizeof timing, "%d of %d candidates accepted in %.1f s%s", result->accepted,
                result->candidates(), seconds, stop_phrase(*result).c_str());
  shrunk.note = "By kvfuzz shrink: " + what_shrank + " (" + timing + "). Ends " + engine.name +
                " with " + signature + " while " + std::string(property_name(property)) +
                " is judged.";
  stamp_failure(shrunk, "shrink", engine.name, property, line);
  const std::filesystem::path path = out / (shrunk.name + ".json");
  save_fixture(shrunk, path);
  std::printf("%s fails %s: %s (%s)\n", engine.name.c_str(), signature.c_str(), what_shrank.c_str(),
              timing);
  std::printf("saved to %s (raw fixture: %s)\n", path.string().c_str(), raw_path.string().c_str());
  std::printf("%s\n", line.c_str());
  return kExitMismatch;
}

int run_shrink(const ShrinkCommandOptions& options) {
  const std::shared_ptr<const EngineInfo> engine = select_engine(options.engine);
  const Property property = select_property(options.property);
  const Scenario input = load_fixture(options.path);
  const Isolation isolation = options.isolation.isolation();
  // An operation the engine does not announce is refused by the runner: that refusal is
  // not a bug of the engine, and shrinking it would file a false finding.
  const EngineDeclarations declared = declarations_of(*engine, options.isolation);
  if (const auto why = unjudgeable(input, declared)) {
    throw UsageError(options.path + ": for " + engine->name + ", the fixture " + *why +
                     "; expected a fixture it can run");
  }
  // Every judgement in a child (Isolation): a candidate that crashes or hangs the engine is
  // another failure than the one kept, and the shrink goes on.
  std::string ended;
  const PropertyOutcome outcome = judge_property(property, input, *engine, isolation, &ended);
  if (!ended.empty()) {
    return shrink_crash(options, *engine, property, input, isolation, ended,
                        first_line(outcome.report));
  }
  if (outcome.pass) {
    std::printf("nothing to shrink: the fixture passes %s on %s\n",
                std::string(property_name(property)).c_str(), engine->name.c_str());
    return kExitPass;
  }
  const FailureKind kind = outcome.signature ? outcome.signature->kind : FailureKind::mismatch;
  const std::filesystem::path out(options.out);

  // The raw failing fixture first: whatever happens next, the failure is kept.
  Scenario raw = input;
  raw.name = failure_fixture_stem(engine->name, property, kind, input);
  stamp_failure(raw, "shrink", engine->name, property, failure_line(outcome));
  const std::filesystem::path raw_dir =
      options.raw.empty() ? default_raw_dir(out) : std::filesystem::path(options.raw);
  const std::filesystem::path raw_path = raw_dir / (raw.name + ".json");
  save_fixture(raw, raw_path);
  std::fprintf(stderr, "shrink: saved the raw failing fixture to %s\n", raw_path.string().c_str());

  using Clock = std::chrono::steady_clock;
  auto last_line = Clock::now() - std::chrono::seconds(1);
  ShrinkOptions shrink_options;
  shrink_options.property = property;
  shrink_options.time_budget_seconds = options.seconds;
  shrink_options.max_candidates = options.max_candidates;
  shrink_options.judge = [&](Property p, const Scenario& candidate) {
    return judge_property(p, candidate, *engine, isolation);
  };
  shrink_options.declared = declared;
  shrink_options.on_progress = [&](const ShrinkProgress& p) {
    const auto now = Clock::now();
    if (options.quiet || now - last_line < std::chrono::milliseconds(500)) return;
    last_line = now;
    std::fprintf(stderr, "shrink: %d accepted, %d tried, %d seen, %.1f s, now %s (%.*s)\n",
                 p.accepted, p.tried, p.skipped_seen, p.seconds,
                 size_text(size_of(*p.best)).c_str(), static_cast<int>(p.move.size()),
                 p.move.data());
  };
  const auto start = Clock::now();
  std::optional<ShrinkResult> result = shrink(input, *engine, shrink_options);
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  if (!result) {
    // The engine judged the same fixture differently a moment ago: not deterministic.
    throw UsageError(options.path + ": the fixture failed once and then passed on " + engine->name +
                     "; the engine is not deterministic (raw fixture kept at " + raw_path.string() +
                     ")");
  }

  const Size before = size_of(input);
  const Size after = size_of(result->scenario);
  Scenario shrunk = result->scenario;
  const std::string failure = failure_line(result->outcome);
  shrunk.name = failure_fixture_stem(engine->name, property, result->signature.kind, shrunk);
  char timing[192];
  std::snprintf(timing, sizeof timing, "%d of %d candidates accepted in %.1f s%s", result->accepted,
                result->candidates(), seconds, stop_phrase(*result).c_str());
  const std::string what_shrank = outcome_text(before, after, *result);
  const bool smaller = before.ops != after.ops || before.tokens != after.tokens;
  shrunk.note =
      (smaller ? "Shrunk by kvfuzz shrink from " + size_text(before) + " to " + size_text(after)
               : "By kvfuzz shrink: " + what_shrank) +
      " (" + timing + "). Fails " + to_string(result->signature) + " on " + engine->name + ": " +
      failure;
  stamp_failure(shrunk, "shrink", engine->name, property, failure);
  const std::filesystem::path path = out / (shrunk.name + ".json");
  save_fixture(shrunk, path);

  std::printf("%s fails %s: %s (%s)\n", engine->name.c_str(), to_string(result->signature).c_str(),
              what_shrank.c_str(), timing);
  std::printf("saved to %s (raw fixture: %s)\n", path.string().c_str(), raw_path.string().c_str());
  std::printf("%s", result->outcome.report.c_str());
  if (!result->outcome.report.empty() && result->outcome.report.back() != '\n') std::printf("\n");
  const Prepared prepared = prepare(shrunk);
  // Attention rows only: a model scenario's report above already names the logits row and
  // the layer (its rows are logits, not one attention's output).
  if (!shrunk.model && prepared.slots.size() <= kExplainRows) {
    const auto rows = [&] {
      return explain_rows(shrunk, prepared, judge_engine(shrunk, prepared, *engine));
    };
    const IsolatedAnswer answer = forks_for(*engine, isolation)
                                      ? call_isolated(rows, isolation.timeout)
                                      : IsolatedAnswer{rows(), std::nullopt};
    if (answer.answer) {
      std::printf("rows of %s against the reference:\n%s", engine->name.c_str(),
                  answer.answer->c_str());
    }
  }
  print_move_counts(*result);
  return kExitMismatch;
}

}  // namespace

void add_shrink_command(CLI::App& app, int& exit_status) {
  auto options = std::make_shared<ShrinkCommandOptions>();
  CLI::App* cmd = app.add_subcommand(
      "shrink",
      "Reduce a failing fixture to a small one that fails the same way (same property, same\n"
      "kind of divergence). The raw fixture is saved to RAW/ before shrinking starts; the\n"
      "result goes to DIR/ENGINE-PROPERTY-KIND-HASH.json with its provenance (DIR defaults to\n"
      "kvfuzz-out/shrunk; --out corpus/regressions files it as a regression test). Progress on\n"
      "stderr. A fixture that crashes or hangs the engine is shrunk keeping that end. Each\n"
      "judgement runs in a forked child. Exit status: 0 the fixture passes (nothing to shrink),\n"
      "1 a failure was shrunk and saved, 2 bad input, 3 the engine crashed while it was made.");
  cmd->add_option("fixture", options->path, "Failing fixture file")->required();
  cmd->add_option(
         "--engine", options->engine,
         "The engine it fails on: a name (see kvfuzz list), plugin:PATH[:NAME] or exec:COMMAND")
      ->required();
  cmd->add_option("--property", options->property, property_list(" or "))->default_val("prefix");
  cmd->add_option("--time", options->seconds,
                  "Time budget in seconds; when it runs out, the smallest fixture so far is saved")
      ->default_val(60)
      ->check(CLI::Range(0.0, 1e9));
  cmd->add_option("--max-candidates", options->max_candidates,
                  "Candidate budget: at most N candidates judged (0: no limit); the same result "
                  "on every machine, where --time depends on the machine's speed")
      ->default_val(0)
      ->check(CLI::Range(0, 1 << 30));
  cmd->add_option("--out", options->out,
                  "Directory for the shrunk result (corpus/regressions to file it in the corpus)")
      ->default_val("kvfuzz-out/shrunk");
  cmd->add_option("--raw", options->raw,
                  "Directory for the raw failing fixture, written before shrinking starts "
                  "(default: OUT/raw; kvfuzz-out/raw when OUT is inside a corpus/ folder, so "
                  "that an unshrunk fixture never becomes a corpus test)");
  cmd->add_flag("--quiet", options->quiet, "No progress lines on stderr");
  add_isolation_options(*cmd, options->isolation,
                        "Seconds one judgement (the fixture, or one candidate) may take before "
                        "its child is killed; a candidate that hangs is another failure",
                        "Judge in this process, not in forked children: no crash isolation and "
                        "no --timeout, but a debugger sees the engine");
  cmd->callback([options, &exit_status] { exit_status = run_shrink(*options); });
}

}  // namespace kvfuzz::cli
