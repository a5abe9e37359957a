// What the children kvfuzz forks (check's workers, call_isolated's child) and their parent
// share: whole reads and writes on a pipe, and the names of how a child ended. POSIX only.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

namespace kvfuzz {

// Until all of `size` is written (or read); false when the other end is gone first.
bool write_all(int fd, const void* data, size_t size);
bool read_all(int fd, void* data, size_t size);

// "SIGSEGV" (or "signal 77" for one without a name).
std::string signal_name(int signal);

// How a child ended, from waitpid()'s status, as a finding's signature: "crash/SIGSEGV"
// when a signal ended it, "exit/STATUS" when it exited.
std::string end_signature(int wait_status);

// The signature a sanitizer's report gives an exit, from the child's last stderr: its
// SUMMARY line names the kind ("SUMMARY: AddressSanitizer: heap-buffer-overflow ...") and
// becomes "asan/heap-buffer-overflow" ("ubsan/...", "tsan/...", "msan/..."), except that
// AddressSanitizer's SEGV, a segfault it caught, is "crash/SIGSEGV" as it is without a
// sanitizer, so that --ignore and the table read the same in both builds. Nothing when
// the stderr holds no such line.
std::optional<std::string> sanitizer_signature(std::string_view stderr_tail);

}  // namespace kvfuzz
