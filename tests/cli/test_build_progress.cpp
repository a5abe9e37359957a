// The quick start's build progress (scripts/build-progress.sh, used by scripts/build.sh): the
// whole build output goes to the log, and stderr shows only progress: a line every 10
// percent when it is not a terminal (short CI logs), one rewritten line on a terminal.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "command.h"

namespace {

namespace fs = std::filesystem;
const fs::path kSource = KVFUZZ_SOURCE_DIR;

// Ninja's output for a build of 200 steps, with a compiler warning in between.
fs::path canned_build() {
  const fs::path path =
      fs::temp_directory_path() / ("kvfuzz-progress-" + std::to_string(::getpid()) + ".in");
  std::ofstream out(path);
  for (int i = 1; i <= 200; ++i) {
    out << "[" << i << "/200] Building CXX object step" << i << ".o\n";
    if (i == 7) out << "warning: something the log keeps\n";
  }
  return path;
}

int lines(const std::string& text) {
  int count = 0;
  for (char c : text) count += c == '\n';
  return count;
}

TEST(BuildProgress, NotOnATerminalALineEveryTenPercentAndEverythingInTheLog) {
  const fs::path input = canned_build();
  const fs::path log = input.string() + ".log";
  const auto r = kvfuzz::test::run_shell((kSource / "scripts/build-progress.sh").string() + " " +
                                         log.string() + " <" + input.string());
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out, "");
  EXPECT_EQ(lines(r.err), 10) << r.err;
  EXPECT_NE(r.err.find("kvfuzz: build 10% (20/200)\n"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("kvfuzz: build 100% (200/200)\n"), std::string::npos) << r.err;
  EXPECT_EQ(kvfuzz::test::slurp(log), kvfuzz::test::slurp(input));
  fs::remove(input);
  fs::remove(log);
}

// script(1) gives the filter a terminal: each status line rewrites the one before (carriage
// return, clear to the end of the line), no new lines, and the line is cleared at the end.
TEST(BuildProgress, OnATerminalOneLineThatEachStepRewrites) {
  if (kvfuzz::test::run_shell("command -v script >/dev/null").status != 0) {
    GTEST_SKIP() << "no script(1) to make a terminal";
  }
  const fs::path input = canned_build();
  const fs::path log = input.string() + ".log";
  const auto r =
      kvfuzz::test::run_shell("script -qec '" + (kSource / "scripts/build-progress.sh").string() +
                              " " + log.string() + " <" + input.string() + "' /dev/null");
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out.find('\n'), std::string::npos);
  EXPECT_NE(r.out.find("\r\033[K[100/200] Building CXX object step100.o\r\033[K[101/200]"),
            std::string::npos);
  EXPECT_TRUE(r.out.ends_with("[200/200] Building CXX object step200.o\r\033[K")) << r.out;
  EXPECT_EQ(kvfuzz::test::slurp(log), kvfuzz::test::slurp(input));
  fs::remove(input);
  fs::remove(log);
}

}  // namespace
