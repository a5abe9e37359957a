// Fixture file names (corpus/fixture_names.h).
#include "corpus/fixture_names.h"

#include <cstdint>
#include <cstdio>

#include "kvfuzz/fixture_io.h"
#include "support/hash.h"

namespace kvfuzz {

std::string file_safe_name(std::string_view name) {
  // Runs of anything else, '-' included, become one '-'. A plugin or exec spec is told
  // apart by its kind and what follows its last '/' (the library and engine name, the
  // script); directories only make names long.
  std::string out;
  for (const std::string_view kind : {std::string_view("plugin:"), std::string_view("exec:")}) {
    if (name.starts_with(kind)) {
      out = std::string(kind.substr(0, kind.size() - 1)) + "-";
      name.remove_prefix(kind.size());
      const size_t slash = name.rfind('/');
      if (slash != std::string_view::npos) name.remove_prefix(slash + 1);
    }
  }
  for (const char c : name) {
    const bool safe = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                      c == '.' || c == '_';
    if (safe) {
      out += c;
    } else if (!out.empty() && out.back() != '-') {
      out += '-';
    }
  }
  while (!out.empty() && (out.back() == '-' || out.back() == '.')) out.pop_back();
  constexpr size_t kMost = 60;
  if (out.size() > kMost) out = out.substr(out.size() - kMost);
  while (!out.empty() && (out.front() == '-' || out.front() == '.')) out.erase(0, 1);
  return out.empty() ? "engine" : out;
}

std::string scenario_hash(Scenario scenario) {
  scenario.name.assign(1, 'x');  // not = "x": g++ 12 -O3 -Wrestrict false positive (GCC PR 105329)
  scenario.note.clear();
  scenario.provenance = Provenance{};
  const uint64_t hash = fnv1a(write_fixture(scenario));
  char text[17];
  std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(hash));
  return std::string(text, 8);
}

std::string failure_fixture_prefix(std::string_view engine, Property property, FailureKind kind) {
  std::string kind_name(failure_kind_name(kind));
  for (char& c : kind_name) c = c == '_' ? '-' : c;
  return file_safe_name(engine) + "-" + std::string(property_name(property)) + "-" + kind_name +
         "-";
}

std::string failure_fixture_stem(std::string_view engine, Property property, FailureKind kind,
                                 const Scenario& scenario) {
  return failure_fixture_prefix(engine, property, kind) + scenario_hash(scenario);
}

std::string check_fixture_stem(std::string_view engine, uint64_t seed) {
  return "check-" + file_safe_name(engine) + "-" + std::to_string(seed);
}

std::string suite_fixture_stem(Property property, std::string_view engine) {
  return "prop-" + std::string(property_name(property)) + "-" + std::string(engine);
}

std::string fuzz_fixture_stem(std::string_view sha1) {
  return "crash-" + std::string(sha1);
}

std::string decoded_fixture_stem(std::string_view target, std::string_view artifact) {
  return std::string(target) + "-" + std::string(artifact);
}

std::string crash_fixture_prefix(std::string_view engine, std::string_view kind,
                                 std::string_view target) {
  return file_safe_name(engine) + "-" + std::string(kind) + "-" + std::string(target) + "-";
}

std::string crash_fixture_stem(std::string_view engine, std::string_view kind,
                               std::string_view target, std::string_view artifact) {
  const size_t dash = artifact.rfind('-');
  return crash_fixture_prefix(engine, kind, target) + std::string(artifact.substr(dash + 1, 8));
}

}  // namespace kvfuzz
