// How a worker's end becomes a finding's signature: a sanitizer's SUMMARY line names its
// kind, and AddressSanitizer's SEGV reads as the crash it caught.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <optional>
#include <string>

#include "support/fork_io.h"

namespace {

using kvfuzz::end_signature;
using kvfuzz::sanitizer_signature;

TEST(ForkIo, AnAddressSanitizerReportNamesItsKind) {
  const std::string tail =
      "engine: stepping\n"
      "==12==ERROR: AddressSanitizer: heap-buffer-overflow on address 0x602000000018\n"
      "    #0 0x55 in step kernel.cpp:10\n"
      "SUMMARY: AddressSanitizer: heap-buffer-overflow kernel.cpp:10 in step\n"
      "Shadow bytes around the buggy address:\n";
  EXPECT_EQ(sanitizer_signature(tail), std::optional<std::string>("asan/heap-buffer-overflow"));
}

TEST(ForkIo, AnAddressSanitizerSegvIsTheCrashItCaught) {
  EXPECT_EQ(sanitizer_signature("SUMMARY: AddressSanitizer: SEGV (/lib/x.so+0x12) in step\n"),
            std::optional<std::string>("crash/SIGSEGV"));
}

TEST(ForkIo, OtherSanitizersAndLeaks) {
  EXPECT_EQ(
      sanitizer_signature("SUMMARY: UndefinedBehaviorSanitizer: undefined-behavior a.cpp:3\n"),
      std::optional<std::string>("ubsan/undefined-behavior"));
  EXPECT_EQ(sanitizer_signature("SUMMARY: ThreadSanitizer: data race a.cpp:3 in f\n"),
            std::optional<std::string>("tsan/data"));
  EXPECT_EQ(
      sanitizer_signature("SUMMARY: AddressSanitizer: 24 byte(s) leaked in 1 allocation(s).\n"),
      std::optional<std::string>("asan/leak"));
}

TEST(ForkIo, NoSummaryNoSanitizerSignature) {
  EXPECT_EQ(sanitizer_signature(""), std::nullopt);
  EXPECT_EQ(sanitizer_signature("==1==ERROR: AddressSanitizer: heap-buffer-overflow\n"),
            std::nullopt);  // a report cut before its summary says too little
  EXPECT_EQ(sanitizer_signature("SUMMARY: 3 tests failed\n"), std::nullopt);
  EXPECT_EQ(sanitizer_signature("SUMMARY: AddressSanitizer:\n"), std::nullopt);
}

TEST(ForkIo, EndSignatures) {
  EXPECT_EQ(end_signature(SIGSEGV), "crash/SIGSEGV");  // WIFSIGNALED: the low bits
  EXPECT_EQ(end_signature(3 << 8), "exit/3");          // WIFEXITED with status 3
}

}  // namespace
