// How kvfuzz names the fixtures it writes, in one place, so that `kvfuzz check`, `kvfuzz
// shrink`, the campaign and the CMake package's GoogleTest tests give the same case the
// same name: ENGINE-PROPERTY-KIND-HASH.json.
#pragma once

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

}  // namespace kvfuzz
