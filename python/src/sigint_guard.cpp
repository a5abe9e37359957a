#include "sigint_guard.h"

#include <nanobind/nanobind.h>

#include <csignal>

#include "py_engine.h"

namespace nb = nanobind;

namespace kvfuzz::python {

namespace {

// The workers, in their own process groups, do not see a Ctrl-C at the terminal: this
// process stops them.
struct sigaction g_previous;
volatile std::sig_atomic_t g_sigint = 0;

void on_sigint(int signal) {
  g_sigint = 1;
  *interrupted_flag() = 1;
  if ((g_previous.sa_flags & SA_SIGINFO) == 0 && g_previous.sa_handler != SIG_DFL &&
      g_previous.sa_handler != SIG_IGN) {
    g_previous.sa_handler(signal);
  }
}

}  // namespace

SigintGuard::SigintGuard() {
  struct sigaction ours {};
  ours.sa_handler = on_sigint;
  sigemptyset(&ours.sa_mask);
  ours.sa_flags = SA_ONSTACK;
  g_sigint = 0;
  installed_ = ::sigaction(SIGINT, nullptr, &g_previous) == 0 && g_previous.sa_handler != SIG_IGN &&
               ::sigaction(SIGINT, &ours, nullptr) == 0;
}
SigintGuard::~SigintGuard() {
  if (installed_) ::sigaction(SIGINT, &g_previous, nullptr);
}

void raise_if_stopped() {
  const bool signalled = g_sigint != 0;
  g_sigint = 0;
  if (!interrupted()) return;
  clear_interrupted();
  if (signalled && PyErr_CheckSignals() != 0) throw nb::python_error();
  PyErr_SetNone(PyExc_KeyboardInterrupt);
  throw nb::python_error();
}

}  // namespace kvfuzz::python
