// Ctrl-C while the harness runs with the GIL released (a forked check, a crash being
// shrunk): a SIGINT handler, for as long as a guard lives, sets the engines' interrupted
// flag (py_engine.h), which run_check_plan polls as its stop flag and the crash shrinker
// between candidates, and passes the signal on to the handler it replaced (Python's, which
// raises KeyboardInterrupt once this thread runs Python again).
#pragma once

namespace kvfuzz::python {

class SigintGuard {
 public:
  SigintGuard();
  ~SigintGuard();
  SigintGuard(const SigintGuard&) = delete;
  SigintGuard& operator=(const SigintGuard&) = delete;

 private:
  bool installed_ = false;
};

// With the GIL held again: Ctrl-C (or a KeyboardInterrupt inside an in-process engine)
// raised as KeyboardInterrupt, or as whatever Python's handler raised.
void raise_if_stopped();

}  // namespace kvfuzz::python
