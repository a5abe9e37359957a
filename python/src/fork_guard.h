// Forking the check stage's workers from a Python process (check_binding.cpp). While a
// forked plan runs, the thread that called it releases the GIL (so that the callbacks, and
// other Python threads, can take it between tasks), and every fork that thread makes (the
// stage's WorkerPool starting or replacing a worker) is bracketed as os.fork() brackets
// its own: the GIL taken back and PyOS_BeforeFork() before, PyOS_AfterFork_Parent() and the
// GIL released again in the parent, PyOS_AfterFork_Child() in the child, which keeps the
// GIL (its worker calls the Python engine and never returns: it _exits) and dumps the
// Python stack to its stderr on a fatal signal (faulthandler), which the stage puts in the
// crash's report. pthread_atfork handlers do it, so the stage needs no hook; they act only
// in that thread and only while the guard is alive. POSIX only.
#pragma once

#include <sys/types.h>

namespace kvfuzz::python {

class WorkersForkGuard {
 public:
  // With the GIL held; releases it. Throws std::runtime_error while another guard lives.
  WorkersForkGuard();
  ~WorkersForkGuard();  // takes the GIL back
  WorkersForkGuard(const WorkersForkGuard&) = delete;
  WorkersForkGuard& operator=(const WorkersForkGuard&) = delete;

  // Whether this is a worker forked under the guard (then it must never return into
  // Python: a C++ exception that escapes the stage there ends it with _exit).
  bool in_worker() const;

 private:
  pid_t parent_;
};

}  // namespace kvfuzz::python
