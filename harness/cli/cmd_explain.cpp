// kvfuzz explain FIXTURE: every row with its visible keys, expected and got, per engine;
// each engine's part computed in a forked child (isolation_flags.h), so that an engine that
// crashes or hangs is one FAIL line and the other engines are still explained. With
// --property (by default the property the fixture records it fails), an invariance is
// judged instead and its first diverging row named with both runs' values.
#include <cstdio>
#include <memory>
#include <optional>
#include <string>

#include "cli_support.h"
#include "commands.h"
#include "corpus/provenance.h"
#include "isolation_flags.h"
#include "kvfuzz/fixture_io.h"
#include "kvfuzz/judge.h"
#include "kvfuzz/kv_format.h"
#include "kvfuzz/orchestrate.h"
#include "kvfuzz/property.h"
#include "support/isolated_call.h"

namespace kvfuzz::cli {

namespace {

struct ExplainOptions {
  std::string path;
  std::string engines = "all";
  std::string property;      // empty: the fixture's recorded property (prefix when none)
  IsolationFlags isolation;  // --timeout (per engine), --no-fork
};

std::string describe_layout(const Layout& l) {
  std::string text = std::to_string(l.q_heads) + " q heads over " + std::to_string(l.kv_heads) +
                     " kv heads, head_dim " + std::to_string(l.head_dim) + ", value_dim " +
                     std::to_string(l.value_dim) + ", page " + std::to_string(l.page_size) + ", " +
                     std::string(dtype_name(l.dtype));
  if (l.rope_theta) {
    text += ", RoPE theta " + std::to_string(*l.rope_theta);
    if (l.rope_style != RopeStyle::half_split) {
      text += " in " + std::string(rope_style_name(l.rope_style)) + " pairs";
    }
    if (l.rope_dims) text += " on the last " + std::to_string(*l.rope_dims) + " elements";
  }
  if (l.window) text += ", window " + std::to_string(*l.window);
  // The features and formats that change what a row is (docs/fixture-format.md).
  if (l.softcap) text += ", soft cap " + std::to_string(*l.softcap);
  if (!l.sinks.empty()) text += ", sinks";
  if (!l.alibi.empty()) text += ", ALiBi";
  if (l.chunked_local) text += ", chunked local " + std::to_string(*l.chunked_local);
  if (l.k_format.quantized()) text += ", K " + std::string(kv_quant_name(l.k_format.quant));
  if (l.v_format.quantized()) text += ", V " + std::string(kv_quant_name(l.v_format.quant));
  if (l.value_from_key) text += ", value read from its key (MLA)";
  return text;
}

int run_explain(const ExplainOptions& options) {
  const auto engines = select_engines(options.engines);
  // A bad --property is bad input before the fixture is read; none: the fixture's own.
  const bool asked = !options.property.empty();
  const Property chosen = asked ? select_property(options.property) : Property::prefix;
  const Scenario scenario = load_fixture(options.path);
  const Property property = asked ? chosen : recorded_property(scenario);
  const Prepared prepared = prepare(scenario);
  std::printf("%s: %s\n", options.path.c_str(), scenario.name.c_str());
  std::printf("layout: %s\n", describe_layout(scenario.layout).c_str());
  if (const auto& m = scenario.model) {
    std::printf(
        "model: vocab %d, width %d, %d layer%s, ffn %d, seed %llu (each layer's attention "
        "has the layout above)\n",
        m->vocab, m->width, m->layers, m->layers == 1 ? "" : "s", m->ffn,
        static_cast<unsigned long long>(m->seed));
  }
  if (!scenario.note.empty()) std::printf("note: %s\n", scenario.note.c_str());
  if (property != Property::prefix) {
    std::printf("property: %s (%s)\n", std::string(property_name(property)).c_str(),
                asked ? "--property" : "the one the fixture records it fails");
  }
  int status = kExitPass;
  if (auto problem = judge_expect(scenario, prepared)) {
    std::printf("expect rows: DISAGREE with the reference: %s\n", problem->c_str());
    status = kExitMismatch;
  } else if (!scenario.expect.empty()) {
    std::printf("expect rows: %zu hand-derived rows agree with the reference\n",
                scenario.expect.size());
  }
  const Isolation isolation = options.isolation.isolation();
  for (const std::shared_ptr<const EngineInfo>& engine : engines) {
    const EngineDeclarations declared = declarations_of(*engine, options.isolation);
    if (const auto missing = unjudgeable(scenario, declared)) {
      std::printf("\nengine %s: skipped: the fixture %s\n", engine->name.c_str(), missing->c_str());
      continue;
    }
    // In a child (Isolation): the text, after a first character saying whether it passed.
    const auto explained = [&] {
      const EngineExplanation e =
          explain_engine(scenario, prepared, *engine, declared.numerics, property);
      return std::string(e.pass ? "P" : "F") + "\n" + e.text;
    };
    std::string text;
    if (forks_for(*engine, isolation)) {
      const IsolatedAnswer answer = call_isolated(explained, isolation.timeout);
      if (!answer.answer) {
        std::printf("\nengine %s (%s): FAIL: %s: %s\n", engine->name.c_str(),
                    engine->mutant ? "mutant" : "honest", answer.ended->signature.c_str(),
                    describe_end(*answer.ended, "it ran the fixture").c_str());
        status = kExitMismatch;
        continue;
      }
      text = *answer.answer;
    } else {
      text = explained();
    }
    if (text.front() == 'F') status = kExitMismatch;
    std::printf("%s", text.c_str() + 1);
  }
  return status;
}

}  // namespace

void add_explain_command(CLI::App& app, int& exit_status) {
  auto options = std::make_shared<ExplainOptions>();
  CLI::App* cmd = app.add_subcommand(
      "explain",
      "Print every row of a fixture: sequence, epoch, position, visible keys, expected and got.");
  cmd->add_option("fixture", options->path, "Fixture file")->required();
  cmd->add_option("--engine", options->engines, kEnginesHelp)->default_val("all");
  cmd->add_option("--property", options->property,
                  "The property to judge: " + property_list(" or ") +
                      " (default: the one the fixture's provenance records, else prefix, "
                      "which prints every row)");
  add_isolation_options(*cmd, options->isolation,
                        "Seconds one engine may take on the fixture before its child is killed "
                        "and the engine's part says it hung",
                        "Run engines in this process, not in a forked child: no crash isolation "
                        "and no --timeout, but a debugger sees the engine");
  cmd->callback([options, &exit_status] { exit_status = run_explain(*options); });
}

}  // namespace kvfuzz::cli
