// The fixture parser's strict JSON reading, private to the fixture library: what makes a
// fixture's JSON stricter than a campaign record's or an engine reply's.
//
// parse_document() turns text into a DOM after guarding against hostile input (size,
// nesting depth, duplicate keys); the fixture is then read field by field with the one
// JSON reader (support/json_path.h) under FixtureReport, whose errors are FixtureError as
// one line, "ORIGIN: $.json.path: expected ..., got ...". Unknown fields are refused by
// reading every object with JsonNode::to_object().
#pragma once

#include <string>
#include <string_view>

#include "support/json_path.h"

namespace kvfuzz::json_reader {

// Parses `text` into a DOM. Throws FixtureError ("ORIGIN: line L, column C: ...") for
// input over limits::kMaxFixtureBytes, nesting deeper than limits::kMaxJsonDepth
// (checked before the parser runs), invalid JSON and duplicate object keys.
Json parse_document(std::string_view text, std::string_view origin);

// The error line "ORIGIN: WHERE: MESSAGE", with every control character escaped so the
// line never breaks.
std::string error_line(std::string_view origin, std::string_view where, std::string_view message);

// A fixture's errors: FixtureError(error_line(ORIGIN, PATH, MESSAGE)), paths as JSON
// paths from "$", and a float where an integer was expected explained.
class FixtureReport final : public JsonReport {
 public:
  // `origin` must outlive the report.
  explicit FixtureReport(std::string_view origin) : origin_(origin) {}

  std::exception_ptr error(const std::string& path, std::string_view message) const override;
  std::string got(const Json* value, std::string_view expected) const override;

 private:
  std::string_view origin_;
};

}  // namespace kvfuzz::json_reader
