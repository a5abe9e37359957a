// Engines that misbehave on purpose, known only to the fuzz targets: they test that a
// campaign survives an engine that crashes or hangs and turns it into a finding.
//   selftest-crash  the contiguous engine, but truncate() dies of SIGSEGV
//   selftest-hang   the contiguous engine, but truncate() never returns
#pragma once

#include <string_view>

#include "kvfuzz/engine.h"

namespace kvfuzz::fuzz {

const EngineInfo* find_selftest_engine(std::string_view name);

}  // namespace kvfuzz::fuzz
