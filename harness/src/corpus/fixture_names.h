// How kvfuzz names the fixtures it writes, in one place, so that `kvfuzz check`, `kvfuzz
// shrink`, the campaign, the CMake package's GoogleTest tests, the fuzz targets and the
// property suites give the same case the same name. A shrunk failure is
// ENGINE-PROPERTY-KIND-HASH.json; the functions below return names without ".json".
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "judge/compare.h"
#include "kvfuzz/property.h"
#include "kvfuzz/scenario.h"

namespace kvfuzz {

// Engine names turned into file-name material: [A-Za-z0-9._], runs of anything else ('-'
// included) become one '-', at most 60 characters (the end kept). A plugin or exec spec
// keeps its kind and what follows its last '/': "plugin:/x/libe.so:bug" ->
// "plugin-libe.so-bug", "exec:python3 engines/mine.py" -> "exec-mine.py".
std::string file_safe_name(std::string_view name);

// 8 hex digits of FNV-1a over the canonical text of what the scenario tests (name, note
// and provenance left out): the same case always gets the same hash.
std::string scenario_hash(Scenario scenario);

// ENGINE-PROPERTY-KIND-HASH, e.g. "mask-origin-prefix-mismatch-f3cc6398".
std::string failure_fixture_stem(std::string_view engine, Property property, FailureKind kind,
                                 const Scenario& scenario);

// ENGINE-PROPERTY-KIND-, what every failure_fixture_stem of that signature begins with
// (the campaign files a signature once).
std::string failure_fixture_prefix(std::string_view engine, Property property, FailureKind kind);

// check-ENGINE-SEED: a case `kvfuzz check` generated from `seed` and saw fail.
std::string check_fixture_stem(std::string_view engine, uint64_t seed);

// prop-PROPERTY-ENGINE: a case a property suite (properties/) saw fail, printed to save.
std::string suite_fixture_stem(Property property, std::string_view engine);

// crash-SHA1: a fuzz target's failing input, named as libFuzzer names its artifacts; the
// fixture is written beside the artifact as crash-SHA1.json, where the campaign looks.
std::string fuzz_fixture_stem(std::string_view sha1);

// TARGET-ARTIFACT: the fixture a fuzz target decodes from its artifact (a crash, timeout or
// out-of-memory), e.g. fuzz_prefix-crash-3f2a....
std::string decoded_fixture_stem(std::string_view target, std::string_view artifact);

// ENGINE-KIND-TARGET-, what the shrunk fixtures of a crash, timeout or out-of-memory of
// `target` on `engine` begin with; crash_fixture_stem adds the first 8 hex digits of the
// artifact's SHA-1 (its name after the last '-').
std::string crash_fixture_prefix(std::string_view engine, std::string_view kind,
                                 std::string_view target);
std::string crash_fixture_stem(std::string_view engine, std::string_view kind,
                               std::string_view target, std::string_view artifact);

}  // namespace kvfuzz
