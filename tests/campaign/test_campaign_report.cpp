// The campaign record on disk (save_campaign / load_campaign) and the campaign report
// (campaign_markdown / campaign_html).
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "campaign/campaign.h"
#include "generate/events.h"

namespace kvfuzz {
namespace {

namespace fs = std::filesystem;

// Strings that JSON, Markdown and HTML all have to escape or carry through.
constexpr std::string_view kAwkward = "quote \" backslash \\ tab\t newline\n <b>&amp; \u00fc\u20ac";
constexpr std::string_view kHostileTarget = "a<b&\"c";

CampaignSample sample_at(double elapsed, std::string target, int failures) {
  CampaignSample sample;
  sample.elapsed_seconds = elapsed;
  sample.target = std::move(target);
  sample.executions = static_cast<int64_t>(elapsed * 1000);
  sample.executions_per_second = 1000.5;
  sample.coverage = 100 + static_cast<int64_t>(elapsed);
  sample.features = 400 + static_cast<int64_t>(elapsed) * 3;
  sample.events_reached = 5;
  sample.cache_states = 40;
  sample.failures = failures;
  return sample;
}

CampaignFinding finding(std::string signature, std::string filed, std::string duplicate_of) {
  CampaignFinding finding;
  finding.artifact = "crash-0123abcd";
  finding.target = "fuzz_prefix";
  finding.kind = "property";
  finding.signature = std::move(signature);
  finding.failure = "row 3 head 1: got 0.5, expected 0.25";
  finding.fixture = "out/fixtures/crash-0123abcd.json";
  finding.tokens_before = 120;
  finding.tokens_after = 7;
  finding.filed = std::move(filed);
  finding.duplicate_of = std::move(duplicate_of);
  finding.note = "shrunk in 3 passes";
  return finding;
}

// Every field differs from its default value.
CampaignRecord full_record() {
  CampaignRecord record;
  record.engine = "paged \"v2\"\n\u00fc\U0001F600";
  record.targets = {"fuzz_prefix", std::string(kAwkward), ""};
  record.budget_seconds = 0.1;
  record.elapsed_seconds = 1e-300;
  record.jobs = 3;
  record.event_counters = false;
  record.finished = true;
  record.command = "kvfuzz campaign --engine 'paged v2' --budget 1h";
  record.started = "2024-05-01T12:00:00Z";
  record.machine = "Linux x86_64, 16 cores";
  record.next_target = 2;
  record.executions = INT64_MAX;
  for (int e = 0; e < kEventCount; ++e) record.event_hits[static_cast<size_t>(e)] = e * 7 + 1;
  for (int i = 0; i < kCacheStateCount; ++i)
    record.cache_states[static_cast<size_t>(i)] = i % 3 != 0;
  record.samples = {sample_at(1.0 / 3, "fuzz_prefix", 0), sample_at(12345.678901234567, "", 2)};
  CampaignSample odd = sample_at(7.25, std::string(kAwkward), 1);
  odd.executions_per_second = 1e-300;
  record.samples.push_back(odd);
  record.findings = {finding("prefix/mismatch", "regressions/prefix-mismatch.json", ""),
                     finding(std::string(kAwkward), "", "prefix/mismatch")};
  record.findings[1].tokens_before = -1;
  record.findings[1].note = std::string(kAwkward);
  record.corpora = {{"fuzz_prefix", 10, 25}, {std::string(kAwkward), INT64_MAX, 0}};
  return record;
}

void expect_same(const CampaignSample& a, const CampaignSample& b) {
  EXPECT_EQ(a.elapsed_seconds, b.elapsed_seconds);
  EXPECT_EQ(a.target, b.target);
  EXPECT_EQ(a.executions, b.executions);
  EXPECT_EQ(a.executions_per_second, b.executions_per_second);
  EXPECT_EQ(a.coverage, b.coverage);
  EXPECT_EQ(a.features, b.features);
  EXPECT_EQ(a.events_reached, b.events_reached);
  EXPECT_EQ(a.cache_states, b.cache_states);
  EXPECT_EQ(a.failures, b.failures);
}

void expect_same(const CampaignFinding& a, const CampaignFinding& b) {
  EXPECT_EQ(a.artifact, b.artifact);
  EXPECT_EQ(a.target, b.target);
  EXPECT_EQ(a.kind, b.kind);
  EXPECT_EQ(a.signature, b.signature);
  EXPECT_EQ(a.failure, b.failure);
  EXPECT_EQ(a.fixture, b.fixture);
  EXPECT_EQ(a.tokens_before, b.tokens_before);
  EXPECT_EQ(a.tokens_after, b.tokens_after);
  EXPECT_EQ(a.filed, b.filed);
  EXPECT_EQ(a.duplicate_of, b.duplicate_of);
  EXPECT_EQ(a.note, b.note);
}

void expect_same(const CampaignRecord& a, const CampaignRecord& b) {
  EXPECT_EQ(a.version, b.version);
  EXPECT_EQ(a.engine, b.engine);
  EXPECT_EQ(a.targets, b.targets);
  EXPECT_EQ(a.budget_seconds, b.budget_seconds);
  EXPECT_EQ(a.elapsed_seconds, b.elapsed_seconds);
  EXPECT_EQ(a.jobs, b.jobs);
  EXPECT_EQ(a.event_counters, b.event_counters);
  EXPECT_EQ(a.finished, b.finished);
  EXPECT_EQ(a.command, b.command);
  EXPECT_EQ(a.started, b.started);
  EXPECT_EQ(a.machine, b.machine);
  EXPECT_EQ(a.next_target, b.next_target);
  EXPECT_EQ(a.executions, b.executions);
  EXPECT_EQ(a.event_hits, b.event_hits);
  EXPECT_EQ(a.cache_states, b.cache_states);
  ASSERT_EQ(a.samples.size(), b.samples.size());
  for (size_t i = 0; i < a.samples.size(); ++i) expect_same(a.samples[i], b.samples[i]);
  ASSERT_EQ(a.findings.size(), b.findings.size());
  for (size_t i = 0; i < a.findings.size(); ++i) expect_same(a.findings[i], b.findings[i]);
  ASSERT_EQ(a.corpora.size(), b.corpora.size());
  for (size_t i = 0; i < a.corpora.size(); ++i) {
    EXPECT_EQ(a.corpora[i].target, b.corpora[i].target);
    EXPECT_EQ(a.corpora[i].inputs_before, b.corpora[i].inputs_before);
    EXPECT_EQ(a.corpora[i].inputs_after, b.corpora[i].inputs_after);
  }
}

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

void write_file(const fs::path& path, std::string_view text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
}

// `text` with the first `from` replaced by `to`; the test fails if there is none.
std::string replace_first(std::string text, std::string_view from, std::string_view to) {
  const size_t at = text.find(from);
  EXPECT_NE(at, std::string::npos) << "no " << from << " in the saved record";
  if (at != std::string::npos) text.replace(at, from.size(), to);
  return text;
}

// A folder of its own per test, removed afterwards.
class CampaignRecordFile : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    folder_ = fs::temp_directory_path() /
              ("kvfuzz-campaign-" + std::to_string(::getpid()) + "-" + info->name());
    fs::remove_all(folder_);
  }
  void TearDown() override { fs::remove_all(folder_); }

  // The error message of loading the full record saved, then edited by `edit`.
  template <typename Edit>
  std::string load_error(Edit edit) {
    const fs::path path = folder_ / "campaign.json";
    save_campaign(full_record(), path);
    write_file(path, edit(read_file(path)));
    try {
      load_campaign(path);
    } catch (const std::runtime_error& error) {
      return error.what();
    }
    ADD_FAILURE() << "load_campaign accepted the edited record";
    return "";
  }

  // One line that names the file and the field.
  void expect_error_line(const std::string& message, std::string_view field) {
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;
    EXPECT_EQ(message.rfind((folder_ / "campaign.json").string() + ": ", 0), 0u) << message;
    EXPECT_NE(message.find(field), std::string::npos) << message;
    EXPECT_NE(message.find("expected"), std::string::npos) << message;
  }

  fs::path folder_;
};

TEST_F(CampaignRecordFile, RoundTripKeepsEveryField) {
  const CampaignRecord record = full_record();
  const fs::path path = folder_ / "campaign.json";
  save_campaign(record, path);
  expect_same(load_campaign(path), record);
}

TEST_F(CampaignRecordFile, DefaultRecordRoundTrips) {
  const fs::path path = folder_ / "campaign.json";
  save_campaign(CampaignRecord{}, path);
  expect_same(load_campaign(path), CampaignRecord{});
}

TEST_F(CampaignRecordFile, SaveCreatesFoldersReplacesTheRecordAndLeavesNoTemporary) {
  const fs::path path = folder_ / "out" / "deeper" / "campaign.json";
  save_campaign(CampaignRecord{}, path);
  CampaignRecord second = full_record();
  second.jobs = 9;
  save_campaign(second, path);
  EXPECT_EQ(load_campaign(path).jobs, 9);
  EXPECT_FALSE(fs::exists(path.string() + ".tmp"));
  size_t files = 0;
  for ([[maybe_unused]] const auto& entry : fs::directory_iterator(path.parent_path())) ++files;
  EXPECT_EQ(files, 1u);
}

TEST_F(CampaignRecordFile, WrongTypeNamesFileAndField) {
  const std::string message = load_error(
      [](std::string text) { return replace_first(text, "\"jobs\": 3", "\"jobs\": \"3\""); });
  expect_error_line(message, "jobs: expected an integer");
  EXPECT_NE(message.find("got \"3\""), std::string::npos) << message;
}

TEST_F(CampaignRecordFile, WrongTypeInsideAnArrayNamesItsPath) {
  const std::string message = load_error([](std::string text) {
    return replace_first(text, "\"tokens_before\": 120", "\"tokens_before\": 1.5");
  });
  expect_error_line(message, "findings[0].tokens_before");
}

TEST_F(CampaignRecordFile, EventHitsAreCheckedByEventName) {
  const std::string message = load_error([](std::string text) {
    return replace_first(text, "\"split-decode-path\": ", "\"split-decode-path\": true, \"x\": ");
  });
  expect_error_line(message, "event_hits.split-decode-path");
}

TEST_F(CampaignRecordFile, MissingFieldNamesFileAndField) {
  const std::string message =
      load_error([](std::string text) { return replace_first(text, "\"machine\":", "\"mac\":"); });
  expect_error_line(message, "machine");
  EXPECT_NE(message.find("missing"), std::string::npos) << message;
}

TEST_F(CampaignRecordFile, CacheStatesMustBeTheRightLength) {
  const std::string message = load_error([](std::string text) {
    return replace_first(text, "\"cache_states\": \"0", "\"cache_states\": \"");
  });
  expect_error_line(message, "cache_states");
}

TEST_F(CampaignRecordFile, BadJsonNamesFile) {
  const std::string message =
      load_error([](const std::string&) { return std::string("{\"version\": 1,\n oops"); });
  expect_error_line(message, "JSON");
}

TEST_F(CampaignRecordFile, OtherVersionIsRejected) {
  for (std::string_view version : {"2", "0", "-1", "\"1\""}) {
    const std::string message = load_error([version](std::string text) {
      return replace_first(text, "\"version\": 1", "\"version\": " + std::string(version));
    });
    expect_error_line(message, "version: expected 1");
    EXPECT_NE(message.find("got " + std::string(version)), std::string::npos) << message;
  }
}

TEST_F(CampaignRecordFile, MissingFileNamesIt) {
  const fs::path path = folder_ / "nowhere.json";
  try {
    load_campaign(path);
    FAIL() << "load_campaign read a file that does not exist";
  } catch (const std::runtime_error& error) {
    EXPECT_NE(std::string(error.what()).find(path.string()), std::string::npos) << error.what();
  }
}

// A small campaign with findings, two targets and a few samples.
CampaignRecord reported_record() {
  CampaignRecord record;
  record.engine = "paged";
  record.targets = {"fuzz_prefix", "fuzz_fork"};
  record.budget_seconds = 3600;
  record.elapsed_seconds = 1800;
  record.executions = 1234567;
  record.event_hits[static_cast<size_t>(Event::split_path)] = 42;
  record.cache_states[0] = true;
  record.cache_states[5] = true;
  for (int i = 0; i < 30; ++i) {
    record.samples.push_back(sample_at(i * 60.0, i % 2 ? "fuzz_fork" : "fuzz_prefix", i / 10));
  }
  record.findings = {finding("prefix/mismatch", "regressions/prefix-mismatch.json", ""),
                     finding("prefix/mismatch", "", "prefix/mismatch"),
                     finding("crash fuzz_fork", "regressions/crash-fork.json", "")};
  record.corpora = {{"fuzz_prefix", 10, 0}, {"fuzz_fork", 3, 0}};
  return record;
}

bool contains(const std::string& text, std::string_view part) {
  return text.find(part) != std::string::npos;
}

TEST(CampaignReport, MarkdownListsFindingsAndCounts) {
  const std::string markdown = campaign_markdown(reported_record());
  EXPECT_TRUE(contains(markdown, "# kvfuzz campaign: paged")) << markdown;
  EXPECT_TRUE(contains(markdown, "prefix/mismatch")) << markdown;
  EXPECT_TRUE(contains(markdown, "3 artifacts, 2 distinct signatures.")) << markdown;
  // One row per signature, with how many artifacts had it.
  EXPECT_TRUE(contains(markdown, "| prefix/mismatch | 2 | property |")) << markdown;
  EXPECT_FALSE(contains(markdown, "duplicate of")) << markdown;
  EXPECT_TRUE(contains(markdown, "120 \u2192 7")) << markdown;
  EXPECT_TRUE(contains(markdown, "| split-decode-path | 42 | yes |")) << markdown;
  EXPECT_TRUE(contains(markdown, "Events reached: 1 of 11.")) << markdown;
  EXPECT_TRUE(contains(markdown, "Cache states reached: 2 of " + std::to_string(kCacheStateCount)))
      << markdown;
  EXPECT_TRUE(contains(markdown, "and " + std::to_string(kCacheStateCount - 2 - 20) + " more"))
      << markdown;
  EXPECT_TRUE(contains(markdown, "1,234,567")) << markdown;
  EXPECT_TRUE(contains(markdown, "not merged yet")) << markdown;
  EXPECT_FALSE(contains(markdown, "No samples yet")) << markdown;
}

TEST(CampaignReport, MarkdownCellsStayInTheirColumn) {
  CampaignRecord record = reported_record();
  record.findings[0].failure = "a | b\nc";
  const std::string markdown = campaign_markdown(record);
  EXPECT_TRUE(contains(markdown, "a \\| b c")) << markdown;
}

TEST(CampaignReport, HtmlIsSelfContained) {
  const std::string html = campaign_html(reported_record());
  EXPECT_EQ(html.rfind("<!DOCTYPE html>", 0), 0u);
  EXPECT_TRUE(contains(html, "<svg"));
  EXPECT_TRUE(contains(html, "<polyline"));
  EXPECT_TRUE(contains(html, "<style>"));
  EXPECT_TRUE(contains(html, "3 artifacts, 2 distinct signatures."));
  for (std::string_view outside : {"<script", "http://", "https://", "<link", " src=", "url("}) {
    EXPECT_FALSE(contains(html, outside)) << outside;
  }
  // SVG fills a polyline black by default; the page's CSS says otherwise, but an image
  // viewer or converter that reads the SVG alone must not draw black wedges.
  for (size_t at = html.find("<polyline"); at != std::string::npos;
       at = html.find("<polyline", at + 1)) {
    EXPECT_NE(html.substr(at, html.find('>', at) - at).find("fill=\"none\""), std::string::npos);
  }
}

TEST(CampaignReport, HtmlEscapesNames) {
  CampaignRecord record = reported_record();
  record.engine = std::string(kHostileTarget);
  record.targets.push_back(std::string(kHostileTarget));
  record.samples.push_back(sample_at(2000, std::string(kHostileTarget), 3));
  record.findings[0].failure = "<script>alert(1)</script>";
  record.corpora.push_back({std::string(kHostileTarget), 1, 2});
  const std::string html = campaign_html(record);
  EXPECT_FALSE(contains(html, kHostileTarget));
  EXPECT_FALSE(contains(html, "<script"));
  EXPECT_TRUE(contains(html, "a&lt;b&amp;&quot;c"));
}

// Every finding with a fixture is a link, relative to the report when the fixture lies in
// the campaign's own folders (so an archived OUT keeps its links), with the commands that
// reproduce it, quoted for the shell.
TEST(CampaignReport, EveryFindingLinksItsFixtureAndHowToReproduceIt) {
  CampaignRecord record = reported_record();
  record.engine = "exec:python3 my engine.py";
  record.findings[0].fixture = "kvfuzz-out/night/shrunk/paged-prefix-mismatch-1.json";
  record.findings[1].fixture = "/abs/out/findings/raw/it's.json";
  record.findings[2].fixture = "corpus/regressions/crash-fork.json";
  CampaignFinding unfixed = finding("oom in fuzz_fork", "", "");
  unfixed.fixture = "";
  record.findings.push_back(unfixed);
  CampaignFinding parser = finding("crash in fuzz_fixture", "", "");
  parser.target = "fuzz_fixture";
  parser.fixture = "kvfuzz-out/night/artifacts/fuzz_fixture/crash-9";
  record.findings.push_back(parser);
  const std::string html = campaign_html(record);
  for (const char* part :
       {"<a href=\"shrunk/paged-prefix-mismatch-1.json\">kvfuzz-out/night/shrunk/"
        "paged-prefix-mismatch-1.json</a>",
        "<a href=\"findings/raw/it&#39;s.json\">",
        "<a href=\"corpus/regressions/crash-fork.json\">",
        "<code>kvfuzz replay kvfuzz-out/night/shrunk/paged-prefix-mismatch-1.json --engine "
        "&#39;exec:python3 my engine.py&#39;</code>",
        "<code>kvfuzz explain kvfuzz-out/night/shrunk/paged-prefix-mismatch-1.json --engine ",
        "<code>kvfuzz replay &#39;/abs/out/findings/raw/it&#39;\\&#39;&#39;s.json&#39; --engine ",
        // A parser input needs no engine: it fails while being read.
        "<a href=\"artifacts/fuzz_fixture/crash-9\">",
        "<code>kvfuzz replay kvfuzz-out/night/artifacts/fuzz_fixture/crash-9</code></td>"}) {
    EXPECT_TRUE(contains(html, part)) << part << "\nin:\n" << html;
  }
  size_t links = 0;
  for (size_t at = html.find("<a href="); at != std::string::npos;
       at = html.find("<a href=", at + 1)) {
    ++links;
  }
  EXPECT_EQ(links, 4u);  // one per finding with a fixture; the out-of-memory one has none
  const std::string markdown = campaign_markdown(record);
  EXPECT_TRUE(contains(markdown, "(shrunk/paged-prefix-mismatch-1.json)")) << markdown;
  EXPECT_TRUE(contains(markdown,
                       "`kvfuzz explain corpus/regressions/crash-fork.json --engine "
                       "'exec:python3 my engine.py'`"))
      << markdown;
}

// The tick labels of one chart (the SVG after `title`), in order.
std::vector<std::string> tick_labels(const std::string& html, const std::string& title) {
  const size_t start = html.find(title);
  const size_t end = html.find("</svg>", start);
  std::vector<std::string> labels;
  const std::string open = "class=\"tick\">";
  for (size_t at = html.find(open, start); at < end; at = html.find(open, at + 1)) {
    const size_t from = at + open.size();
    labels.push_back(html.substr(from, html.find('<', from) - from));
  }
  return labels;
}

// Each axis has labelled ticks at round values: elapsed time in steps of 5 minutes over a
// 29-minute run, counts (features up to about 5,600) in steps of 2,000.
TEST(CampaignReport, AxesHaveTicksAtRoundValues) {
  const std::string html = campaign_html(reported_record());
  const std::vector<std::string> coverage = tick_labels(html, "Coverage and features");
  for (const char* label :
       {"0", "2,000", "4,000", "6,000", "0 s", "5m 00s", "10m 00s", "25m 00s"}) {
    EXPECT_NE(std::find(coverage.begin(), coverage.end(), label), coverage.end())
        << label << " among " << testing::PrintToString(coverage);
  }
  EXPECT_GE(coverage.size(), 6u);
  const std::vector<std::string> reached = tick_labels(html, "Cache-state events reached");
  EXPECT_NE(std::find(reached.begin(), reached.end(), "100"), reached.end());
  EXPECT_NE(std::find(reached.begin(), reached.end(), "20"), reached.end())
      << testing::PrintToString(reached);
}

// The y of every point of the polyline after `label`'s legend colour in the exec/s chart.
std::vector<double> series_heights(const std::string& html, const std::string& colour) {
  const size_t chart = html.find("Executions per second");
  const size_t line = html.find("stroke=\"" + colour + "\" points=\"", chart);
  std::vector<double> heights;
  if (line == std::string::npos) return heights;
  std::istringstream points(html.substr(html.find("points=\"", line) + 8));
  std::string point;
  while (points >> point && point.find(',') != std::string::npos) {
    heights.push_back(std::stod(point.substr(point.find(',') + 1)));
    if (point.back() == '"' || point.find('"') != std::string::npos) break;
  }
  return heights;
}

// Targets whose speeds differ a thousandfold both stay visible: exec/s is on a log scale,
// so the slow one is not flat on the zero line.
TEST(CampaignReport, ExecutionsPerSecondOfEveryTargetAreVisible) {
  CampaignRecord record;
  record.targets = {"fuzz_model", "fuzz_fixture"};
  for (int i = 0; i < 10; ++i) {
    CampaignSample slow = sample_at(i * 20.0, "fuzz_model", 0);
    slow.executions_per_second = 20;
    CampaignSample fast = sample_at(i * 20.0 + 10, "fuzz_fixture", 0);
    fast.executions_per_second = 20000;
    record.samples.push_back(slow);
    record.samples.push_back(fast);
  }
  const std::string html = campaign_html(record);
  EXPECT_TRUE(contains(html, "exec/s (log scale; 0 at the bottom)")) << html;
  const std::vector<double> slow = series_heights(html, "#1f77b4");
  const std::vector<double> fast = series_heights(html, "#d62728");
  ASSERT_FALSE(slow.empty());
  ASSERT_FALSE(fast.empty());
  constexpr double kBottom = 250;  // the plot's bottom edge in SVG units (top 30, height 220)
  // On a linear axis 20 of 20,000 would be 0.2 units above the bottom; on decades 10 to
  // 100,000 it is 0.3 of a decade (of four) up.
  EXPECT_LT(slow.front(), kBottom - 15) << "the slow target lies on the zero line";
  EXPECT_LT(fast.front(), slow.front() - 80) << "a thousandfold apart, clearly apart";
  const std::vector<std::string> ticks = tick_labels(html, "Executions per second");
  for (const char* decade : {"10", "100", "1,000", "10,000", "100,000"}) {
    EXPECT_NE(std::find(ticks.begin(), ticks.end(), decade), ticks.end())
        << decade << " among " << testing::PrintToString(ticks);
  }
}

TEST(CampaignReport, OneSampleIsStillPlotted) {
  CampaignRecord record;
  record.samples.push_back(sample_at(5, "fuzz_prefix", 0));
  const std::string html = campaign_html(record);
  EXPECT_TRUE(contains(html, "<svg"));
  EXPECT_TRUE(contains(html, "<circle"));
}

TEST(CampaignReport, EmptyRecord) {
  const CampaignRecord record;
  const std::string markdown = campaign_markdown(record);
  const std::string html = campaign_html(record);
  for (const std::string* report : {&markdown, &html}) {
    EXPECT_TRUE(contains(*report, "No samples yet.")) << *report;
    EXPECT_TRUE(contains(*report, "No findings.")) << *report;
    EXPECT_TRUE(contains(*report, "Cache states reached: 0 of")) << *report;
  }
  EXPECT_FALSE(contains(html, "<svg"));
}

}  // namespace
}  // namespace kvfuzz
