// The plumbing under `kvfuzz campaign`: reading libFuzzer's status lines, durations on the
// command line, cache states, and running a child process that can be stopped and that
// nothing it starts outlives.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "campaign/libfuzzer_status.h"
#include "generate/events.h"
#include "support/duration.h"
#include "support/subprocess.h"

namespace kvfuzz {
namespace {

TEST(LibFuzzerStatus, ForkModeLine) {
  const auto s = parse_libfuzzer_status(
      "#1234: cov: 812 ft: 2304 corp: 96 exec/s 410 oom/timeout/crash: 1/2/3 time: 31s job: 7 "
      "dft_time: 0");
  ASSERT_TRUE(s);
  EXPECT_EQ(s->executions, 1234);
  EXPECT_EQ(s->coverage, 812);
  EXPECT_EQ(s->features, 2304);
  EXPECT_EQ(s->corpus, 96);
  EXPECT_EQ(s->executions_per_second, 410);
  EXPECT_EQ(s->ooms, 1);
  EXPECT_EQ(s->timeouts, 2);
  EXPECT_EQ(s->crashes, 3);
}

TEST(LibFuzzerStatus, OneProcessLine) {
  const auto s = parse_libfuzzer_status(
      "#4096\tpulse  cov: 2893 ft: 10049 corp: 478/431Kb lim: 20001 exec/s: 5224 rss: 325Mb");
  ASSERT_TRUE(s);
  EXPECT_EQ(s->executions, 4096);
  EXPECT_EQ(s->coverage, 2893);
  EXPECT_EQ(s->features, 10049);
  EXPECT_EQ(s->corpus, 478);
  EXPECT_EQ(s->executions_per_second, 5224);
  EXPECT_EQ(s->crashes, 0);
}

TEST(LibFuzzerStatus, OtherLinesAreNotStatus) {
  EXPECT_FALSE(parse_libfuzzer_status("INFO: Seed: 1"));
  EXPECT_FALSE(parse_libfuzzer_status("==123== ERROR: libFuzzer: deadly signal"));
  EXPECT_FALSE(parse_libfuzzer_status("#"));
  EXPECT_FALSE(parse_libfuzzer_status("#12 INITED exec/s: 0 rss: 31Mb"));  // no cov
  EXPECT_FALSE(parse_libfuzzer_status(""));
}

TEST(Duration, Units) {
  EXPECT_EQ(parse_duration("90"), 90);
  EXPECT_EQ(parse_duration("90s"), 90);
  EXPECT_EQ(parse_duration("30m"), 1800);
  EXPECT_EQ(parse_duration("8h"), 8 * 3600);
  EXPECT_EQ(parse_duration("1h30m"), 5400);
  EXPECT_EQ(parse_duration("2d"), 2 * 86400);
  EXPECT_EQ(parse_duration("0.5m"), 30);
}

TEST(Duration, Malformed) {
  for (const char* bad : {"", "h", "8x", "-5m", "0", "0s", "1h30", "8 h", "m8", "1e400", "inf",
                          "nan", "infh", "11000d"}) {
    EXPECT_FALSE(parse_duration(bad)) << bad;
  }
}

TEST(CacheStates, CountClassesFollowLibFuzzer) {
  const std::vector<std::pair<int64_t, int>> cases = {
      {1, 0},  {2, 1},  {3, 2},  {4, 3},   {7, 3},   {8, 4},     {15, 4},
      {16, 5}, {31, 5}, {32, 6}, {127, 6}, {128, 7}, {100000, 7}};
  for (const auto& [count, expected] : cases) EXPECT_EQ(count_class(count), expected) << count;
}

TEST(CacheStates, OneStatePerEventAndOnePerPair) {
  EventCounts counts;
  EXPECT_TRUE(cache_states(counts).empty());
  counts[Event::fork_partial_page] = 5;
  counts[Event::truncate_shared_page] = 1;
  const std::vector<int> states = cache_states(counts);
  ASSERT_EQ(states.size(), 3u);  // two events and their pair
  EXPECT_EQ(cache_state_name(states[0]), "fork-with-partial-page x4-7");
  EXPECT_EQ(cache_state_name(states[1]), "truncate-into-shared-page x1");
  EXPECT_EQ(cache_state_name(states[2]), "fork-with-partial-page + truncate-into-shared-page");
  for (int s : states) EXPECT_LT(s, kCacheStateCount);
}

TEST(CacheStates, NamesAreDistinct) {
  std::vector<std::string> names;
  for (int i = 0; i < kCacheStateCount; ++i) names.push_back(cache_state_name(i));
  std::sort(names.begin(), names.end());
  EXPECT_EQ(std::adjacent_find(names.begin(), names.end()), names.end());
  EXPECT_EQ(std::count(names.begin(), names.end(), "?"), 0);
}

TEST(Subprocess, CapturesOutputAndStatus) {
  const ProcessResult r =
      run_process({"sh", "-c", "echo one; echo two >&2; exit 3"}, {}, std::chrono::seconds(10));
  EXPECT_EQ(r.exit_code, 3);
  EXPECT_FALSE(r.timed_out);
  EXPECT_NE(r.output.find("one\n"), std::string::npos);
  EXPECT_NE(r.output.find("two\n"), std::string::npos);
}

TEST(Subprocess, PassesEnvironment) {
  const ProcessResult r = run_process({"sh", "-c", "echo \"[$KVFUZZ_X]\""}, {{"KVFUZZ_X", "a b"}},
                                      std::chrono::seconds(10));
  EXPECT_EQ(r.output, "[a b]\n");
}

TEST(Subprocess, AHangingChildIsStoppedAtTheLimit) {
  const auto start = std::chrono::steady_clock::now();
  const ProcessResult r =
      run_process({"sh", "-c", "trap '' INT; sleep 30"}, {}, std::chrono::milliseconds(300));
  EXPECT_TRUE(r.timed_out);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
}

TEST(Subprocess, AMissingProgramIsAnExitStatus) {
  const ProcessResult r = run_process({"kvfuzz-no-such-program"}, {}, std::chrono::seconds(10));
  EXPECT_EQ(r.exit_code, 127);
}

// Gone, or a zombie waiting for a parent other than us.
bool process_gone(pid_t pid) {
  std::ifstream status("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("State:", 0) == 0) return line.find('Z') != std::string::npos;
  }
  return true;
}

TEST(Subprocess, WhatTheChildStartedDiesWithTheProcessThatStartedIt) {
  // A child of this test plays the campaign: it starts a program that starts one of its
  // own (a fork-mode libFuzzer's jobs), then ends with _exit(), which runs no destructor.
  int report[2];
  ASSERT_EQ(pipe(report), 0);
  const pid_t campaign = fork();
  ASSERT_GE(campaign, 0);
  if (campaign == 0) {
    close(report[0]);
    try {
      Subprocess process({"sh", "-c", "sleep 60 & echo $!; wait"}, {});
      std::string pid;
      while (pid.empty() && process.poll_lines(std::chrono::milliseconds(100),
                                               [&](const std::string& line) { pid = line; })) {
      }
      pid += "\n";
      if (write(report[1], pid.data(), pid.size()) != static_cast<ssize_t>(pid.size())) _exit(3);
      _exit(0);
    } catch (...) {
      _exit(2);
    }
  }
  close(report[1]);
  std::string text;
  char buffer[64];
  for (ssize_t n; (n = read(report[0], buffer, sizeof buffer)) > 0;) {
    text.append(buffer, static_cast<size_t>(n));
  }
  close(report[0]);
  int status = 0;
  waitpid(campaign, &status, 0);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  const pid_t grandchild = static_cast<pid_t>(std::stol(text));
  const auto start = std::chrono::steady_clock::now();
  while (!process_gone(grandchild) &&
         std::chrono::steady_clock::now() - start < std::chrono::seconds(10)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_TRUE(process_gone(grandchild)) << "pid " << grandchild << " outlived its campaign";
  if (!process_gone(grandchild)) kill(grandchild, SIGKILL);
}

}  // namespace
}  // namespace kvfuzz
