// JSON as the engine protocol writes and reads it (docs/engine-protocol.md).
//
// Writing: every float kvfuzz sends is the shortest decimal that reads back as the same
// double, and every input value is an f32 (already rounded to the storage dtype), so an
// engine that parses the text as double or as float32 gets exactly kvfuzz's value.
//
// Reading: strict JSON (nlohmann), plus the bare tokens NaN, Infinity and -Infinity that
// Python's json.dumps writes for non-finite floats by default. An engine that computes a
// NaN must produce a finding (not_finite, a wrong value), not a protocol error.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace kvfuzz::doors {

// Appends `value` as a JSON number (NaN, Infinity or -Infinity, as Python writes them,
// for the non-finite values, which kvfuzz's own inputs never hold).
void append_number(std::string& out, double value);

// Parses one reply line. The non-finite tokens outside strings become the strings "NaN",
// "Infinity" and "-Infinity", which read_number() reads back. Throws EngineError naming
// the request (`what`), the byte where parsing stopped and an excerpt of the line.
nlohmann::json parse_reply_line(std::string_view line, std::string_view what);

// A number of an output row: a JSON number; "NaN", "Infinity", "-Infinity" (bare or as
// strings); or null, which JavaScript's JSON.stringify writes for every non-finite value
// and is read as NaN. Anything else is no number.
bool read_number(const nlohmann::json& value, double& out);

}  // namespace kvfuzz::doors
