#include "doors/exec_pool.h"

#include <utility>

namespace kvfuzz::doors {

// Destroying a session ends its process (LineProcess: end of file, a grace, SIGKILL), or
// only closes this process's copies of its pipes when it was inherited across fork().

std::optional<ExecSession> ExecPool::take() {
  for (;;) {
    std::optional<ExecSession> session;
    {
      const std::lock_guard lock(mutex_);
      if (idle_.empty()) return std::nullopt;
      session = std::move(idle_.back());
      idle_.pop_back();
    }
    // Outside the lock: looking at the process reads its pipes, and ending one waits.
    if (session->process->usable()) return session;
  }
}

void ExecPool::give(ExecSession session) {
  if (!session.process || !session.process->usable()) return;  // ended here
  const std::lock_guard lock(mutex_);
  // One over the limit is ended on return, after the lock.
  if (idle_.size() < kMostIdle) idle_.push_back(std::move(session));
}

}  // namespace kvfuzz::doors
