#include "doors/exec_protocol.h"

#include <algorithm>
#include <climits>
#include <initializer_list>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "doors/exec_json.h"
#include "kvfuzz/dtype.h"
#include "support/json_path.h"
#include "support/text.h"

namespace kvfuzz::doors {

namespace {

using Ordered = nlohmann::ordered_json;

// A reply's errors: EngineError naming the request, the JSON path and what was expected,
// and what the engine sent described in words ("the string 'x'", "an array of 3").
class ReplyReport final : public JsonReport {
 public:
  ReplyReport(std::string_view what, int protocol) : what_(what), protocol_(protocol) {}

  std::exception_ptr error(const std::string& path, std::string_view message) const override {
    return std::make_exception_ptr(
        EngineError("the engine's answer to " + std::string(what_) + " does not follow protocol " +
                    std::to_string(protocol_) + ": " + path + ": " + std::string(message)));
  }

  std::string got(const Json* value, std::string_view) const override {
    if (value == nullptr) return "nothing (the field is missing)";
    switch (value->type()) {
      case Json::value_t::array:
        return "an array of " + std::to_string(value->size());
      case Json::value_t::object:
        return "an object";
      case Json::value_t::string:
        return "the string " + quote_excerpt(value->get_ref<const std::string&>());
      case Json::value_t::boolean:
        return value->get<bool>() ? "true" : "false";
      case Json::value_t::null:
        return "null";
      default:
        return "the number " + value->dump();
    }
  }

 private:
  std::string_view what_;
  int protocol_;
};

// The engine's own text (its error, its name), kept to one line of valid UTF-8 and
// reasonable length: nlohmann has checked the UTF-8 of a parsed string, but a cut in
// bytes could split a character and the text may hold any control character.
std::string engine_text(std::string_view text) {
  constexpr size_t kMostCharacters = 500;
  return one_line(text, kMostCharacters);
}

// Every reply: an object whose "ok" is true. {"ok": false} throws the engine's message.
void require_ok(const JsonNode& reply, std::string_view refusal_prefix) {
  if (!reply.json().is_object()) reply.expected("a JSON object");
  if (reply.field("ok").to_bool()) return;
  const JsonNode error = reply.field("error");
  const std::string message = error.present() && error.json().is_string()
                                  ? engine_text(error.json().get_ref<const std::string&>())
                                  : "(no error message: \"error\" should hold a string)";
  throw EngineError(std::string(refusal_prefix) + message);
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

void read_positions(const JsonNode& result, const ChunkIn& chunk, ChunkOut& out) {
  const auto tokens = static_cast<size_t>(chunk.tokens);
  const JsonNode positions = result.field("positions");
  positions.expect_array_of(tokens, "integers (one position per token)");
  out.positions.resize(tokens);
  using Limits = std::numeric_limits<int64_t>;
  for (size_t t = 0; t < tokens; ++t) {
    out.positions[t] = positions.at(t).to_int64(Limits::min(), Limits::max(), "an integer");
  }
}

bool is_array_of(const Json& value, size_t size) {
  return value.is_array() && value.size() == size;
}

// Nodes (and their paths) are made only when something is wrong: this loop runs over
// every output value.
void read_rows(const JsonNode& result, const ChunkIn& chunk, const Layout& layout, ChunkOut& out) {
  const auto tokens = static_cast<size_t>(chunk.tokens);
  const auto heads = static_cast<size_t>(layout.q_heads);
  const auto dim = static_cast<size_t>(layout.value_dim);
  const JsonNode rows = result.field("out");
  rows.expect_array_of(tokens, "rows (one per token)");
  out.out.resize(tokens * heads * dim);
  size_t i = 0;
  for (size_t t = 0; t < tokens; ++t) {
    const Json& row = rows.json()[t];
    if (!is_array_of(row, heads)) {
      rows.at(t).expected("an array of " + std::to_string(heads) +
                          " heads (q_heads), each of value_dim numbers");
    }
    for (size_t h = 0; h < heads; ++h) {
      const Json& head = row[h];
      if (!is_array_of(head, dim)) {
        rows.at(t).at(h).expected("an array of " + std::to_string(dim) + " numbers (value_dim)");
      }
      for (size_t d = 0; d < dim; ++d) {
        double value = 0;
        if (!read_number(head[d], value)) {
          rows.at(t).at(h).at(d).expected("a number (or NaN, Infinity, -Infinity)");
        }
        out.out[i++] = static_cast<float>(value);
      }
    }
  }
}

// A dtype named as dtype_name() writes it, one of `names` (not every dtype fits every field).
DType read_dtype(const JsonNode& node, std::initializer_list<std::string_view> names) {
  return *parse_dtype(node.to_choice(names));
}

// hello's optional "numerics" object. Unlike the flags of "capabilities", an unknown field
// is refused: a misspelt declaration would otherwise be judged as no declaration.
EngineNumerics read_numerics(const JsonNode& reply) {
  EngineNumerics numerics;
  const JsonNode node = reply.field("numerics");
  if (!node.present()) return numerics;
  if (!node.json().is_object()) node.expected(R"(an object such as {"output": "bf16"})");
  const JsonObject object = node.to_object({"output", "p", "score_accumulation",
                                            "value_accumulation", "rotated_keys_in_storage",
                                            "rotated_queries_in_storage", "rope_angles_exact"});
  if (const auto output = object.get("output")) {
    numerics.output = read_dtype(*output, {"f32", "f16", "bf16"});
  }
  if (const auto p = object.get("p")) {
    const std::string name = p->to_choice({"none", "f16", "bf16"});
    numerics.p = name == "none" ? std::nullopt : parse_dtype(name);
  }
  if (const auto score = object.get("score_accumulation")) {
    numerics.score_accumulation = read_dtype(*score, {"f32", "f16"});
  }
  if (const auto value = object.get("value_accumulation")) {
    numerics.value_accumulation = read_dtype(*value, {"f32", "f16"});
  }
  if (const auto rotated = object.get("rotated_keys_in_storage")) {
    numerics.rotated_keys_in_storage = rotated->to_bool();
  }
  if (const auto rotated = object.get("rotated_queries_in_storage")) {
    numerics.rotated_queries_in_storage = rotated->to_bool();
  }
  if (const auto exact = object.get("rope_angles_exact")) {
    numerics.rope_angles_exact = exact->to_bool();
  }
  return numerics;
}

// hello's optional "supports" object, as strict as "numerics".
EngineSupports read_supports(const JsonNode& reply) {
  EngineSupports supports;
  const JsonNode node = reply.field("supports");
  if (!node.present()) return supports;
  if (!node.json().is_object()) node.expected(R"(an object such as {"dtypes": ["f16"]})");
  const JsonObject object =
      node.to_object({"dtypes", "head_dim_multiple", "max_head_dim", "max_q_heads", "max_context",
                      "value_dim_is_head_dim", "rope_required", "windows"});
  if (const auto same = object.get("value_dim_is_head_dim")) {
    supports.value_dim_is_head_dim = same->to_bool();
  }
  if (const auto rope = object.get("rope_required")) supports.rope_required = rope->to_bool();
  if (const auto windows = object.get("windows")) supports.windows = windows->to_bool();
  if (const auto dtypes = object.get("dtypes")) {
    const char* what = R"(a non-empty array of storage dtypes such as ["f16", "bf16"])";
    if (!dtypes->json().is_array() || dtypes->json().empty()) dtypes->expected(what);
    supports.dtypes.clear();
    for (size_t i = 0; i < dtypes->json().size(); ++i) {
      const JsonNode element = dtypes->at(i);
      const DType dtype = read_dtype(element, {"f32", "f16", "bf16"});
      if (std::ranges::find(supports.dtypes, dtype) != supports.dtypes.end()) {
        element.fail("\"" + std::string(dtype_name(dtype)) +
                     "\" is listed twice; expected each dtype once");
      }
      supports.dtypes.push_back(dtype);
    }
  }
  const std::pair<const char*, int*> limits[] = {{"head_dim_multiple", &supports.head_dim_multiple},
                                                 {"max_head_dim", &supports.max_head_dim},
                                                 {"max_q_heads", &supports.max_q_heads},
                                                 {"max_context", &supports.max_context}};
  for (const auto& [key, out] : limits) {
    if (const auto limit = object.get(key)) *out = limit->to_int(1, INT_MAX, "a positive integer");
  }
  return supports;
}

}  // namespace

namespace {

// What hello and new_case say of a case, after `request`'s own fields: its layout,
// sequences and placement.
std::string case_request(Ordered request, const EngineConfig& config) {
  const Layout& l = config.layout;
  Ordered layout = {{"q_heads", l.q_heads},       {"kv_heads", l.kv_heads},
                    {"head_dim", l.head_dim},     {"value_dim", l.value_dim},
                    {"page_size", l.page_size},   {"dtype", std::string(dtype_name(l.dtype))},
                    {"scale", l.softmax_scale()}, {"rope_theta", nullptr},
                    {"window", nullptr}};
  if (l.rope_theta) layout["rope_theta"] = *l.rope_theta;
  if (l.window) layout["window"] = *l.window;
  request["layout"] = layout;
  request["sequences"] = config.sequences;
  request["page_order"] = config.page_order;
  request["poison"] = std::string(poison_name(config.poison));
  return request.dump();
}

}  // namespace

std::string hello_request(const EngineConfig& config, int newest) {
  Ordered hello = {{"op", "hello"}, {"protocol", kOldestProtocol}};
  if (newest > kOldestProtocol) {
    std::vector<int> offered;
    for (int v = kOldestProtocol; v <= newest; ++v) offered.push_back(v);
    hello["protocols"] = offered;
  }
  return case_request(std::move(hello), config);
}

std::string new_case_request(const EngineConfig& config) {
  return case_request(Ordered{{"op", "new_case"}}, config);
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

namespace {

// Versions kOldestProtocol .. newest, in words: "1", "1 and 2".
std::string versions_text(int newest) {
  std::string text = std::to_string(kOldestProtocol);
  for (int v = kOldestProtocol + 1; v <= newest; ++v) {
    text += (v == newest ? " and " : ", ") + std::to_string(v);
  }
  return text;
}

// The reply's "protocol": an integer, one of the versions offered.
int read_protocol(const JsonNode& reply, int newest) {
  const JsonNode protocol = reply.field("protocol");
  if (!protocol.present() || !protocol.json().is_number_integer()) {
    protocol.expected(newest == kOldestProtocol ? "the integer " + std::to_string(kOldestProtocol)
                                                : "the integer of a version this kvfuzz speaks (" +
                                                      versions_text(newest) + ")");
  }
  const auto version = protocol.json().get<int64_t>();
  if (version < kOldestProtocol || version > newest) {
    throw EngineError("the engine speaks protocol " + protocol.json().dump() +
                      "; this kvfuzz speaks " + versions_text(newest) +
                      (newest < kNewestProtocol ? " (KVFUZZ_EXEC_PROTOCOL)" : "") +
                      " (docs/engine-protocol.md)");
  }
  return static_cast<int>(version);
}

// Everything a hello reply (and a new_case reply) declares after "ok" and "protocol".
void read_declarations(const JsonNode& reply, HelloReply& hello) {
  const JsonNode name = reply.field("name");
  if (!name.present() || !name.json().is_string() ||
      name.json().get_ref<const std::string&>().empty()) {
    name.expected("the engine's name, a non-empty string");
  }
  hello.name = engine_text(name.json().get_ref<const std::string&>());
  // Flags of an optional object: a flag not announced is false.
  const auto flags = [&](const char* field, const char* example,
                         std::initializer_list<std::pair<const char*, bool*>> keys) {
    const JsonNode object = reply.field(field);
    if (!object.present()) return;
    if (!object.json().is_object()) object.expected(example);
    for (const auto& [key, out] : keys) {
      const JsonNode value = object.field(key);
      if (value.present()) *out = value.to_bool();
    }
  };
  flags("capabilities", R"(an object such as {"truncate": true, "fork": false})",
        {{"truncate", &hello.capabilities.truncate}, {"fork", &hello.capabilities.fork}});
  flags("bitwise", R"(an object such as {"batch": true, "layout": true})",
        {{"batch", &hello.bitwise.batch},
         {"schedule", &hello.bitwise.schedule},
         {"layout", &hello.bitwise.layout},
         {"poison", &hello.bitwise.poison}});
  hello.numerics = read_numerics(reply);
  hello.supports = read_supports(reply);
}

// The first field `again` declares otherwise than `first`, as its JSON path
// ("$.numerics.output"), or nothing.
std::optional<std::string> changed_declaration(const HelloReply& first, const HelloReply& again) {
  const auto& a = first;
  const auto& b = again;
  const std::pair<const char*, bool> fields[] = {
      {"$.name", a.name == b.name},
      {"$.capabilities.truncate", a.capabilities.truncate == b.capabilities.truncate},
      {"$.capabilities.fork", a.capabilities.fork == b.capabilities.fork},
      {"$.bitwise.batch", a.bitwise.batch == b.bitwise.batch},
      {"$.bitwise.schedule", a.bitwise.schedule == b.bitwise.schedule},
      {"$.bitwise.layout", a.bitwise.layout == b.bitwise.layout},
      {"$.bitwise.poison", a.bitwise.poison == b.bitwise.poison},
      {"$.numerics.output", a.numerics.output == b.numerics.output},
      {"$.numerics.p", a.numerics.p == b.numerics.p},
      {"$.numerics.score_accumulation",
       a.numerics.score_accumulation == b.numerics.score_accumulation},
      {"$.numerics.value_accumulation",
       a.numerics.value_accumulation == b.numerics.value_accumulation},
      {"$.numerics.rotated_keys_in_storage",
       a.numerics.rotated_keys_in_storage == b.numerics.rotated_keys_in_storage},
      {"$.numerics.rotated_queries_in_storage",
       a.numerics.rotated_queries_in_storage == b.numerics.rotated_queries_in_storage},
      {"$.numerics.rope_angles_exact",
       a.numerics.rope_angles_exact == b.numerics.rope_angles_exact},
      {"$.supports.dtypes", a.supports.dtypes == b.supports.dtypes},
      {"$.supports.head_dim_multiple",
       a.supports.head_dim_multiple == b.supports.head_dim_multiple},
      {"$.supports.max_head_dim", a.supports.max_head_dim == b.supports.max_head_dim},
      {"$.supports.max_q_heads", a.supports.max_q_heads == b.supports.max_q_heads},
      {"$.supports.max_context", a.supports.max_context == b.supports.max_context},
      {"$.supports.value_dim_is_head_dim",
       a.supports.value_dim_is_head_dim == b.supports.value_dim_is_head_dim},
      {"$.supports.rope_required", a.supports.rope_required == b.supports.rope_required},
      {"$.supports.windows", a.supports.windows == b.supports.windows},
  };
  for (const auto& [path, same] : fields) {
    if (!same) return std::string(path);
  }
  // A field added to a declaration but not above still counts.
  if (a.numerics != b.numerics) return std::string("$.numerics");
  if (a.supports != b.supports) return std::string("$.supports");
  if (a.bitwise != b.bitwise) return std::string("$.bitwise");
  return std::nullopt;
}

}  // namespace

HelloReply read_hello_reply(std::string_view line, int newest) {
  const Json json = parse_reply_line(line, "hello");
  HelloReply hello;
  {
    // Until the engine has said its version, messages name the oldest.
    const ReplyReport report("hello", kOldestProtocol);
    const JsonNode reply(&json, "$", report);
    require_ok(reply, "the engine refused hello: ");
    hello.protocol = read_protocol(reply, newest);
  }
  const ReplyReport report("hello", hello.protocol);
  read_declarations(JsonNode(&json, "$", report), hello);
  return hello;
}

HelloReply read_new_case_reply(std::string_view line, const HelloReply& hello) {
  const Json json = parse_reply_line(line, "new_case");
  const ReplyReport report("new_case", kPersistentProtocol);
  const JsonNode reply(&json, "$", report);
  require_ok(reply, "the engine refused new_case: ");
  const JsonNode protocol = reply.field("protocol");
  if (!protocol.present() || !protocol.json().is_number_integer() ||
      protocol.json().get<int64_t>() != kPersistentProtocol) {
    protocol.expected("the integer " + std::to_string(kPersistentProtocol) +
                      ", the version its hello chose");
  }
  HelloReply again;
  again.protocol = kPersistentProtocol;
  read_declarations(reply, again);
  if (const auto changed = changed_declaration(hello, again)) {
    throw EngineError("the engine's answer to new_case declares " + *changed +
                      " otherwise than its answer to hello; declarations must not depend on "
                      "the case (docs/engine-protocol.md)");
  }
  return again;
}

void read_step_reply(std::string_view line, std::span<const ChunkIn> chunks, const Layout& layout,
                     std::span<ChunkOut> outs, int protocol) {
  const Json json = parse_reply_line(line, "step");
  const ReplyReport report("step", protocol);
  const JsonNode reply(&json, "$", report);
  require_ok(reply, "");
  const JsonNode results = reply.field("chunks");
  results.expect_array_of(chunks.size(),
                          "chunk results (one per chunk of the request, in its order)");
  for (size_t c = 0; c < chunks.size(); ++c) {
    const JsonNode result = results.at(c);
    if (!result.json().is_object()) {
      result.expected(R"(an object {"positions": [...], "out": [...]})");
    }
    read_positions(result, chunks[c], outs[c]);
    read_rows(result, chunks[c], layout, outs[c]);
  }
}

void read_done_reply(std::string_view line, std::string_view what, int protocol) {
  const Json json = parse_reply_line(line, what);
  const ReplyReport report(what, protocol);
  require_ok(JsonNode(&json, "$", report), "");
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

}  // namespace kvfuzz::doors
