#include "fork_guard.h"

#include <Python.h>
#include <pthread.h>
#include <unistd.h>

#include <mutex>
#include <stdexcept>

namespace kvfuzz::python {

namespace {

// The guarded thread, while a guard lives (one at a time: check runs one plan per call).
bool g_active = false;
pthread_t g_owner;
PyThreadState* g_saved = nullptr;  // the guarded thread's state while the GIL is released
// Set by prepare for the fork it brackets: parent and child run in the thread that forked.
thread_local bool t_bracketing = false;

bool guarded_thread() {
  return g_active && pthread_equal(pthread_self(), g_owner) != 0;
}

// Whatever Python's own buffered streams hold is written now: else a worker that flushes
// them would write the parent's pending output a second time.
void flush_python_streams() {
  for (const char* name : {"stdout", "stderr"}) {
    PyObject* stream = PySys_GetObject(name);  // borrowed
    if (stream == nullptr || stream == Py_None) continue;
    PyObject* done = PyObject_CallMethod(stream, "flush", nullptr);
    if (done == nullptr) PyErr_Clear();
    Py_XDECREF(done);
  }
}

// A fatal signal in the worker (a segfault in an extension) prints the Python stack to fd
// 2, which the worker has made the pipe the stage reads its crash report from.
void enable_faulthandler() {
  PyObject* module = PyImport_ImportModule("faulthandler");
  if (module == nullptr) {
    PyErr_Clear();
    return;
  }
  PyObject* done = PyObject_CallMethod(module, "enable", "(i)", 2);
  if (done == nullptr) PyErr_Clear();
  Py_XDECREF(done);
  Py_DECREF(module);
}

void prepare() {
  if (!guarded_thread()) return;
  t_bracketing = true;
  PyEval_RestoreThread(g_saved);
  flush_python_streams();
  PyOS_BeforeFork();
}

void in_parent() {
  if (!t_bracketing) return;
  t_bracketing = false;
  PyOS_AfterFork_Parent();
  g_saved = PyEval_SaveThread();
}

void in_child() {
  if (!t_bracketing) return;
  t_bracketing = false;
  g_active = false;  // forks the worker makes itself (an engine's subprocess) are its own
  PyOS_AfterFork_Child();
  enable_faulthandler();
}

}  // namespace

WorkersForkGuard::WorkersForkGuard() : parent_(::getpid()) {
  // One at a time: the handlers know one thread (and another thread may call in while this
  // one has let go of the GIL).
  if (g_active) {
    throw std::runtime_error(
        "kvfuzz: a forked check is already running in another thread; run one at a time, or "
        "pass fork=False");
  }
  static std::once_flag registered;
  std::call_once(registered, [] { ::pthread_atfork(prepare, in_parent, in_child); });
  g_owner = pthread_self();
  g_active = true;
  g_saved = PyEval_SaveThread();
}

WorkersForkGuard::~WorkersForkGuard() {
  g_active = false;
  PyEval_RestoreThread(g_saved);
  g_saved = nullptr;
}

bool WorkersForkGuard::in_worker() const {
  return ::getpid() != parent_;
}

}  // namespace kvfuzz::python
