// Fixture format v1: strict reader, canonical writer (docs/fixture-format.md).
//
// The reader checks JSON types, shapes and unknown fields (json_reader.h), builds the
// Scenario, and leaves every cross-field rule to validate(), so fixtures and generated
// scenarios obey exactly the same rules.
#include "kvfuzz/fixture_io.h"

#include <array>
#include <cerrno>
#include <charconv>
#include <climits>
#include <cmath>
#include <fstream>
#include <system_error>

#include "corpus/json_reader.h"
#include "kvfuzz/limits.h"
#include "support/atomic_file.h"
#include "support/text.h"

namespace kvfuzz {

namespace {

using json_reader::error_line;
using Node = JsonNode;
using Object = JsonObject;

constexpr size_t kMaxText = static_cast<size_t>(limits::kMaxTextLength);

constexpr std::string_view distribution_name(Distribution distribution) {
  switch (distribution) {
    case Distribution::small_int:
      return "small-int";
    case Distribution::dyadic:
      return "dyadic";
    case Distribution::uniform:
      return "uniform";
    case Distribution::wide:
      return "wide";
  }
  return "?";
}

Distribution parse_distribution(std::string_view name) {
  for (Distribution d :
       {Distribution::small_int, Distribution::dyadic, Distribution::uniform, Distribution::wide}) {
    if (distribution_name(d) == name) return d;
  }
  return Distribution::small_int;  // unreachable: the reader accepts only the four names
}

// ---------------------------------------------------------------------------------------
// Reading

// An array of heads, each an array of numbers: q/k/v of a token or the values of a row.
std::vector<std::vector<double>> read_heads(const Node& node, int max_heads, int max_dim) {
  const size_t heads = node.array_size(static_cast<size_t>(max_heads), "heads");
  std::vector<std::vector<double>> out(heads);
  for (size_t h = 0; h < heads; ++h) {
    const Node head = node.at(h);
    const size_t dims = head.array_size(static_cast<size_t>(max_dim), "numbers");
    out[h].reserve(dims);
    for (size_t d = 0; d < dims; ++d) out[h].push_back(head.at(d).to_number());
  }
  return out;
}

std::vector<int> read_ids(const Object& object, std::string_view key) {
  const Node node = object.need(key, "an array of token ids");
  const size_t n = node.array_size(static_cast<size_t>(limits::kMaxChunkTokens), "token ids");
  std::vector<int> ids;
  ids.reserve(n);
  for (size_t i = 0; i < n; ++i) ids.push_back(node.at(i).to_int(INT_MIN, INT_MAX));
  return ids;
}

int read_any_int(const Object& object, std::string_view key) {
  return object.need_int(key, INT_MIN, INT_MAX);
}

// Per-q-head numbers (sinks, alibi): an array of numbers; alibi also "standard".
std::vector<double> read_per_head(const Node& node, int q_heads, bool standard) {
  if (standard && node.json().is_string()) {
    node.to_choice({"standard"});
    return standard_alibi_slopes(q_heads);
  }
  const size_t n = node.array_size(
      static_cast<size_t>(limits::kMaxQHeads),
      standard ? "numbers (one slope per q head) or \"standard\"" : "numbers (one per q head)");
  std::vector<double> values;
  values.reserve(n);
  for (size_t h = 0; h < n; ++h) values.push_back(node.at(h).to_number());
  return values;
}

// A KV storage format: a format's name, or {"type": NAME, "scale": S} with S one number or
// one per kv head (fp8 only), or {"type": NAME, "group": G} (the affine formats: a name
// alone means group 64; the per-channel ones: 32). The affine formats came with format
// version 5, the per-channel ones with 8.
KvFormat read_kv_format(const Node& node, int version) {
  std::vector<std::string_view> names;
  for (const KvQuant quant : kQuantizedFormats) names.push_back(kv_quant_name(quant));
  KvFormat format;
  const auto check_version = [&](const Node& name) {
    if (is_affine(format.quant) && version < 5) {
      name.expected("no " + std::string(kv_quant_name(format.quant)) + " in a version " +
                    std::to_string(version) +
                    " fixture (the affine KV formats need \"kvfuzz_fixture\": 5)");
    }
    if (is_channel(format.quant) && version < 8) {
      name.expected("no " + std::string(kv_quant_name(format.quant)) + " in a version " +
                    std::to_string(version) +
                    " fixture (the per-channel KV formats need \"kvfuzz_fixture\": 8)");
    }
    if (is_affine(format.quant)) format.group = kDefaultAffineGroup;
    if (is_channel(format.quant)) format.group = kDefaultChannelGroup;
  };
  if (node.json().is_string()) {
    format.quant = *parse_kv_quant(node.to_choice(names));
    check_version(node);
    return format;
  }
  const Object o = node.to_object({"type", "scale", "group"});
  const Node type = o.need("type", "a KV format's name");
  format.quant = *parse_kv_quant(type.to_choice(names));
  check_version(type);
  if (const auto group = o.get("group")) {
    if (!has_group(format.quant)) {
      group->expected("no \"group\" for " + std::string(kv_quant_name(format.quant)) +
                      " (only the affine and per-channel formats have one)");
    }
    format.group = static_cast<int>(group->to_int(1, 1 << 20));
  }
  if (const auto scale = o.get("scale")) {
    if (scale->json().is_number()) {
      format.scale = {scale->to_number()};
    } else {
      const size_t n = scale->array_size(static_cast<size_t>(limits::kMaxKvHeads),
                                         "a number or one number per kv head");
      for (size_t g = 0; g < n; ++g) format.scale.push_back(scale->at(g).to_number());
    }
  }
  return format;
}

Layout read_layout(const Object& top, int version) {
  const Object o =
      top.need("layout", "an object")
          .to_object({"q_heads", "kv_heads", "head_dim", "value_dim", "page_size", "dtype",
                      "rope_theta", "rope_style", "rope_dims", "window", "scale", "softcap",
                      "sinks", "alibi", "chunked_local", "k_format", "v_format", "value_from_key"});
  Layout layout;
  layout.q_heads = o.need_int("q_heads", 1, limits::kMaxQHeads);
  layout.kv_heads = o.need_int("kv_heads", 1, limits::kMaxKvHeads);
  layout.head_dim = o.need_int("head_dim", 1, limits::kMaxHeadDim);
  layout.value_dim = o.need_int("value_dim", 1, limits::kMaxValueDim);
  layout.page_size = o.need_int("page_size", 1, limits::kMaxPageSize);
  layout.dtype = *parse_dtype(o.need_choice("dtype", {"f32", "f16", "bf16"}));
  if (auto node = o.get("rope_theta")) layout.rope_theta = node->to_number();
  // RoPE's pairs came with format version 6 (validate() asks for rope_theta beside them).
  if (auto node = o.get("rope_style")) {
    if (version < 6) {
      node->expected("no \"rope_style\" in a version " + std::to_string(version) +
                     " fixture (RoPE's pairs need \"kvfuzz_fixture\": 6)");
    }
    layout.rope_style = node->to_choice({"half_split", "interleaved"}) == "interleaved"
                            ? RopeStyle::interleaved
                            : RopeStyle::half_split;
  }
  // RoPE's part came with format version 7 (validate() asks for rope_theta beside it).
  if (auto node = o.get("rope_dims")) {
    if (version < 7) {
      node->expected("no \"rope_dims\" in a version " + std::to_string(version) +
                     " fixture (RoPE's part needs \"kvfuzz_fixture\": 7)");
    }
    layout.rope_dims = o.get_int("rope_dims", 2, limits::kMaxHeadDim);
  }
  layout.window = o.get_int("window", 1, limits::kMaxEpochTokens);
  if (auto node = o.get("scale")) layout.scale = node->to_number();
  // The attention features came with format version 2.
  for (const std::string_view feature : {"softcap", "sinks", "alibi", "chunked_local"}) {
    if (const auto node = o.get(feature); node && version < 2) {
      node->expected("no \"" + std::string(feature) +
                     "\" in a version 1 fixture (attention features need \"kvfuzz_fixture\": 2)");
    }
  }
  if (auto node = o.get("softcap")) layout.softcap = node->to_number();
  if (auto node = o.get("sinks")) layout.sinks = read_per_head(*node, layout.q_heads, false);
  if (auto node = o.get("alibi")) layout.alibi = read_per_head(*node, layout.q_heads, true);
  layout.chunked_local = o.get_int("chunked_local", 1, limits::kMaxEpochTokens);
  // The quantized KV caches came with format version 3.
  for (const std::string_view field : {"k_format", "v_format"}) {
    if (const auto node = o.get(field); node && version < 3) {
      node->expected("no \"" + std::string(field) + "\" in a version " + std::to_string(version) +
                     " fixture (quantized KV caches need \"kvfuzz_fixture\": 3)");
    }
  }
  if (auto node = o.get("k_format")) layout.k_format = read_kv_format(*node, version);
  if (auto node = o.get("v_format")) layout.v_format = read_kv_format(*node, version);
  // MLA's value read from the key came with format version 4.
  if (auto node = o.get("value_from_key")) {
    if (version < 4) {
      node->expected("no \"value_from_key\" in a version " + std::to_string(version) +
                     " fixture (a value read from its key needs \"kvfuzz_fixture\": 4)");
    }
    layout.value_from_key = node->to_bool();
  }
  return layout;
}

// Model level: the transformer around the attention. All fields are required.
ModelConfig read_model(const Node& node) {
  const Object o = node.to_object({"vocab", "width", "layers", "ffn", "seed"});
  ModelConfig model;
  model.vocab = o.need_int("vocab", 1, limits::kMaxModelVocab);
  model.width = o.need_int("width", 1, limits::kMaxModelWidth);
  model.layers = o.need_int("layers", 1, limits::kMaxModelLayers);
  model.ffn = o.need_int("ffn", 1, limits::kMaxModelFfn);
  model.seed = o.need("seed", "an unsigned 64-bit integer").to_uint64();
  return model;
}

TokenSource read_tokens(const Object& top) {
  const Node node =
      top.need("tokens", "an object with either \"explicit\" or \"generated\" token data");
  const Object o = node.to_object({"explicit", "generated"});
  const auto list = o.get("explicit");
  const auto generated = o.get("generated");
  if (list && generated) node.fail("expected exactly one of explicit, generated, got both");
  if (!list && !generated) node.fail("expected exactly one of explicit, generated, got neither");
  if (list) {
    const size_t n = list->array_size(static_cast<size_t>(limits::kMaxTableTokens), "tokens");
    std::vector<ExplicitToken> tokens(n);
    for (size_t t = 0; t < n; ++t) {
      const Object token = list->at(t).to_object({"q", "k", "v"});
      tokens[t].q = read_heads(token.need("q", "an array of q_heads arrays of head_dim numbers"),
                               limits::kMaxQHeads, limits::kMaxHeadDim);
      tokens[t].k = read_heads(token.need("k", "an array of kv_heads arrays of head_dim numbers"),
                               limits::kMaxKvHeads, limits::kMaxHeadDim);
      // Absent where the layout reads each value from its key (value_from_key; validate()
      // requires it there and only there).
      if (const auto v = token.get("v")) {
        tokens[t].v = read_heads(*v, limits::kMaxKvHeads, limits::kMaxValueDim);
      }
    }
    return tokens;
  }
  const Object g =
      generated->to_object({"seed", "count", "distribution", "zero_scores", "qk_log2"});
  GeneratedTokens out;
  out.seed = g.need("seed", "an unsigned 64-bit integer").to_uint64();
  out.count = g.need_int("count", 1, limits::kMaxTableTokens);
  out.distribution =
      parse_distribution(g.need_choice("distribution", {"small-int", "dyadic", "uniform", "wide"}));
  if (auto zero = g.get("zero_scores")) out.zero_scores = zero->to_bool();
  if (g.get("qk_log2")) out.qk_log2 = g.need_int("qk_log2", 0, limits::kMaxQkLog2);
  return out;
}

Chunk read_chunk(const Node& node) {
  const Object o = node.to_object({"seq", "tokens"});
  Chunk chunk;
  chunk.seq = read_any_int(o, "seq");
  chunk.tokens = read_ids(o, "tokens");
  return chunk;
}

Op read_op(const Node& node) {
  if (!node.json().is_object()) node.expected("an object with an \"op\" field");
  const Object unchecked(node);
  const std::string kind =
      unchecked.need_choice("op", {"append", "step", "reset", "truncate", "fork"});
  if (kind == "append") {
    const Object o = node.to_object({"op", "seq", "tokens"}, " (for an append op)");
    const int seq = read_any_int(o, "seq");
    return Op::append(seq, read_ids(o, "tokens"));
  }
  if (kind == "step") {
    const Object o = node.to_object({"op", "chunks"}, " (for a step op)");
    const Node list = o.need("chunks", "an array of chunks");
    const size_t n = list.array_size(static_cast<size_t>(limits::kMaxSequences), "chunks");
    std::vector<Chunk> chunks;
    chunks.reserve(n);
    for (size_t c = 0; c < n; ++c) chunks.push_back(read_chunk(list.at(c)));
    return Op::step(std::move(chunks));
  }
  if (kind == "truncate") {
    const Object o = node.to_object({"op", "seq", "keep"}, " (for a truncate op)");
    const int seq = read_any_int(o, "seq");
    return Op::truncate(seq, o.need_int("keep", 0, limits::kMaxEpochTokens));
  }
  if (kind == "fork") {
    const Object o = node.to_object({"op", "src", "dst"}, " (for a fork op)");
    const int src = read_any_int(o, "src");
    return Op::fork(src, read_any_int(o, "dst"));
  }
  const Object o = node.to_object({"op", "seq"}, " (for a reset op)");
  return Op::reset(read_any_int(o, "seq"));
}

std::vector<Op> read_program(const Object& top) {
  const Node node = top.need("program", "an array of ops");
  const size_t n = node.array_size(static_cast<size_t>(limits::kMaxOps), "ops");
  std::vector<Op> program;
  program.reserve(n);
  for (size_t i = 0; i < n; ++i) program.push_back(read_op(node.at(i)));
  return program;
}

Placement read_placement(const Object& top) {
  Placement placement;
  const auto node = top.get("placement");
  if (!node) return placement;
  const Object o = node->to_object({"page_order", "pool_pages", "poison", "threads"});
  if (auto order = o.get("page_order")) {
    if (order->json().is_array()) {
      const size_t n = order->array_size(static_cast<size_t>(limits::kMaxPoolPages), "pages");
      placement.order = PageOrder::explicit_list;
      placement.pages.reserve(n);
      for (size_t i = 0; i < n; ++i)
        placement.pages.push_back(order->at(i).to_int(INT_MIN, INT_MAX));
    } else if (order->json().is_string()) {
      placement.order = order->to_choice({"identity", "reversed"}) == "identity"
                            ? PageOrder::identity
                            : PageOrder::reversed;
    } else {
      order->expected("\"identity\", \"reversed\" or an array of page numbers");
    }
  }
  placement.pool_pages = o.get_int("pool_pages", 1, limits::kMaxPoolPages);
  if (auto poison = o.get("poison")) {
    placement.poison = *parse_poison(poison->to_choice({"nan", "+inf", "-inf", "huge"}));
  }
  if (auto threads = o.get("threads")) {
    const Object t = threads->to_object({"order", "seed"});
    std::vector<std::string_view> names;
    for (const ThreadOrder order : kThreadOrders) names.push_back(thread_order_name(order));
    placement.threads.order =
        *parse_thread_order(t.need("order", "a thread order").to_choice(names));
    if (auto seed = t.get("seed")) {
      if (placement.threads.order != ThreadOrder::random) {
        seed->fail("only order \"random\" takes a seed");
      }
      placement.threads.seed = seed->to_uint64();
    }
  }
  return placement;
}

std::vector<ExpectedRow> read_expect(const Object& top) {
  std::vector<ExpectedRow> rows;
  const auto node = top.get("expect");
  if (!node) return rows;
  const size_t n = node->array_size(static_cast<size_t>(limits::kMaxExpectRows), "rows");
  rows.resize(n);
  for (size_t i = 0; i < n; ++i) {
    const Object o = node->at(i).to_object({"seq", "epoch", "pos", "values"});
    rows[i].seq = read_any_int(o, "seq");
    rows[i].epoch = read_any_int(o, "epoch");
    rows[i].pos = o.need("pos", "an integer").to_int64(INT64_MIN, INT64_MAX);
    rows[i].values = read_heads(o.need("values", "an array of q_heads arrays of value_dim numbers"),
                                limits::kMaxQHeads, limits::kMaxValueDim);
  }
  return rows;
}

Provenance read_provenance(const Object& top) {
  Provenance provenance;
  const auto node = top.get("provenance");
  if (!node) return provenance;
  const Object o =
      node->to_object({"source", "engine", "property", "seed", "failure", "kvfuzz_version"});
  provenance.source = o.need_choice("source", {"hand", "check", "shrink", "fuzz"});
  provenance.engine = o.get_string("engine", kMaxText);
  provenance.property = o.get_string("property", kMaxText);
  if (auto seed = o.get("seed")) provenance.seed = seed->to_uint64();
  provenance.failure = o.get_string("failure", kMaxText);
  provenance.kvfuzz_version = o.get_string("kvfuzz_version", kMaxText);
  return provenance;
}

// ---------------------------------------------------------------------------------------
// Writing

std::string number(double x) {
  if (!std::isfinite(x)) return "null";  // never valid; the reader will reject it clearly
  if (x == 0 && std::signbit(x)) return "-0.0";
  if (x == std::trunc(x) && std::fabs(x) < 9007199254740992.0) {
    return std::to_string(static_cast<int64_t>(x));
  }
  std::array<char, 64> buffer{};
  const auto [end, ec] = std::to_chars(buffer.data(), buffer.data() + buffer.size(), x);
  return std::string(buffer.data(), end);
}

// A JSON string literal exactly as nlohmann::json writes it: `"` and `\` escaped,
// \b \f \n \r \t for those control characters, \u00xx for the other control characters,
// everything else (including DEL and non-ASCII UTF-8) as is. validate() guarantees valid
// UTF-8; text that is not is refused rather than written into a file no reader accepts.
std::string json_string(std::string_view text) {
  try {
    return Json(std::string(text)).dump();
  } catch (const Json::type_error& error) {
    throw FixtureError("cannot write a string that is not valid UTF-8 (" +
                       std::string(error.what()) + ")");
  }
}

struct Field {
  std::string_view key;
  std::string value;  // already rendered as JSON
};
using Fields = std::vector<Field>;

// {"a": 1, "b": [2]} on one line.
std::string inline_object(const Fields& fields) {
  std::string out = "{";
  for (size_t i = 0; i < fields.size(); ++i) {
    if (i) out += ", ";
    out += json_string(fields[i].key);
    out += ": ";
    out += fields[i].value;
  }
  out += '}';
  return out;
}

// One field per line, `indent` spaces before the closing brace.
std::string block_object(const Fields& fields, int indent) {
  const std::string inner(static_cast<size_t>(indent + 2), ' ');
  std::string out = "{\n";
  for (size_t i = 0; i < fields.size(); ++i) {
    out += inner;
    out += json_string(fields[i].key);
    out += ": ";
    out += fields[i].value;
    out += i + 1 < fields.size() ? ",\n" : "\n";
  }
  out += std::string(static_cast<size_t>(indent), ' ');
  out += '}';
  return out;
}

// One element per line; "[]" when empty.
std::string block_array(const std::vector<std::string>& items, int indent) {
  if (items.empty()) return "[]";
  const std::string inner(static_cast<size_t>(indent + 2), ' ');
  std::string out = "[\n";
  for (size_t i = 0; i < items.size(); ++i) {
    out += inner;
    out += items[i];
    out += i + 1 < items.size() ? ",\n" : "\n";
  }
  out += std::string(static_cast<size_t>(indent), ' ');
  out += ']';
  return out;
}

template <typename T, typename F>
std::string inline_array(const std::vector<T>& items, F&& render) {
  std::string out = "[";
  for (size_t i = 0; i < items.size(); ++i) {
    if (i) out += ", ";
    out += render(items[i]);
  }
  out += ']';
  return out;
}

std::string ints(const std::vector<int>& values) {
  return inline_array(values, [](int x) { return std::to_string(x); });
}

std::string matrix(const std::vector<std::vector<double>>& rows) {
  return inline_array(rows,
                      [](const std::vector<double>& row) { return inline_array(row, number); });
}

// A format's name alone when it has no scale and no group but the default; {"type",
// "scale"} or {"type", "group"} on one line otherwise.
std::string write_kv_format(const KvFormat& format) {
  const std::string type = json_string(kv_quant_name(format.quant));
  if ((is_affine(format.quant) && format.group != kDefaultAffineGroup) ||
      (is_channel(format.quant) && format.group != kDefaultChannelGroup)) {
    return "{\"type\": " + type + ", \"group\": " + std::to_string(format.group) + "}";
  }
  if (format.scale.empty()) return type;
  const std::string scale =
      format.scale.size() == 1 ? number(format.scale[0]) : inline_array(format.scale, number);
  return "{\"type\": " + type + ", \"scale\": " + scale + "}";
}

std::string write_layout(const Layout& layout) {
  Fields fields = {{"q_heads", std::to_string(layout.q_heads)},
                   {"kv_heads", std::to_string(layout.kv_heads)},
                   {"head_dim", std::to_string(layout.head_dim)},
                   {"value_dim", std::to_string(layout.value_dim)},
                   {"page_size", std::to_string(layout.page_size)},
                   {"dtype", json_string(dtype_name(layout.dtype))}};
  if (layout.rope_theta) fields.push_back(Field{"rope_theta", number(*layout.rope_theta)});
  if (layout.rope_style != RopeStyle::half_split) {
    fields.push_back(Field{"rope_style", json_string(rope_style_name(layout.rope_style))});
  }
  if (layout.rope_dims) fields.push_back(Field{"rope_dims", std::to_string(*layout.rope_dims)});
  if (layout.window) fields.push_back(Field{"window", std::to_string(*layout.window)});
  if (layout.scale) fields.push_back(Field{"scale", number(*layout.scale)});
  if (layout.softcap) fields.push_back(Field{"softcap", number(*layout.softcap)});
  if (!layout.sinks.empty()) fields.push_back(Field{"sinks", inline_array(layout.sinks, number)});
  if (!layout.alibi.empty()) {
    fields.push_back(Field{"alibi", layout.alibi == standard_alibi_slopes(layout.q_heads)
                                        ? json_string("standard")
                                        : inline_array(layout.alibi, number)});
  }
  if (layout.chunked_local) {
    fields.push_back(Field{"chunked_local", std::to_string(*layout.chunked_local)});
  }
  for (const auto& [name, format] :
       {std::pair{"k_format", &layout.k_format}, std::pair{"v_format", &layout.v_format}}) {
    if (format->quantized()) fields.push_back(Field{name, write_kv_format(*format)});
  }
  if (layout.value_from_key) fields.push_back(Field{"value_from_key", "true"});
  return block_object(fields, 2);
}

std::string write_model(const ModelConfig& model) {
  return block_object({{"vocab", std::to_string(model.vocab)},
                       {"width", std::to_string(model.width)},
                       {"layers", std::to_string(model.layers)},
                       {"ffn", std::to_string(model.ffn)},
                       {"seed", std::to_string(model.seed)}},
                      2);
}

std::string write_tokens(const TokenSource& source) {
  if (const auto* list = std::get_if<std::vector<ExplicitToken>>(&source)) {
    std::vector<std::string> items;
    items.reserve(list->size());
    for (const ExplicitToken& token : *list) {
      Fields fields = {{"q", matrix(token.q)}, {"k", matrix(token.k)}};
      if (!token.v.empty()) fields.push_back(Field{"v", matrix(token.v)});
      items.push_back(inline_object(fields));
    }
    return block_object({{"explicit", block_array(items, 4)}}, 2);
  }
  const auto& generated = std::get<GeneratedTokens>(source);
  Fields fields = {{"seed", std::to_string(generated.seed)},
                   {"count", std::to_string(generated.count)},
                   {"distribution", json_string(distribution_name(generated.distribution))}};
  if (generated.zero_scores) fields.push_back(Field{"zero_scores", "true"});
  if (generated.qk_log2 != 0) fields.push_back(Field{"qk_log2", std::to_string(generated.qk_log2)});
  return block_object({{"generated", block_object(fields, 4)}}, 2);
}

std::string write_chunk(const Chunk& chunk) {
  return inline_object({{"seq", std::to_string(chunk.seq)}, {"tokens", ints(chunk.tokens)}});
}

std::string write_op(const Op& op) {
  switch (op.kind) {
    case OpKind::append:
      return inline_object(
          {{"op", "\"append\""}, {"seq", std::to_string(op.seq)}, {"tokens", ints(op.tokens)}});
    case OpKind::step:
      return inline_object({{"op", "\"step\""}, {"chunks", inline_array(op.chunks, write_chunk)}});
    case OpKind::reset:
      return inline_object({{"op", "\"reset\""}, {"seq", std::to_string(op.seq)}});
    case OpKind::truncate:
      return inline_object({{"op", "\"truncate\""},
                            {"seq", std::to_string(op.seq)},
                            {"keep", std::to_string(op.keep)}});
    case OpKind::fork:
      return inline_object(
          {{"op", "\"fork\""}, {"src", std::to_string(op.src)}, {"dst", std::to_string(op.seq)}});
  }
  return "{}";
}

std::string write_placement(const Placement& placement) {
  Fields fields;
  switch (placement.order) {
    case PageOrder::identity:
      fields.push_back(Field{"page_order", "\"identity\""});
      break;
    case PageOrder::reversed:
      fields.push_back(Field{"page_order", "\"reversed\""});
      break;
    case PageOrder::explicit_list:
      fields.push_back(Field{"page_order", ints(placement.pages)});
      break;
  }
  if (placement.pool_pages)
    fields.push_back(Field{"pool_pages", std::to_string(*placement.pool_pages)});
  fields.push_back(Field{"poison", json_string(poison_name(placement.poison))});
  const ThreadSchedule& threads = placement.threads;
  if (threads != ThreadSchedule{}) {
    Fields t = {{"order", json_string(thread_order_name(threads.order))}};
    if (threads.order == ThreadOrder::random)
      t.push_back(Field{"seed", std::to_string(threads.seed)});
    fields.push_back(Field{"threads", inline_object(t)});
  }
  return block_object(fields, 2);
}

std::string write_row(const ExpectedRow& row) {
  return inline_object({{"seq", std::to_string(row.seq)},
                        {"epoch", std::to_string(row.epoch)},
                        {"pos", std::to_string(row.pos)},
                        {"values", matrix(row.values)}});
}

std::string write_provenance(const Provenance& p) {
  Fields fields = {{"source", json_string(p.source)}};
  if (p.engine) fields.push_back(Field{"engine", json_string(*p.engine)});
  if (p.property) fields.push_back(Field{"property", json_string(*p.property)});
  if (p.seed) fields.push_back(Field{"seed", std::to_string(*p.seed)});
  if (p.failure) fields.push_back(Field{"failure", json_string(*p.failure)});
  if (p.kvfuzz_version) fields.push_back(Field{"kvfuzz_version", json_string(*p.kvfuzz_version)});
  return block_object(fields, 2);
}

}  // namespace

int fixture_format_version(const Scenario& scenario) {
  const Layout& l = scenario.layout;
  if (is_channel(l.k_format.quant)) return 8;
  if (l.rope_dims) return 7;
  if (l.rope_style != RopeStyle::half_split) return 6;
  if (is_affine(l.k_format.quant) || is_affine(l.v_format.quant)) return 5;
  if (scenario.layout.value_from_key) return 4;
  if (scenario.layout.quantized_kv()) return 3;
  return scenario.layout.has_features() ? 2 : kMinFixtureFormatVersion;
}

Scenario parse_fixture(std::string_view text, std::string_view origin) {
  const Json document = json_reader::parse_document(text, origin);
  const json_reader::FixtureReport report(origin);
  const Node root(&document, "$", report);
  if (!document.is_object()) root.expected("an object (a kvfuzz fixture)");

  // The version first: a newer fixture should say so, not complain about its new fields.
  const std::string version_text = "format version " + std::to_string(kMinFixtureFormatVersion) +
                                   " to " + std::to_string(kFixtureFormatVersion);
  const Node version = Object(root).need("kvfuzz_fixture", version_text);
  if (!version.is_integer_in(kMinFixtureFormatVersion, kFixtureFormatVersion)) {
    version.expected(version_text);
  }
  const int format = static_cast<int>(version.json().get<int64_t>());

  const Object top = root.to_object({"kvfuzz_fixture", "name", "note", "layout", "model", "tokens",
                                     "sequences", "program", "placement", "expect", "provenance"});
  Scenario scenario;
  scenario.name = top.need_string("name", kMaxText);
  if (auto note = top.get_string("note", kMaxText)) scenario.note = std::move(*note);
  scenario.layout = read_layout(top, format);
  if (const auto model = top.get("model")) {
    scenario.model = read_model(*model);
    // Token ids are vocabulary ids: there is no token table to give. The scenario holds
    // the canonical source validate() insists on.
    if (const auto tokens = top.get("tokens")) {
      tokens->expected(
          "no \"tokens\" in a model scenario (its token ids are vocabulary ids in [0, "
          "model.vocab))");
    }
    scenario.tokens = GeneratedTokens{0, scenario.model->vocab, Distribution::small_int, false};
  } else {
    scenario.tokens = read_tokens(top);
  }
  scenario.sequences = top.need_int("sequences", 1, limits::kMaxSequences);
  scenario.program = read_program(top);
  scenario.placement = read_placement(top);
  scenario.expect = read_expect(top);
  scenario.provenance = read_provenance(top);

  if (const auto error = validate(scenario)) {
    throw FixtureError(error_line(origin, error->path, "expected " + error->message));
  }
  return scenario;
}

Scenario load_fixture(const std::filesystem::path& path) {
  const std::string origin = path.string();
  const auto cannot_read = [&](const std::string& reason) {
    return FixtureError(error_line(origin, "", "cannot read file (" + reason + ")"));
  };
  std::error_code ec;
  const auto status = std::filesystem::status(path, ec);
  if (ec) throw cannot_read(ec.message());
  if (std::filesystem::is_directory(status)) throw cannot_read(errno_text(EISDIR));
  if (std::filesystem::is_regular_file(status)) {
    const auto size = std::filesystem::file_size(path, ec);
    if (ec) throw cannot_read(ec.message());
    if (size > static_cast<uintmax_t>(limits::kMaxFixtureBytes)) {
      throw FixtureError(error_line(origin, "",
                                    "expected a file of at most " +
                                        std::to_string(limits::kMaxFixtureBytes) + " bytes, got " +
                                        std::to_string(size) + " bytes"));
    }
  }
  errno = 0;
  std::ifstream in(path, std::ios::binary);
  if (!in) throw cannot_read(errno_text(errno != 0 ? errno : EIO));

  // Read at most one byte past the limit: the size may differ from what stat said (a pipe,
  // a file being written), and nothing taken from the input decides an allocation.
  std::string text;
  std::array<char, 1 << 16> buffer{};
  while (in) {
    in.read(buffer.data(), static_cast<std::streamsize>(buffer.size()));
    text.append(buffer.data(), static_cast<size_t>(in.gcount()));
    if (static_cast<int64_t>(text.size()) > limits::kMaxFixtureBytes) {
      throw FixtureError(error_line(origin, "",
                                    "expected a file of at most " +
                                        std::to_string(limits::kMaxFixtureBytes) +
                                        " bytes, got more"));
    }
  }
  if (in.bad()) throw cannot_read(errno_text(errno != 0 ? errno : EIO));
  return parse_fixture(text, origin);
}

std::string write_fixture(const Scenario& scenario) {
  Fields fields = {{"kvfuzz_fixture", std::to_string(fixture_format_version(scenario))},
                   {"name", json_string(scenario.name)}};
  if (!scenario.note.empty()) fields.push_back(Field{"note", json_string(scenario.note)});
  fields.push_back(Field{"layout", write_layout(scenario.layout)});
  if (scenario.model) {
    fields.push_back(Field{"model", write_model(*scenario.model)});  // no token table
  } else {
    fields.push_back(Field{"tokens", write_tokens(scenario.tokens)});
  }
  fields.push_back(Field{"sequences", std::to_string(scenario.sequences)});
  std::vector<std::string> ops;
  ops.reserve(scenario.program.size());
  for (const Op& op : scenario.program) ops.push_back(write_op(op));
  fields.push_back(Field{"program", block_array(ops, 2)});
  fields.push_back(Field{"placement", write_placement(scenario.placement)});
  if (!scenario.expect.empty()) {
    std::vector<std::string> rows;
    rows.reserve(scenario.expect.size());
    for (const ExpectedRow& row : scenario.expect) rows.push_back(write_row(row));
    fields.push_back(Field{"expect", block_array(rows, 2)});
  }
  fields.push_back(Field{"provenance", write_provenance(scenario.provenance)});
  return block_object(fields, 0) + "\n";
}

void save_fixture(const Scenario& scenario, const std::filesystem::path& path) {
  const std::string origin = path.string();
  const auto cannot_write = [&](const std::string& reason) {
    return FixtureError(error_line(origin, "", "cannot write file (" + reason + ")"));
  };
  const std::string text = write_fixture(scenario);
  // The limits allow scenarios whose text is larger than a reader accepts (2^24 floats of
  // up to 24 characters each); never save a fixture that cannot be loaded again.
  if (static_cast<int64_t>(text.size()) > limits::kMaxFixtureBytes) {
    throw cannot_write(std::to_string(text.size()) + " bytes, more than the " +
                       std::to_string(limits::kMaxFixtureBytes) + " a fixture may have");
  }
  try {
    write_file_atomically(path, text);
  } catch (const FileWriteError& error) {
    throw cannot_write(error.reason());
  }
}

}  // namespace kvfuzz
