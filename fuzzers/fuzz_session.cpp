#include "fuzz_session.h"

#include <unistd.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string_view>

#include "corpus/fixture_names.h"
#include "corpus/provenance.h"
#include "fuzz_choices.h"
#include "fuzz_sizes.h"
#include "generate/events.h"
#include "kvfuzz/engine_spec.h"
#include "kvfuzz/fixture_io.h"
#include "kvfuzz/generator.h"
#include "kvfuzz/orchestrate.h"
#include "selftest_engines.h"
#include "sha1.h"
#include "support/atomic_file.h"

// libFuzzer reads these as extra coverage: it clears them before each input and keeps an
// input that sets one to a count class it has not seen yet, even when no code edge is new.
// One counter per event (the count, in libFuzzer's classes) and one per pair of events.
extern "C" {
__attribute__((used, section("__libfuzzer_extra_counters")))
uint8_t kvfuzz_cache_state_counters[kvfuzz::kEventCount + kvfuzz::kEventPairCount];
}

namespace kvfuzz::fuzz {

namespace {

Settings g_settings;

// Inputs that are fixtures are judged only below this attention cost (rows x keys seen x
// q_heads x (head_dim + value_dim), summed over chunks), so that one hostile fixture cannot
// take minutes; the parser's own limits allow much more. Everything the generator makes is
// below it (at most 16 x 256 wide, 160 keys per epoch), so a decoded artifact always
// replays as a fixture.
constexpr int64_t kMaxFixtureCost = int64_t{1} << 31;

struct Totals {
  int64_t inputs = 0;
  EventCounts events;
  std::array<bool, kCacheStateCount> states{};
};
Totals g_totals;
std::chrono::steady_clock::time_point g_last_write;

// The generator's options for the engine under test, as every door makes them
// (kvfuzz/orchestrate.h): its announced operations and supports, the default engine edges.
const GeneratorOptions& generator_options() {
  return g_settings.generator;
}

std::string env(const char* name) {
  const char* value = std::getenv(name);
  return value == nullptr ? std::string() : std::string(value);
}

void write_totals() {
  if (g_settings.events_dir.empty()) return;
  nlohmann::json j;
  j["inputs"] = g_totals.inputs;
  nlohmann::json events = nlohmann::json::object();
  for (int e = 0; e < kEventCount; ++e) {
    events[std::string(event_name(static_cast<Event>(e)))] = g_totals.events.counts[e];
  }
  j["events"] = events;
  std::string states;
  for (bool reached : g_totals.states) states += reached ? '1' : '0';
  j["states"] = states;
  const std::filesystem::path dir(g_settings.events_dir);
  // The PID alone could be reused by a later job before the campaign reads the file.
  static const auto started = std::chrono::system_clock::now().time_since_epoch().count();
  const std::string name =
      "events-" + std::to_string(getpid()) + "-" + std::to_string(started) + ".json";
  try {
    write_file_atomically(dir / name, j.dump() + "\n");
  } catch (const FileWriteError& error) {
    // The campaign then misses this job's counts; say so rather than lose them silently.
    std::fprintf(stderr, "kvfuzz fuzz session: %s\n", error.what());
  }
}

}  // namespace

void initialize(int argc, char** argv) {
  std::string engine = env("KVFUZZ_ENGINE");
  bool merging = false;
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg.starts_with("--engine=")) engine = std::string(arg.substr(9));
    if (arg.starts_with("-artifact_prefix=")) g_settings.artifact_prefix = arg.substr(17);
    // Merges re-run known inputs: their cache states are not new fuzzing work.
    if (arg.starts_with("-merge=") || arg.starts_with("-merge_inner=")) merging = true;
  }
  if (engine.empty()) engine = "contiguous";
  g_settings.engine = find_selftest_engine(engine);
  if (g_settings.engine == nullptr) {
    try {
      g_settings.engine_owner = resolve_engine(engine);
      g_settings.engine = g_settings.engine_owner.get();
    } catch (const EngineSpecError& e) {
      std::fprintf(stderr, "kvfuzz fuzz target (KVFUZZ_ENGINE): %s\n", e.what());
      std::exit(2);
    }
  }
  try {
    g_settings.declared = probe_declarations(*g_settings.engine);
    const NamedDeclarations named{g_settings.engine->name, g_settings.declared};
    g_settings.generator = generator_options_from_declarations({&named, 1});
  } catch (const std::exception& e) {  // EngineError, DeclarationError
    std::fprintf(stderr, "kvfuzz fuzz target (KVFUZZ_ENGINE): %s\n", e.what());
    std::exit(2);
  }
  g_settings.event_counters = env("KVFUZZ_EVENT_COUNTERS") != "0";
  g_settings.bytes_only = env("KVFUZZ_BYTES_ONLY") == "1";
  g_settings.full_size = env("KVFUZZ_FULL_SIZE") == "1";
  g_settings.events_dir = merging ? std::string() : env("KVFUZZ_EVENTS_DIR");
  g_settings.decode_out = env("KVFUZZ_DECODE_OUT");
  std::atexit(write_totals);
}

const Settings& settings() {
  return g_settings;
}

std::optional<Scenario> decode_input(const uint8_t* data, size_t size) {
  if (size > 0 && data[0] == '{') {
    try {
      Scenario s =
          parse_fixture(std::string_view(reinterpret_cast<const char*>(data), size), "fuzz input");
      if (attention_cost(s) > kMaxFixtureCost) return std::nullopt;
      // Outside the engine's declarations (an operation it lacks, a dtype outside its
      // supports, an attention fixture for a whole-model engine): says nothing about it.
      if (unjudgeable(s, g_settings.declared)) return std::nullopt;
      return s;
    } catch (const FixtureError&) {
      return std::nullopt;
    }
  }
  FuzzedChoiceSource choices(data, size, g_settings.bytes_only);
  const GeneratorOptions& options = generator_options();
  return generate_scenario(choices,
                           g_settings.full_size ? options : input_sized_options(options, size));
}

void record_cache_states(const Scenario& scenario) {
  const EventCounts counts = count_events(scenario, generator_options().edges);
  ++g_totals.inputs;
  g_totals.events += counts;
  for (int state : cache_states(counts)) g_totals.states[static_cast<size_t>(state)] = true;
  if (g_settings.event_counters) {
    for (int e = 0; e < kEventCount; ++e) {
      kvfuzz_cache_state_counters[e] =
          static_cast<uint8_t>(std::min<int64_t>(counts.counts[e], 255));
    }
    int pair = kEventCount;
    for (int a = 0; a < kEventCount; ++a) {
      for (int b = a + 1; b < kEventCount; ++b, ++pair) {
        kvfuzz_cache_state_counters[pair] = counts.counts[a] > 0 && counts.counts[b] > 0;
      }
    }
  }
  const auto now = std::chrono::steady_clock::now();
  if (!g_settings.events_dir.empty() && now - g_last_write > std::chrono::seconds(2)) {
    g_last_write = now;
    write_totals();
  }
}

bool decode_only(const Scenario& scenario) {
  if (g_settings.decode_out.empty()) return false;
  save_fixture(scenario, g_settings.decode_out);
  return true;
}

void report_failure(const uint8_t* data, size_t size, Scenario scenario, Property property,
                    const PropertyOutcome& outcome) {
  scenario.name = fuzz_fixture_stem(sha1_hex(data, size));
  stamp_failure(scenario, "fuzz", g_settings.engine->name, property, failure_line(outcome));
  const std::string path = g_settings.artifact_prefix + scenario.name + ".json";
  try {
    save_fixture(scenario, path);
    std::fprintf(stderr, "kvfuzz: %s fails %s; fixture written to %s\n",
                 g_settings.engine->name.c_str(),
                 outcome.signature ? to_string(*outcome.signature).c_str() : "?", path.c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kvfuzz: could not write the fixture %s: %s\n", path.c_str(), e.what());
  }
  std::fprintf(stderr, "%s\n", outcome.report.c_str());
  write_totals();
  std::abort();
}

}  // namespace kvfuzz::fuzz
