// OUT/campaign.json: the campaign record on disk (campaign/campaign.h).
//
// The record is what lets a stopped campaign resume, so saving is atomic
// (support/atomic_file.h) and loading is strict (support/json_path.h): a field that is
// missing or has the wrong type is an error naming the file and the field, never a
// silently zeroed counter.
#include <array>
#include <cstdint>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>

#include "campaign/campaign.h"
#include "generate/events.h"
#include "support/atomic_file.h"
#include "support/json_path.h"
#include "support/text.h"

namespace kvfuzz {

namespace {

constexpr int kRecordVersion = 1;

// A campaign record's errors: std::runtime_error, one line, "FILE: PATH: MESSAGE", with
// paths as the record's own field names ("findings[2].kind", "event_hits.window-slide")
// and "(document)" for the whole of it.
class RecordReport final : public JsonReport {
 public:
  explicit RecordReport(const std::string& file) : JsonReport(Keys::dotted), file_(&file) {}

  std::exception_ptr error(const std::string& path, std::string_view message) const override {
    const std::string where = path.empty() ? "(document)" : path;
    return std::make_exception_ptr(
        std::runtime_error(escape_controls(*file_ + ": " + where + ": " + std::string(message))));
  }

 private:
  const std::string* file_;
};

using Field = JsonNode;

// The record's counters are checked against their C++ types only.
int64_t int64_of(const Field& field) {
  using Limits = std::numeric_limits<int64_t>;
  return field.to_int64(Limits::min(), Limits::max(), "a 64-bit integer");
}

int int_of(const Field& field) {
  using Limits = std::numeric_limits<int>;
  return field.to_int(Limits::min(), Limits::max(), "an integer in the int range");
}

// --- Writing -------------------------------------------------------------------------------

Json event_hits_json(const std::array<int64_t, kEventCount>& hits) {
  Json out = Json::object();
  for (int e = 0; e < kEventCount; ++e) {
    out[std::string(event_name(static_cast<Event>(e)))] = hits[static_cast<size_t>(e)];
  }
  return out;
}

// A '0'/'1' string: 193 booleans stay one short line instead of 193 array elements.
std::string cache_states_text(const std::vector<bool>& states) {
  std::string out;
  out.reserve(states.size());
  for (bool reached : states) out += reached ? '1' : '0';
  return out;
}

Json sample_json(const CampaignSample& sample) {
  return {{"elapsed_seconds", sample.elapsed_seconds},
          {"target", sample.target},
          {"executions", sample.executions},
          {"executions_per_second", sample.executions_per_second},
          {"coverage", sample.coverage},
          {"features", sample.features},
          {"events_reached", sample.events_reached},
          {"cache_states", sample.cache_states},
          {"failures", sample.failures}};
}

Json finding_json(const CampaignFinding& finding) {
  return {{"artifact", finding.artifact},
          {"target", finding.target},
          {"kind", finding.kind},
          {"signature", finding.signature},
          {"failure", finding.failure},
          {"fixture", finding.fixture},
          {"tokens_before", finding.tokens_before},
          {"tokens_after", finding.tokens_after},
          {"filed", finding.filed},
          {"duplicate_of", finding.duplicate_of},
          {"note", finding.note}};
}

Json corpus_json(const CampaignCorpus& corpus) {
  return {{"target", corpus.target},
          {"inputs_before", corpus.inputs_before},
          {"inputs_after", corpus.inputs_after}};
}

template <typename T, typename ToJson>
Json array_json(const std::vector<T>& items, ToJson to_json) {
  Json out = Json::array();
  for (const T& item : items) out.push_back(to_json(item));
  return out;
}

Json record_json(const CampaignRecord& record) {
  return {{"version", record.version},
          {"engine", record.engine},
          {"targets", record.targets},
          {"budget_seconds", record.budget_seconds},
          {"elapsed_seconds", record.elapsed_seconds},
          {"jobs", record.jobs},
          {"event_counters", record.event_counters},
          {"finished", record.finished},
          {"command", record.command},
          {"started", record.started},
          {"machine", record.machine},
          {"next_target", record.next_target},
          {"executions", record.executions},
          {"event_hits", event_hits_json(record.event_hits)},
          {"cache_states", cache_states_text(record.cache_states)},
          {"samples", array_json(record.samples, sample_json)},
          {"findings", array_json(record.findings, finding_json)},
          {"corpora", array_json(record.corpora, corpus_json)}};
}

// --- Reading -------------------------------------------------------------------------------

std::array<int64_t, kEventCount> read_event_hits(const Field& field) {
  std::array<int64_t, kEventCount> hits{};
  for (int e = 0; e < kEventCount; ++e) {
    hits[static_cast<size_t>(e)] = int64_of(field.field(event_name(static_cast<Event>(e))));
  }
  return hits;
}

std::vector<bool> read_cache_states(const Field& field) {
  const std::string text = field.to_string();
  const std::string what = "a string of " + std::to_string(kCacheStateCount) + " '0'/'1'";
  if (text.size() != static_cast<size_t>(kCacheStateCount)) field.expected(what);
  std::vector<bool> states;
  states.reserve(text.size());
  for (char c : text) {
    if (c != '0' && c != '1') field.expected(what);
    states.push_back(c == '1');
  }
  return states;
}

CampaignSample read_sample(const Field& field) {
  CampaignSample sample;
  sample.elapsed_seconds = field.field("elapsed_seconds").to_number();
  sample.target = field.field("target").to_string();
  sample.executions = int64_of(field.field("executions"));
  sample.executions_per_second = field.field("executions_per_second").to_number();
  sample.coverage = int64_of(field.field("coverage"));
  sample.features = int64_of(field.field("features"));
  sample.events_reached = int_of(field.field("events_reached"));
  sample.cache_states = int_of(field.field("cache_states"));
  sample.failures = int_of(field.field("failures"));
  return sample;
}

CampaignFinding read_finding(const Field& field) {
  CampaignFinding finding;
  finding.artifact = field.field("artifact").to_string();
  finding.target = field.field("target").to_string();
  finding.kind = field.field("kind").to_string();
  finding.signature = field.field("signature").to_string();
  finding.failure = field.field("failure").to_string();
  finding.fixture = field.field("fixture").to_string();
  finding.tokens_before = int_of(field.field("tokens_before"));
  finding.tokens_after = int_of(field.field("tokens_after"));
  finding.filed = field.field("filed").to_string();
  finding.duplicate_of = field.field("duplicate_of").to_string();
  finding.note = field.field("note").to_string();
  return finding;
}

CampaignCorpus read_corpus(const Field& field) {
  CampaignCorpus corpus;
  corpus.target = field.field("target").to_string();
  corpus.inputs_before = int64_of(field.field("inputs_before"));
  corpus.inputs_after = int64_of(field.field("inputs_after"));
  return corpus;
}

template <typename ReadOne>
auto read_array(const Field& field, ReadOne read_one) {
  std::vector<decltype(read_one(field))> items;
  const size_t size = field.array_size();
  items.reserve(size);
  for (size_t i = 0; i < size; ++i) items.push_back(read_one(field.at(i)));
  return items;
}

// The version comes first: a record from another kvfuzz version gets that as its error,
// not a complaint about whichever field happened to change.
void check_version(const Field& field) {
  field.field("version").to_int(
      kRecordVersion, kRecordVersion,
      std::to_string(kRecordVersion) + " (the record version this kvfuzz reads)");
}

CampaignRecord read_record(const Field& root) {
  check_version(root);
  CampaignRecord record;
  record.engine = root.field("engine").to_string();
  record.targets = read_array(root.field("targets"), [](const Field& f) { return f.to_string(); });
  record.budget_seconds = root.field("budget_seconds").to_number();
  record.elapsed_seconds = root.field("elapsed_seconds").to_number();
  record.jobs = int_of(root.field("jobs"));
  record.event_counters = root.field("event_counters").to_bool();
  record.finished = root.field("finished").to_bool();
  record.command = root.field("command").to_string();
  record.started = root.field("started").to_string();
  record.machine = root.field("machine").to_string();
  record.next_target = int_of(root.field("next_target"));
  record.executions = int64_of(root.field("executions"));
  record.event_hits = read_event_hits(root.field("event_hits"));
  record.cache_states = read_cache_states(root.field("cache_states"));
  record.samples = read_array(root.field("samples"), read_sample);
  record.findings = read_array(root.field("findings"), read_finding);
  record.corpora = read_array(root.field("corpora"), read_corpus);
  return record;
}

std::string read_text(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error(escape_controls(path.string() + ": cannot open for reading"));
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) throw std::runtime_error(escape_controls(path.string() + ": cannot read"));
  return text.str();
}

// nlohmann's message without its "[json.exception.parse_error.101] " prefix.
std::string parse_error_text(const Json::exception& error) {
  std::string message = error.what();
  if (const size_t bracket = message.find("] "); bracket != std::string::npos) {
    message.erase(0, bracket + 2);
  }
  return message;
}

}  // namespace

void save_campaign(const CampaignRecord& record, const std::filesystem::path& path) {
  try {
    write_file_atomically(
        path, record_json(record).dump(2, ' ', false, Json::error_handler_t::replace) + '\n');
  } catch (const FileWriteError& error) {
    throw std::runtime_error(
        escape_controls(path.string() + ": cannot write the record (" + error.reason() + ")"));
  }
}

CampaignRecord load_campaign(const std::filesystem::path& path) {
  const std::string file = path.string();
  const std::string text = read_text(path);
  const RecordReport report(file);
  try {
    const Json document = Json::parse(text);
    return read_record(Field(&document, "", report));
  } catch (const Json::parse_error& error) {
    report.fail("", "expected JSON, got " + parse_error_text(error));
  } catch (const Json::exception& error) {
    // Not expected (Field checks every type first); still an error naming the file.
    throw std::runtime_error(escape_controls(file + ": " + parse_error_text(error)));
  }
}

}  // namespace kvfuzz
