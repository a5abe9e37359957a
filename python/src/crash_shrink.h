// kvfuzz._kvfuzz.shrink_crash: a crash (or exit) of a Python engine shrunk with the
// scenario shrinker's own search (shrink_with), each candidate judged in a child forked
// from this process (fork_guard.h), which must end the same way: killed by the same
// signal, or exiting with the same status, before it has judged every property. This
// process never runs the engine on a candidate, so it survives every one that crashes.
#pragma once

#include <nanobind/nanobind.h>

namespace kvfuzz::python {

void bind_crash_shrink(nanobind::module_& m);

}  // namespace kvfuzz::python
