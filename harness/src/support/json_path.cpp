#include "support/json_path.h"

#include <algorithm>
#include <climits>
#include <limits>

#include "support/text.h"

namespace kvfuzz {

namespace {

constexpr size_t kDescribeBytes = 40;

std::string dump(const Json& value) {
  return value.dump(-1, ' ', false, Json::error_handler_t::replace);
}

// Compact rendering that stops early once it is longer than `limit`, so describing a huge
// array costs no more than describing a small one.
void render(const Json& value, std::string& out, size_t limit) {
  if (out.size() > limit) return;
  if (value.is_array()) {
    out += '[';
    bool first = true;
    for (const Json& element : value) {
      if (!first) out += ',';
      first = false;
      render(element, out, limit);
      if (out.size() > limit) return;
    }
    out += ']';
  } else if (value.is_object()) {
    out += '{';
    bool first = true;
    for (const auto& [key, element] : value.items()) {
      if (!first) out += ',';
      first = false;
      out += dump(Json(key));
      out += ':';
      render(element, out, limit);
      if (out.size() > limit) return;
    }
    out += '}';
  } else {
    out += dump(value);
  }
}

bool is_identifier(std::string_view key) {
  if (key.empty()) return false;
  for (size_t i = 0; i < key.size(); ++i) {
    const char c = key[i];
    const bool alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
    const bool digit = c >= '0' && c <= '9';
    if (!alpha && !(digit && i > 0)) return false;
  }
  return true;
}

}  // namespace

// ---------------------------------------------------------------------------------------
// JsonReport and the words of messages

std::string JsonReport::got(const Json* value, std::string_view) const {
  return value != nullptr ? describe_json(*value) : "nothing (the field is missing)";
}

std::string JsonReport::key_path(std::string_view parent, std::string_view key) const {
  if (keys_ == Keys::json_path) return path_key(parent, key);
  std::string path(parent);
  if (!path.empty()) path += '.';
  path += key;
  return path;
}

std::string describe_json(const Json& value) {
  std::string out;
  render(value, out, kDescribeBytes);
  return cut_bytes(std::move(out), kDescribeBytes);
}

std::string path_key(std::string_view parent, std::string_view key) {
  std::string path(parent);
  if (is_identifier(key)) {
    path += '.';
    path += key;
  } else {
    path += '[';
    path += cut_bytes(dump(Json(std::string(key))), kDescribeBytes);
    path += ']';
  }
  return path;
}

std::string path_index(std::string_view parent, size_t index) {
  std::string path(parent);
  path += '[';
  path += std::to_string(index);
  path += ']';
  return path;
}

std::string int_range_text(int64_t lo, int64_t hi) {
  if (lo <= INT_MIN && hi >= INT_MAX) return "an integer";
  if (lo == 0 && hi == std::numeric_limits<int64_t>::max()) return "a non-negative integer";
  return "an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]";
}

std::string choices_text(std::initializer_list<std::string_view> choices, bool quoted) {
  return choices_text(std::span(choices.begin(), choices.size()), quoted);
}

std::string choices_text(std::span<const std::string_view> choices, bool quoted) {
  std::string text = "one of ";
  bool first = true;
  for (std::string_view choice : choices) {
    if (!first) text += ", ";
    first = false;
    if (quoted) text += '"';
    text += choice;
    if (quoted) text += '"';
  }
  return text;
}

// ---------------------------------------------------------------------------------------
// JsonNode

void JsonNode::fail(std::string_view message) const {
  report_->fail(path_, message);
}

void JsonNode::expected(std::string_view what) const {
  std::string message = "expected ";
  message += what;
  message += ", got ";
  message += report_->got(value_, what);
  fail(message);
}

bool JsonNode::is_integer_in(int64_t lo, int64_t hi) const {
  if (value_ == nullptr) return false;
  if (value_->is_number_unsigned()) {
    const auto value = value_->get<uint64_t>();
    return hi >= 0 && value <= static_cast<uint64_t>(hi) && static_cast<int64_t>(value) >= lo;
  }
  if (value_->is_number_integer()) {
    const auto value = value_->get<int64_t>();
    return value >= lo && value <= hi;
  }
  return false;
}

int64_t JsonNode::to_int64(int64_t lo, int64_t hi) const {
  return to_int64(lo, hi, int_range_text(lo, hi));
}

int64_t JsonNode::to_int64(int64_t lo, int64_t hi, std::string_view what) const {
  if (!is_integer_in(lo, hi)) expected(what);
  return value_->is_number_unsigned() ? static_cast<int64_t>(value_->get<uint64_t>())
                                      : value_->get<int64_t>();
}

int JsonNode::to_int(int lo, int hi) const {
  return static_cast<int>(to_int64(lo, hi));
}

int JsonNode::to_int(int lo, int hi, std::string_view what) const {
  return static_cast<int>(to_int64(lo, hi, what));
}

uint64_t JsonNode::to_uint64() const {
  if (value_ != nullptr) {
    if (value_->is_number_unsigned()) return value_->get<uint64_t>();
    if (value_->is_number_integer() && value_->get<int64_t>() >= 0) {
      return static_cast<uint64_t>(value_->get<int64_t>());
    }
  }
  expected("an unsigned 64-bit integer in [0, 18446744073709551615]");
}

double JsonNode::to_number() const {
  if (value_ == nullptr || !value_->is_number()) expected("a number");
  return value_->get<double>();
}

bool JsonNode::to_bool() const {
  if (value_ == nullptr || !value_->is_boolean()) expected("true or false");
  return value_->get<bool>();
}

std::string JsonNode::to_string(size_t max_bytes) const {
  if (value_ == nullptr || !value_->is_string()) expected("a string");
  const auto& text = value_->get_ref<const Json::string_t&>();
  if (text.size() > max_bytes) {
    fail("expected a string of at most " + std::to_string(max_bytes) + " bytes, got " +
         std::to_string(text.size()) + " bytes");
  }
  return text;
}

std::string JsonNode::to_choice(std::initializer_list<std::string_view> choices) const {
  return to_choice(std::span(choices.begin(), choices.size()));
}

std::string JsonNode::to_choice(std::span<const std::string_view> choices) const {
  if (value_ != nullptr && value_->is_string()) {
    const auto& text = value_->get_ref<const Json::string_t&>();
    for (std::string_view choice : choices) {
      if (text == choice) return text;
    }
  }
  expected(choices_text(choices, true));
}

size_t JsonNode::array_size() const {
  if (value_ == nullptr || !value_->is_array()) expected("an array");
  return value_->size();
}

size_t JsonNode::array_size(size_t max_size, std::string_view what) const {
  if (value_ == nullptr || !value_->is_array()) expected("an array of " + std::string(what));
  if (value_->size() > max_size) {
    fail("expected at most " + std::to_string(max_size) + " " + std::string(what) + ", got " +
         std::to_string(value_->size()));
  }
  return value_->size();
}

void JsonNode::expect_array_of(size_t size, std::string_view elements) const {
  if (value_ == nullptr || !value_->is_array() || value_->size() != size) {
    expected("an array of " + std::to_string(size) + " " + std::string(elements));
  }
}

JsonNode JsonNode::at(size_t index) const {
  return JsonNode(&(*value_)[index], path_index(path_, index), *report_);
}

JsonNode JsonNode::field(std::string_view key) const {
  if (value_ == nullptr || !value_->is_object()) expected("an object");
  const auto found = value_->find(key);
  const Json* child = found == value_->end() ? nullptr : &*found;
  return JsonNode(child, report_->key_path(path_, key), *report_);
}

JsonObject JsonNode::to_object(std::initializer_list<std::string_view> fields,
                               std::string_view context) const {
  return to_object(std::span(fields.begin(), fields.size()), context);
}

JsonObject JsonNode::to_object(std::span<const std::string_view> fields,
                               std::string_view context) const {
  if (value_ == nullptr || !value_->is_object()) expected("an object");
  for (const auto& [key, value] : value_->items()) {
    if (std::find(fields.begin(), fields.end(), key) == fields.end()) {
      JsonNode(&value, report_->key_path(path_, key), *report_)
          .fail("unknown field; expected " + choices_text(fields, false) + std::string(context));
    }
  }
  return JsonObject(*this);
}

// ---------------------------------------------------------------------------------------
// JsonObject

bool JsonObject::has(std::string_view key) const {
  return node_.json().contains(key);
}

std::optional<JsonNode> JsonObject::get(std::string_view key) const {
  const auto it = node_.json().find(key);
  if (it == node_.json().end()) return std::nullopt;
  return JsonNode(&*it, node_.report().key_path(node_.path(), key), node_.report());
}

JsonNode JsonObject::need(std::string_view key, std::string_view what) const {
  if (auto node = get(key)) return *node;
  node_.report().fail(node_.report().key_path(node_.path(), key),
                      "missing; expected " + std::string(what));
}

int JsonObject::need_int(std::string_view key, int lo, int hi) const {
  return need(key, int_range_text(lo, hi)).to_int(lo, hi);
}

std::optional<int> JsonObject::get_int(std::string_view key, int lo, int hi) const {
  if (auto node = get(key)) return node->to_int(lo, hi);
  return std::nullopt;
}

std::string JsonObject::need_string(std::string_view key, size_t max_bytes) const {
  return need(key, "a string").to_string(max_bytes);
}

std::optional<std::string> JsonObject::get_string(std::string_view key, size_t max_bytes) const {
  if (auto node = get(key)) return node->to_string(max_bytes);
  return std::nullopt;
}

std::string JsonObject::need_choice(std::string_view key,
                                    std::initializer_list<std::string_view> choices) const {
  return need(key, choices_text(choices, true)).to_choice(choices);
}

}  // namespace kvfuzz
