#include "doors/exec_protocol.h"

#include <algorithm>
#include <climits>
#include <initializer_list>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "doors/exec_json.h"
#include "kvfuzz/dtype.h"
#include "kvfuzz/engine_fields.h"
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

void read_positions(const JsonNode& result, size_t tokens, std::vector<int64_t>& into) {
  const JsonNode positions = result.field("positions");
  positions.expect_array_of(tokens, "integers (one position per token)");
  into.resize(tokens);
  using Limits = std::numeric_limits<int64_t>;
  for (size_t t = 0; t < tokens; ++t) {
    into[t] = positions.at(t).to_int64(Limits::min(), Limits::max(), "an integer");
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

// The names of `dtypes`, as dtype_name() writes them, after `first` when one is given.
std::vector<std::string_view> dtype_names(const DTypeSet& dtypes, std::string_view first = {}) {
  std::vector<std::string_view> names;
  if (!first.empty()) names.push_back(first);
  for (const DType dtype : dtypes.list()) names.push_back(dtype_name(dtype));
  return names;
}

// A dtype named as dtype_name() writes it, one of `dtypes` (not every dtype fits every field).
DType read_dtype(const JsonNode& node, const DTypeSet& dtypes) {
  return *parse_dtype(node.to_choice(dtype_names(dtypes)));
}

// One declared value, as strictly as its type asks (kvfuzz/engine_fields.h lists the fields).
template <class T>
T read_value(const JsonNode& node, const DTypeSet& dtypes) {
  if constexpr (std::is_same_v<T, bool> || std::is_same_v<T, std::optional<bool>>) {
    return node.to_bool();
  } else if constexpr (std::is_same_v<T, DType>) {
    return read_dtype(node, dtypes);
  } else if constexpr (std::is_same_v<T, std::optional<DType>>) {
    const std::string name = node.to_choice(dtype_names(dtypes, "none"));
    return name == "none" ? std::nullopt : parse_dtype(name);
  } else if constexpr (std::is_same_v<T, int>) {
    // A limit: absent says "none" (0), so a given one is positive.
    return node.to_int(1, INT_MAX, "a positive integer");
  } else {
    static_assert(std::is_same_v<T, std::vector<DType>>,
                  "a declaration field of a type hello's reader does not read");
    const char* what = R"(a non-empty array of storage dtypes such as ["f16", "bf16"])";
    if (!node.json().is_array() || node.json().empty()) node.expected(what);
    std::vector<DType> list;
    for (size_t i = 0; i < node.json().size(); ++i) {
      const JsonNode element = node.at(i);
      const DType dtype = read_dtype(element, dtypes);
      if (std::ranges::find(list, dtype) != list.end()) {
        element.fail("\"" + std::string(dtype_name(dtype)) +
                     "\" is listed twice; expected each dtype once");
      }
      list.push_back(dtype);
    }
    return list;
  }
}

// How hello's reply holds one of its declaration objects. The flags of "capabilities" and
// "bitwise" ignore fields they do not know; "numerics" and "supports" refuse them, since a
// misspelt declaration would otherwise be judged as no declaration.
enum class Unknown { ignored, refused };

// The optional object Declaration<Struct>::name of the reply, field by field: a field left
// out keeps the C++ interface's default. `example` shows an object of the right shape.
template <Declared Struct>
Struct read_object(const JsonNode& reply, std::string_view example, Unknown unknown) {
  Struct declared;
  const JsonNode node = reply.field(Declaration<Struct>::name);
  if (!node.present()) return declared;
  if (!node.json().is_object()) node.expected("an object such as " + std::string(example));
  std::vector<std::string_view> names;
  for_each_field<Struct>([&](const auto& field) { names.push_back(field.name); });
  if (unknown == Unknown::refused) node.to_object(names);
  for_each_field<Struct>([&](const auto& field) {
    auto& member = declared.*field.member;
    const JsonNode value = node.field(field.name);
    if (value.present()) {
      member = read_value<std::remove_cvref_t<decltype(member)>>(value, field.dtypes);
    }
  });
  return declared;
}

}  // namespace

namespace {

// What hello and new_case say of a case, after `request`'s own fields: its layout,
// sequences and placement, and a whole model's sizes and weights.
std::string case_request(Ordered request, const EngineConfig& config,
                         const std::optional<ModelRequest>& model) {
  const Layout& l = config.layout;
  Ordered layout = {{"q_heads", l.q_heads},       {"kv_heads", l.kv_heads},
                    {"head_dim", l.head_dim},     {"value_dim", l.value_dim},
                    {"page_size", l.page_size},   {"dtype", std::string(dtype_name(l.dtype))},
                    {"scale", l.softmax_scale()}, {"rope_theta", nullptr},
                    {"window", nullptr}};
  if (l.rope_theta) layout["rope_theta"] = *l.rope_theta;
  // RoPE's interleaved pairs only when on: an engine that does not declare them never sees it.
  if (l.rope_style == RopeStyle::interleaved) layout["rope_style"] = "interleaved";
  // RoPE's part the same: only when set.
  if (l.rope_dims) layout["rope_dims"] = *l.rope_dims;
  if (l.window) layout["window"] = *l.window;
  // The attention features only when on: an engine that declares none never sees their keys.
  if (l.softcap) layout["softcap"] = *l.softcap;
  if (!l.sinks.empty()) layout["sinks"] = l.sinks;
  if (!l.alibi.empty()) layout["alibi"] = l.alibi;
  if (l.chunked_local) layout["chunked_local"] = *l.chunked_local;
  // A quantized KV format only when on: {"type", "scales": one per kv head, or null}, and
  // "group" for an affine format.
  for (const auto& [name, format] :
       {std::pair{"k_format", &l.k_format}, std::pair{"v_format", &l.v_format}}) {
    if (!format->quantized()) continue;
    Ordered kv = {{"type", std::string(kv_quant_name(format->quant))}, {"scales", nullptr}};
    if (is_fp8(format->quant)) {
      std::vector<double> scales;
      for (int g = 0; g < l.kv_heads; ++g) scales.push_back(format->scale_of(g));
      kv["scales"] = scales;
    }
    if (has_group(format->quant)) kv["group"] = format->group;
    layout[name] = kv;
  }
  // MLA's value read from its key only when on (the steps' v still holds those values).
  if (l.value_from_key) layout["value_from_key"] = true;
  request["layout"] = layout;
  request["sequences"] = config.sequences;
  request["page_order"] = config.page_order;
  request["poison"] = std::string(poison_name(config.poison));
  if (model) {
    const ModelConfig& m = model->model;
    request["model"] = {{"vocab", m.vocab}, {"width", m.width}, {"layers", m.layers},
                        {"ffn", m.ffn},     {"seed", m.seed},   {"weights", model->weights}};
  }
  return request.dump();
}

}  // namespace

std::string hello_request(const EngineConfig& config, int newest,
                          const std::optional<ModelRequest>& model) {
  Ordered hello = {{"op", "hello"}, {"protocol", kOldestProtocol}};
  if (newest > kOldestProtocol) {
    std::vector<int> offered;
    for (int v = kOldestProtocol; v <= newest; ++v) offered.push_back(v);
    hello["protocols"] = offered;
  }
  return case_request(std::move(hello), config, model);
}

std::string new_case_request(const EngineConfig& config, const std::optional<ModelRequest>& model) {
  return case_request(Ordered{{"op", "new_case"}}, config, model);
}

std::string model_step_request(std::span<const ModelChunkIn> chunks) {
  std::string out = R"({"op":"step","chunks":[)";
  for (size_t c = 0; c < chunks.size(); ++c) {
    out += c ? R"(,{"seq":)" : R"({"seq":)";
    out += std::to_string(chunks[c].seq) + R"(,"ids":[)";
    for (size_t t = 0; t < chunks[c].ids.size(); ++t) {
      if (t) out += ',';
      out += std::to_string(chunks[c].ids[t]);
    }
    out += "]}";
  }
  out += "]}";
  return out;
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
  hello.capabilities = read_object<EngineCapabilities>(
      reply, R"({"truncate": true, "fork": false})", Unknown::ignored);
  hello.bitwise =
      read_object<BitwiseClaims>(reply, R"({"batch": true, "layout": true})", Unknown::ignored);
  hello.numerics = read_object<EngineNumerics>(reply, R"({"output": "bf16"})", Unknown::refused);
  hello.supports = read_object<EngineSupports>(reply, R"({"dtypes": ["f16"]})", Unknown::refused);
  const JsonNode whole_model = reply.field("whole_model");
  hello.whole_model = whole_model.present() && whole_model.to_bool();
}

// The first field `again` declares otherwise than `first`, as its JSON path
// ("$.numerics.output"), or nothing.
std::optional<std::string> changed_declaration(const HelloReply& first, const HelloReply& again) {
  if (first.name != again.name) return std::string("$.name");
  if (first.whole_model != again.whole_model) return std::string("$.whole_model");
  std::optional<std::string> changed;
  const auto compare = [&]<Declared Struct>(const Struct& a, const Struct& b) {
    for_each_field<Struct>([&](const auto& field) {
      if (!changed && !(a.*field.member == b.*field.member)) {
        changed = "$." + std::string(Declaration<Struct>::name) + "." + std::string(field.name);
      }
    });
  };
  // Numerics may follow the case's layout (an engine computing in the layout's dtype); what
  // plans the run (capabilities, supports) and the bitwise claims may not.
  compare(first.capabilities, again.capabilities);
  compare(first.bitwise, again.bitwise);
  compare(first.supports, again.supports);
  return changed;
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

HelloReply read_new_case_reply(std::string_view line, const HelloReply& hello, bool compare) {
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
  if (!compare) return again;
  if (const auto changed = changed_declaration(hello, again)) {
    throw EngineError("the engine's answer to new_case declares " + *changed +
                      " otherwise than its answer to hello; only numerics may depend on the "
                      "case (docs/engine-protocol.md)");
  }
  return again;
}

namespace {

// A step's reply, {"ok": true, "chunks": [...]} with one object per chunk of the request:
// `read(c, result)` reads chunk c's object ("positions" and `values`).
template <class Read>
void read_chunk_results(std::string_view line, size_t count, std::string_view values, int protocol,
                        Read&& read) {
  const Json json = parse_reply_line(line, "step");
  const ReplyReport report("step", protocol);
  const JsonNode reply(&json, "$", report);
  require_ok(reply, "");
  const JsonNode results = reply.field("chunks");
  results.expect_array_of(count, "chunk results (one per chunk of the request, in its order)");
  for (size_t c = 0; c < count; ++c) {
    const JsonNode result = results.at(c);
    if (!result.json().is_object()) {
      result.expected(R"(an object {"positions": [...], ")" + std::string(values) + R"(": [...]})");
    }
    read(c, result);
  }
}

}  // namespace

void read_step_reply(std::string_view line, std::span<const ChunkIn> chunks, const Layout& layout,
                     std::span<ChunkOut> outs, int protocol) {
  read_chunk_results(line, chunks.size(), "out", protocol, [&](size_t c, const JsonNode& result) {
    read_positions(result, static_cast<size_t>(chunks[c].tokens), outs[c].positions);
    read_rows(result, chunks[c], layout, outs[c]);
  });
}

void read_model_step_reply(std::string_view line, std::span<const ModelChunkIn> chunks,
                           size_t vocab, std::span<ModelChunkOut> outs, int protocol) {
  read_chunk_results(
      line, chunks.size(), "logits", protocol, [&](size_t c, const JsonNode& result) {
        const size_t tokens = chunks[c].ids.size();
        read_positions(result, tokens, outs[c].positions);
        const JsonNode rows = result.field("logits");
        rows.expect_array_of(tokens, "logits rows (one per token)");
        std::vector<float>& logits = outs[c].logits;
        logits.resize(tokens * vocab);
        size_t i = 0;
        for (size_t t = 0; t < tokens; ++t) {
          const Json& row = rows.json()[t];
          if (!is_array_of(row, vocab)) {
            rows.at(t).expected("an array of " + std::to_string(vocab) + " numbers (vocab)");
          }
          for (size_t v = 0; v < vocab; ++v) {
            double value = 0;
            if (!read_number(row[v], value)) {
              rows.at(t).at(v).expected("a number (or NaN, Infinity, -Infinity)");
            }
            logits[i++] = static_cast<float>(value);
          }
        }
      });
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

size_t model_step_reply_limit(std::span<const ModelChunkIn> chunks, size_t vocab) {
  size_t tokens = 0;
  for (const ModelChunkIn& c : chunks) tokens += c.ids.size();
  return kSmallReplyLimit + 64 * (tokens * vocab + tokens);
}

}  // namespace kvfuzz::doors
