// kvfuzz explain FIXTURE: every row with its visible keys, expected and got, per engine.
#include <cstdio>
#include <memory>
#include <optional>
#include <string>

#include "cli_support.h"
#include "commands.h"
#include "judge/report.h"
#include "kvfuzz/fixture_io.h"
#include "kvfuzz/judge.h"
#include "model/model_check.h"

namespace kvfuzz::cli {

namespace {

struct ExplainOptions {
  std::string path;
  std::string engines = "all";
};

std::string describe_layout(const Layout& l) {
  std::string text = std::to_string(l.q_heads) + " q heads over " + std::to_string(l.kv_heads) +
                     " kv heads, head_dim " + std::to_string(l.head_dim) + ", value_dim " +
                     std::to_string(l.value_dim) + ", page " + std::to_string(l.page_size) + ", " +
                     std::string(dtype_name(l.dtype));
  if (l.rope_theta) text += ", RoPE theta " + std::to_string(*l.rope_theta);
  if (l.window) text += ", window " + std::to_string(*l.window);
  return text;
}

int run_explain(const ExplainOptions& options) {
  const auto engines = select_engines(options.engines);
  const Scenario scenario = load_fixture(options.path);
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
  int status = kExitPass;
  if (auto problem = judge_expect(scenario, prepared)) {
    std::printf("expect rows: DISAGREE with the reference: %s\n", problem->c_str());
    status = kExitMismatch;
  } else if (!scenario.expect.empty()) {
    std::printf("expect rows: %zu hand-derived rows agree with the reference\n",
                scenario.expect.size());
  }
  for (const std::shared_ptr<const EngineInfo>& engine : engines) {
    std::optional<std::string> missing;
    try {
      missing = unjudgeable(scenario, probe_declarations(*engine));
    } catch (const EngineError& e) {
      throw UsageError(std::string("--engine: ") + e.what());
    }
    if (missing) {
      std::printf("\nengine %s: skipped: the fixture %s\n", engine->name.c_str(), missing->c_str());
      continue;
    }
    if (scenario.model) {
      // Model level: the logits verdict, the first diverging logits row (top-5 on both
      // sides) and the first layer that went wrong, with its row and head.
      const ModelVerdict verdict = judge_model(scenario, *engine);
      std::printf("\nengine %s (%s): %s (model level: %zu logits rows)\n", engine->name.c_str(),
                  engine->mutant ? "mutant" : "honest", verdict.pass ? "pass" : "FAIL",
                  prepared.slots.size());
      if (!verdict.pass || verdict.first_layer) {
        std::printf("%s\n", describe_model_divergence(verdict).c_str());
      }
      if (!verdict.pass) status = kExitMismatch;
      continue;
    }
    // The rows and bounds for the engine's declared numerics.
    const EngineNumerics numerics = probe_declarations(*engine).numerics;
    const Prepared own = numerics == prepared.numerics ? prepared : prepare(scenario, numerics);
    const CheckOutcome outcome = judge_engine(scenario, own, *engine);
    std::printf("\nengine %s (%s): %s\n", engine->name.c_str(),
                engine->mutant ? "mutant" : "honest", outcome.verdict.pass ? "pass" : "FAIL");
    std::printf("%s", explain_rows(scenario, own, outcome).c_str());
    if (!outcome.verdict.pass) {
      std::printf("%s\n", describe_divergence(*outcome.verdict.first).c_str());
      status = kExitMismatch;
    }
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
  cmd->callback([options, &exit_status] { exit_status = run_explain(*options); });
}

}  // namespace kvfuzz::cli
