// OUT/campaign.json: the campaign record on disk (campaign/campaign.h).
//
// The record is what lets a stopped campaign resume, so saving is atomic (a temporary file
// renamed over the old one) and loading is strict: a field that is missing or has the wrong
// type is an error naming the file and the field, never a silently zeroed counter.
#include <array>
#include <cstdint>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>

#include "campaign/campaign.h"
#include "generate/events.h"

namespace kvfuzz {

namespace {

using Json = nlohmann::json;

constexpr int kRecordVersion = 1;
constexpr size_t kDescribeBytes = 40;  // how much of a bad value an error message quotes

// Error messages are one line whatever the file name or the bad value holds.
std::string one_line(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else {
      out += c;
    }
  }
  return out;
}

// A short rendering of a JSON value for "got ...". dump() escapes control characters, and
// `replace` keeps invalid UTF-8 from throwing in the middle of reporting another error.
std::string describe(const Json& value) {
  std::string text = value.dump(-1, ' ', false, Json::error_handler_t::replace);
  if (text.size() > kDescribeBytes) {
    size_t cut = kDescribeBytes - 3;
    while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0u) == 0x80u) --cut;
    text.resize(cut);
    text += "...";
  }
  return text;
}

// One value of the document with its path ("findings[2].kind"), or a missing field. Every
// conversion checks the JSON type first, so nlohmann never throws type errors from here.
class Field {
 public:
  Field(const Json* value, std::string path, const std::string& file)
      : value_(value), path_(std::move(path)), file_(&file) {}

  [[noreturn]] void expected(std::string_view what) const {
    const std::string got = value_ ? describe(*value_) : "nothing (the field is missing)";
    const std::string where = path_.empty() ? "(document)" : path_;
    throw std::runtime_error(
        one_line(*file_ + ": " + where + ": expected " + std::string(what) + ", got " + got));
  }

  Field operator[](std::string_view key) const {
    if (!value_ || !value_->is_object()) expected("an object");
    const auto found = value_->find(key);
    const Json* child = found == value_->end() ? nullptr : &*found;
    return Field(child, path_.empty() ? std::string(key) : path_ + "." + std::string(key), *file_);
  }

  size_t array_size() const {
    if (!value_ || !value_->is_array()) expected("an array");
    return value_->size();
  }

  Field at(size_t index) const {
    return Field(&(*value_)[index], path_ + "[" + std::to_string(index) + "]", *file_);
  }

  std::string to_string() const {
    if (!value_ || !value_->is_string()) expected("a string");
    return value_->get<std::string>();
  }

  bool to_bool() const {
    if (!value_ || !value_->is_boolean()) expected("true or false");
    return value_->get<bool>();
  }

  double to_double() const {
    if (!value_ || !value_->is_number()) expected("a number");
    return value_->get<double>();
  }

  // An integer in [lo, hi] (hi >= 0). nlohmann parses every non-negative integer as
  // unsigned; those are compared as unsigned, so 2^64 - 1 is too large rather than -1.
  bool is_integer_in(int64_t lo, int64_t hi) const {
    if (!value_ || !value_->is_number_integer()) return false;
    if (value_->is_number_unsigned()) {
      const uint64_t value = value_->get<uint64_t>();
      return value <= static_cast<uint64_t>(hi) && (lo <= 0 || value >= static_cast<uint64_t>(lo));
    }
    const int64_t value = value_->get<int64_t>();
    return value >= lo && value <= hi;
  }

  int64_t to_int64() const {
    using Limits = std::numeric_limits<int64_t>;
    if (!is_integer_in(Limits::min(), Limits::max())) expected("a 64-bit integer");
    return value_->get<int64_t>();
  }

  int to_int() const {
    using Limits = std::numeric_limits<int>;
    if (!is_integer_in(Limits::min(), Limits::max())) expected("an integer in the int range");
    return value_->get<int>();
  }

 private:
  const Json* value_;
  std::string path_;
  const std::string* file_;
};

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
    hits[static_cast<size_t>(e)] = field[event_name(static_cast<Event>(e))].to_int64();
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
  sample.elapsed_seconds = field["elapsed_seconds"].to_double();
  sample.target = field["target"].to_string();
  sample.executions = field["executions"].to_int64();
  sample.executions_per_second = field["executions_per_second"].to_double();
  sample.coverage = field["coverage"].to_int64();
  sample.features = field["features"].to_int64();
  sample.events_reached = field["events_reached"].to_int();
  sample.cache_states = field["cache_states"].to_int();
  sample.failures = field["failures"].to_int();
  return sample;
}

CampaignFinding read_finding(const Field& field) {
  CampaignFinding finding;
  finding.artifact = field["artifact"].to_string();
  finding.target = field["target"].to_string();
  finding.kind = field["kind"].to_string();
  finding.signature = field["signature"].to_string();
  finding.failure = field["failure"].to_string();
  finding.fixture = field["fixture"].to_string();
  finding.tokens_before = field["tokens_before"].to_int();
  finding.tokens_after = field["tokens_after"].to_int();
  finding.filed = field["filed"].to_string();
  finding.duplicate_of = field["duplicate_of"].to_string();
  finding.note = field["note"].to_string();
  return finding;
}

CampaignCorpus read_corpus(const Field& field) {
  CampaignCorpus corpus;
  corpus.target = field["target"].to_string();
  corpus.inputs_before = field["inputs_before"].to_int64();
  corpus.inputs_after = field["inputs_after"].to_int64();
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
  const Field version = field["version"];
  if (!version.is_integer_in(kRecordVersion, kRecordVersion)) {
    version.expected(std::to_string(kRecordVersion) + " (the record version this kvfuzz reads)");
  }
}

CampaignRecord read_record(const Field& root) {
  check_version(root);
  CampaignRecord record;
  record.engine = root["engine"].to_string();
  record.targets = read_array(root["targets"], [](const Field& f) { return f.to_string(); });
  record.budget_seconds = root["budget_seconds"].to_double();
  record.elapsed_seconds = root["elapsed_seconds"].to_double();
  record.jobs = root["jobs"].to_int();
  record.event_counters = root["event_counters"].to_bool();
  record.finished = root["finished"].to_bool();
  record.command = root["command"].to_string();
  record.started = root["started"].to_string();
  record.machine = root["machine"].to_string();
  record.next_target = root["next_target"].to_int();
  record.executions = root["executions"].to_int64();
  record.event_hits = read_event_hits(root["event_hits"]);
  record.cache_states = read_cache_states(root["cache_states"]);
  record.samples = read_array(root["samples"], read_sample);
  record.findings = read_array(root["findings"], read_finding);
  record.corpora = read_array(root["corpora"], read_corpus);
  return record;
}

std::string read_text(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error(one_line(path.string() + ": cannot open for reading"));
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) throw std::runtime_error(one_line(path.string() + ": cannot read"));
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
  if (path.has_parent_path()) std::filesystem::create_directories(path.parent_path());
  std::filesystem::path temporary = path;
  temporary += ".tmp";
  {
    std::ofstream out(temporary, std::ios::binary | std::ios::trunc);
    out << record_json(record).dump(2, ' ', false, Json::error_handler_t::replace) << '\n';
    out.close();
    if (!out) {
      throw std::runtime_error(one_line(temporary.string() + ": cannot write the record"));
    }
  }
  // rename() replaces the old record in one step: a reader sees the old or the new one.
  std::error_code error;
  std::filesystem::rename(temporary, path, error);
  if (error) {
    const std::string reason = error.message();
    std::filesystem::remove(temporary, error);  // best effort; the rename error is the news
    throw std::runtime_error(one_line(path.string() + ": cannot replace the record: " + reason));
  }
}

CampaignRecord load_campaign(const std::filesystem::path& path) {
  const std::string file = path.string();
  const std::string text = read_text(path);
  try {
    const Json document = Json::parse(text);
    return read_record(Field(&document, "", file));
  } catch (const Json::parse_error& error) {
    throw std::runtime_error(
        one_line(file + ": (document): expected JSON, got " + parse_error_text(error)));
  } catch (const Json::exception& error) {
    // Not expected (Field checks every type first); still an error naming the file.
    throw std::runtime_error(one_line(file + ": " + parse_error_text(error)));
  }
}

}  // namespace kvfuzz
