// kvfuzz list: the built-in engines and mutants; with --engine SPEC, what each engine
// declares (capabilities, numerics, supports, bitwise claims), asked of the engine itself,
// so a user sees how kvfuzz will judge their plugin or exec engine before a run.
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cli_support.h"
#include "commands.h"
#include "kvfuzz/dtype.h"
#include "kvfuzz/engine.h"

namespace kvfuzz::cli {

namespace {

struct ListOptions {
  std::string engines;
};

std::string yes_no(bool value) {
  return value ? "yes" : "no";
}

std::string said(const std::optional<bool>& value) {
  return value ? yes_no(*value) : "not said";
}

// "at most 256 tokens", or "any" for 0 (no limit beyond kvfuzz's own).
std::string limit(int value, const std::string& unit = "") {
  return value == 0 ? "any" : "at most " + std::to_string(value) + unit;
}

std::string numerics_text(const EngineNumerics& n) {
  return "output " + std::string(dtype_name(n.output)) + ", P " +
         (n.p ? "rounded to " + std::string(dtype_name(*n.p)) : std::string("not rounded")) +
         ", score sums " + std::string(dtype_name(n.score_accumulation)) + ", value sums " +
         std::string(dtype_name(n.value_accumulation)) + "; with RoPE: rotated keys in storage " +
         said(n.rotated_keys_in_storage) + ", rotated queries in storage " +
         said(n.rotated_queries_in_storage) + ", angles in double " + said(n.rope_angles_exact);
}

std::string supports_text(const EngineSupports& s) {
  std::string dtypes;
  for (const DType dtype : s.dtypes) {
    dtypes += (dtypes.empty() ? "" : ", ") + std::string(dtype_name(dtype));
  }
  std::string head_dim = limit(s.max_head_dim);
  if (s.head_dim_multiple > 1) {
    head_dim = "a multiple of " + std::to_string(s.head_dim_multiple) +
               (s.max_head_dim == 0 ? "" : ", " + head_dim);
  }
  return "storage " + (dtypes.empty() ? std::string("none") : dtypes) + "; head_dim " + head_dim +
         (s.value_dim_is_head_dim ? " (value_dim = head_dim)" : "") + "; q heads " +
         limit(s.max_q_heads) + "; context " + limit(s.max_context, " tokens") +
         (s.rope_required ? "; RoPE only" : "") + (s.windows ? "" : "; no windows");
}

std::string bitwise_text(const BitwiseClaims& b) {
  std::string claims;
  for (const auto& [claimed, name] :
       {std::pair{b.batch, "batch"}, std::pair{b.schedule, "schedule"},
        std::pair{b.layout, "layout"}, std::pair{b.poison, "poison"}}) {
    if (claimed) claims += (claims.empty() ? "" : ", ") + std::string(name);
  }
  return claims.empty() ? "none (every property judged within its tolerance)" : claims;
}

void print_declarations(const EngineInfo& engine) {
  EngineDeclarations declared;
  try {
    declared = probe_declarations(engine);
  } catch (const EngineError& e) {
    throw UsageError("--engine: " + std::string(e.what()));
  }
  std::printf("engine        %s (%s)\n", engine.name.c_str(), engine.mutant ? "mutant" : "honest");
  if (!engine.description.empty()) std::printf("description   %s\n", engine.description.c_str());
  if (declared.whole_model) {
    std::printf(
        "runs          whole models (vocabulary ids in, logits out): model scenarios only\n");
  }
  std::printf("capabilities  truncate %s, fork %s\n",
              yes_no(declared.capabilities.truncate).c_str(),
              yes_no(declared.capabilities.fork).c_str());
  std::printf("numerics      %s\n", numerics_text(declared.numerics).c_str());
  std::printf("supports      %s\n", supports_text(declared.supports).c_str());
  std::printf("bitwise       %s\n", bitwise_text(declared.bitwise).c_str());
}

void print_registry() {
  std::printf("%-24s %-7s %s\n", "engine", "kind", "description");
  for (const EngineInfo& info : engine_registry()) {
    std::printf("%-24s %-7s %s\n", info.name.c_str(), info.mutant ? "mutant" : "honest",
                info.description.c_str());
  }
  std::printf(
      "\nwhole-model engines (vocabulary ids in, logits out: model scenarios only; named "
      "on their own, never by all, mutants or every):\n");
  for (const EngineInfo& info : model_engine_registry()) {
    std::printf("%-24s %-7s %s\n", info.name.c_str(), info.mutant ? "mutant" : "honest",
                info.description.c_str());
  }
  std::printf("\nkvfuzz list --engine SPEC shows what an engine declares (yours too).\n");
}

}  // namespace

void add_list_command(CLI::App& app, int& /*exit_status*/) {
  auto options = std::make_shared<ListOptions>();
  CLI::App* cmd = app.add_subcommand(
      "list",
      "Name the built-in engines and mutants; with --engine, what each engine declares:\n"
      "capabilities, numerics, supports and bitwise claims (docs/writing-an-engine.md).");
  const CLI::Option* engine = cmd->add_option("--engine", options->engines, kEnginesHelp);
  cmd->callback([options, engine] {
    if (engine->count() == 0) return print_registry();
    const auto engines = select_engines(options->engines);
    for (size_t i = 0; i < engines.size(); ++i) {
      if (i > 0) std::printf("\n");
      print_declarations(*engines[i]);
    }
  });
}

}  // namespace kvfuzz::cli
