#include "doors/exec_protocol.h"

#include <algorithm>
#include <limits>
#include <nlohmann/json.hpp>
#include <string_view>
#include <utility>

#include "doors/exec_json.h"
#include "doors/exec_text.h"
#include "support/utf8_text.h"

namespace kvfuzz::external {

namespace {

using nlohmann::json;
using Ordered = nlohmann::ordered_json;

// What a reply value is, for "expected X, got Y".
std::string describe(const json* value) {
  if (value == nullptr) return "nothing (the field is missing)";
  switch (value->type()) {
    case json::value_t::array:
      return "an array of " + std::to_string(value->size());
    case json::value_t::object:
      return "an object";
    case json::value_t::string:
      return "the string " + quote_excerpt(value->get_ref<const std::string&>());
    case json::value_t::boolean:
      return value->get<bool>() ? "true" : "false";
    case json::value_t::null:
      return "null";
    default:
      return "the number " + value->dump();
  }
}

[[noreturn]] void wrong(std::string_view what, const std::string& path, const std::string& expected,
                        const json* got) {
  throw EngineError("the engine's answer to " + std::string(what) + " does not follow protocol " +
                    std::to_string(kProtocolVersion) + ": " + path + ": expected " + expected +
                    ", got " + describe(got));
}

const json* member(const json& object, const char* key) {
  const auto it = object.find(key);
  return it == object.end() ? nullptr : &*it;
}

// The engine's own text (its error, its name), kept to one line of valid UTF-8 and
// reasonable length: nlohmann has checked the UTF-8 of a parsed string, but a cut in
// bytes could split a character and the text may hold any control character.
std::string one_line(std::string_view text) {
  constexpr size_t kMostCharacters = 500;
  SafeText line = safe_utf8(text, Controls::blank, kMostCharacters);
  if (line.used < text.size()) line.text += "...";
  return std::move(line.text);
}

// Every reply: an object whose "ok" is true. {"ok": false} throws the engine's message.
void require_ok(const json& reply, std::string_view what, std::string_view refusal_prefix) {
  if (!reply.is_object()) wrong(what, "$", "a JSON object", &reply);
  const json* ok = member(reply, "ok");
  if (ok == nullptr || !ok->is_boolean()) wrong(what, "$.ok", "true or false", ok);
  if (ok->get<bool>()) return;
  const json* error = member(reply, "error");
  const std::string message = error != nullptr && error->is_string()
                                  ? one_line(error->get_ref<const std::string&>())
                                  : "(no error message: \"error\" should hold a string)";
  throw EngineError(std::string(refusal_prefix) + message);
}

// An array of exactly `size` elements at `path`.
const json& array_of(const json* value, size_t size, std::string_view what, const std::string& path,
                     const std::string& elements) {
  if (value == nullptr || !value->is_array() || value->size() != size) {
    wrong(what, path, "an array of " + std::to_string(size) + " " + elements, value);
  }
  return *value;
}

std::string at(const std::string& path, size_t index) {
  return path + "[" + std::to_string(index) + "]";
}

// The request is written from a chunk's spans: sizes that do not match its tokens and the
// layout are refused before anything is read from them.
void check_sizes(const ChunkIn& c, const Layout& layout) {
  const auto n = [](int value) { return static_cast<size_t>(std::max(0, value)); };
  const size_t tokens = n(c.tokens);
  if (c.tokens < 0 || c.q.size() != tokens * n(layout.q_heads) * n(layout.head_dim) ||
      c.k.size() != tokens * n(layout.kv_heads) * n(layout.head_dim) ||
      c.v.size() != tokens * n(layout.kv_heads) * n(layout.value_dim)) {
    throw EngineError("step: the q/k/v sizes of sequence " + std::to_string(c.seq) + " (" +
                      std::to_string(c.q.size()) + ", " + std::to_string(c.k.size()) + ", " +
                      std::to_string(c.v.size()) + " values) do not match " +
                      std::to_string(c.tokens) + " tokens of the layout");
  }
}

// values[token][head][dim] of one chunk, token-major, as in ChunkIn; check_sizes() has
// made sure that they are all there.
void append_tensor(std::string& out, std::span<const float> values, int tokens, int heads,
                   int dim) {
  size_t i = 0;
  out += '[';
  for (int t = 0; t < tokens; ++t) {
    out += t ? ",[" : "[";
    for (int h = 0; h < heads; ++h) {
      out += h ? ",[" : "[";
      for (int d = 0; d < dim; ++d) {
        if (d) out += ',';
        append_number(out, static_cast<double>(values[i++]));
      }
      out += ']';
    }
    out += ']';
  }
  out += ']';
}

void read_positions(const json& result, const ChunkIn& chunk, const std::string& path,
                    ChunkOut& out) {
  const auto tokens = static_cast<size_t>(chunk.tokens);
  const json& positions = array_of(member(result, "positions"), tokens, "step", path + ".positions",
                                   "integers (one position per token)");
  out.positions.resize(tokens);
  for (size_t t = 0; t < tokens; ++t) {
    const json& p = positions[t];
    const bool fits =
        p.is_number_integer() &&
        (!p.is_number_unsigned() ||
         p.get<uint64_t>() <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max()));
    if (!fits) wrong("step", at(path + ".positions", t), "an integer", &p);
    out.positions[t] = p.get<int64_t>();
  }
}

bool is_array_of(const json& value, size_t size) {
  return value.is_array() && value.size() == size;
}

// Paths are built only when something is wrong: this loop runs over every output value.
void read_rows(const json& result, const ChunkIn& chunk, const Layout& layout,
               const std::string& path, ChunkOut& out) {
  const auto tokens = static_cast<size_t>(chunk.tokens);
  const auto heads = static_cast<size_t>(layout.q_heads);
  const auto dim = static_cast<size_t>(layout.value_dim);
  const std::string rows_path = path + ".out";
  const json& rows =
      array_of(member(result, "out"), tokens, "step", rows_path, "rows (one per token)");
  out.out.resize(tokens * heads * dim);
  size_t i = 0;
  for (size_t t = 0; t < tokens; ++t) {
    const json& row = rows[t];
    if (!is_array_of(row, heads)) {
      wrong("step", at(rows_path, t),
            "an array of " + std::to_string(heads) + " heads (q_heads), each of value_dim numbers",
            &row);
    }
    for (size_t h = 0; h < heads; ++h) {
      const json& head = row[h];
      if (!is_array_of(head, dim)) {
        wrong("step", at(at(rows_path, t), h),
              "an array of " + std::to_string(dim) + " numbers (value_dim)", &head);
      }
      for (size_t d = 0; d < dim; ++d) {
        double value = 0;
        if (!read_number(head[d], value)) {
          wrong("step", at(at(at(rows_path, t), h), d), "a number (or NaN, Infinity, -Infinity)",
                &head[d]);
        }
        out.out[i++] = static_cast<float>(value);
      }
    }
  }
}

}  // namespace

std::string hello_request(const EngineConfig& config) {
  const Layout& l = config.layout;
  Ordered layout = {{"q_heads", l.q_heads},       {"kv_heads", l.kv_heads},
                    {"head_dim", l.head_dim},     {"value_dim", l.value_dim},
                    {"page_size", l.page_size},   {"dtype", std::string(dtype_name(l.dtype))},
                    {"scale", l.softmax_scale()}, {"rope_theta", nullptr},
                    {"window", nullptr}};
  if (l.rope_theta) layout["rope_theta"] = *l.rope_theta;
  if (l.window) layout["window"] = *l.window;
  const Ordered hello = {{"op", "hello"},
                         {"protocol", kProtocolVersion},
                         {"layout", layout},
                         {"sequences", config.sequences},
                         {"page_order", config.page_order},
                         {"poison", std::string(poison_name(config.poison))}};
  return hello.dump();
}

std::string step_request(std::span<const ChunkIn> chunks, const Layout& layout) {
  std::string out;
  size_t values = 0;
  for (const ChunkIn& c : chunks) {
    check_sizes(c, layout);
    values += c.q.size() + c.k.size() + c.v.size();
  }
  out.reserve(64 + 16 * values);
  out += R"({"op":"step","chunks":[)";
  for (size_t c = 0; c < chunks.size(); ++c) {
    const ChunkIn& chunk = chunks[c];
    if (c) out += ',';
    out += R"({"seq":)" + std::to_string(chunk.seq) + R"(,"q":)";
    append_tensor(out, chunk.q, chunk.tokens, layout.q_heads, layout.head_dim);
    out += R"(,"k":)";
    append_tensor(out, chunk.k, chunk.tokens, layout.kv_heads, layout.head_dim);
    out += R"(,"v":)";
    append_tensor(out, chunk.v, chunk.tokens, layout.kv_heads, layout.value_dim);
    out += '}';
  }
  out += "]}";
  return out;
}

std::string reset_request(int seq) {
  return Ordered{{"op", "reset"}, {"seq", seq}}.dump();
}

std::string truncate_request(int seq, int64_t keep) {
  return Ordered{{"op", "truncate"}, {"seq", seq}, {"keep", keep}}.dump();
}

std::string fork_request(int src, int dst) {
  return Ordered{{"op", "fork"}, {"src", src}, {"dst", dst}}.dump();
}

HelloReply read_hello_reply(std::string_view line) {
  const json reply = parse_reply_line(line, "hello");
  require_ok(reply, "hello", "the engine refused hello: ");
  const json* protocol = member(reply, "protocol");
  if (protocol == nullptr || !protocol->is_number_integer()) {
    wrong("hello", "$.protocol", "the integer " + std::to_string(kProtocolVersion), protocol);
  }
  if (protocol->get<int64_t>() != kProtocolVersion) {
    throw EngineError("the engine speaks protocol " + protocol->dump() + "; this kvfuzz speaks " +
                      std::to_string(kProtocolVersion) + " (docs/engine-protocol.md)");
  }
  HelloReply hello;
  const json* name = member(reply, "name");
  if (name == nullptr || !name->is_string() || name->get_ref<const std::string&>().empty()) {
    wrong("hello", "$.name", "the engine's name, a non-empty string", name);
  }
  hello.name = one_line(name->get_ref<const std::string&>());
  const json* capabilities = member(reply, "capabilities");
  if (capabilities == nullptr) return hello;  // neither truncate nor fork
  if (!capabilities->is_object()) {
    wrong("hello", "$.capabilities", R"(an object such as {"truncate": true, "fork": false})",
          capabilities);
  }
  const auto flag = [&](const char* key, bool& out) {
    const json* value = member(*capabilities, key);
    if (value == nullptr) return;  // not announced: not supported
    if (!value->is_boolean()) {
      wrong("hello", std::string("$.capabilities.") + key, "true or false", value);
    }
    out = value->get<bool>();
  };
  flag("truncate", hello.capabilities.truncate);
  flag("fork", hello.capabilities.fork);
  return hello;
}

void read_step_reply(std::string_view line, std::span<const ChunkIn> chunks, const Layout& layout,
                     std::span<ChunkOut> outs) {
  const json reply = parse_reply_line(line, "step");
  require_ok(reply, "step", "");
  const json& results = array_of(member(reply, "chunks"), chunks.size(), "step", "$.chunks",
                                 "chunk results (one per chunk of the request, in its order)");
  for (size_t c = 0; c < chunks.size(); ++c) {
    const std::string path = at("$.chunks", c);
    const json& result = results[c];
    if (!result.is_object()) {
      wrong("step", path, R"(an object {"positions": [...], "out": [...]})", &result);
    }
    read_positions(result, chunks[c], path, outs[c]);
    read_rows(result, chunks[c], layout, path, outs[c]);
  }
}

void read_done_reply(std::string_view line, std::string_view what) {
  require_ok(parse_reply_line(line, what), what, "");
}

size_t step_reply_limit(std::span<const ChunkIn> chunks, const Layout& layout) {
  size_t tokens = 0;
  for (const ChunkIn& c : chunks) tokens += static_cast<size_t>(c.tokens);
  const size_t values =
      tokens * static_cast<size_t>(layout.q_heads) * static_cast<size_t>(layout.value_dim);
  // A double prints in at most 24 characters; 64 per value and per token leave room for
  // separators, brackets, spaces and the positions.
  return kSmallReplyLimit + 64 * (values + tokens);
}

}  // namespace kvfuzz::external
