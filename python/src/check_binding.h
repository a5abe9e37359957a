// kvfuzz._kvfuzz.run_check: the check stage's run_check_plan (kvfuzz/check.h) for one
// engine, crash-isolated in forked workers (fork_guard.h) or in this process; kvfuzz.check
// (python/kvfuzz/_check.py) builds on it and shrinks property findings afterwards.
#pragma once

#include <nanobind/nanobind.h>

namespace kvfuzz::python {

void bind_check(nanobind::module_& m);

}  // namespace kvfuzz::python
