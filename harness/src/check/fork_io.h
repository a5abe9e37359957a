// What kvfuzz check and the children it forks (workers, the declarations probe) share:
// whole reads and writes on a pipe, and the names of how a child ended. POSIX only.
#pragma once

#include <cstddef>
#include <string>

namespace kvfuzz::check {

// Until all of `size` is written (or read); false when the other end is gone first.
bool write_all(int fd, const void* data, size_t size);
bool read_all(int fd, void* data, size_t size);

// "SIGSEGV" (or "signal 77" for one without a name).
std::string signal_name(int signal);

// How a child ended, from waitpid()'s status, as a finding's signature: "crash/SIGSEGV"
// when a signal ended it, "exit/STATUS" when it exited.
std::string end_signature(int wait_status);

}  // namespace kvfuzz::check
