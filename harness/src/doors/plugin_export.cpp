// The plugin ABI's entry points over C++ engines (kvfuzz/engine_plugin.h): the other side
// of the plugin door from doors/plugin_adapter.cpp, which drives a plugin's entries as a
// kvfuzz::Engine. The engines are C++; the ABI is C: every entry point catches every
// exception and turns it into a status and a message.
#include <algorithm>
#include <array>
#include <cstddef>
#include <exception>
#include <memory>
#include <span>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "doors/abi_fields.h"
#include "kvfuzz/engine.h"
#include "kvfuzz/engine_abi.h"
#include "kvfuzz/engine_plugin.h"

// The plugin's engine state behind the ABI's opaque handle.
struct kvfuzz_engine {
  std::unique_ptr<kvfuzz::Engine> engine;
  kvfuzz::Layout layout;
  std::string error;  // the last failure's message, valid until the next call
  // Reused across steps.
  std::vector<kvfuzz::ChunkIn> ins;
  std::vector<kvfuzz::ChunkOut> outs;
};

namespace {

using kvfuzz::EngineError;

// The exported engines, owned by the one table of this library (export_engines). The
// create functions of the ABI name no engine; each finds its own here by index.
const std::vector<kvfuzz::EngineInfo>* g_engines = nullptr;

// Stores the message and points *error at it; allocation may fail, reporting must not.
int fail(std::string& slot, const char* message, const char** error) noexcept {
  const char* text = "out of memory while reporting an error";
  try {
    slot = message;
    text = slot.c_str();
  } catch (...) {
    // `text` keeps the static fallback.
  }
  if (error != nullptr) *error = text;
  return 1;
}

// Runs `body`; any exception becomes status 1 and a message in `slot`.
template <class Body>
int guarded(std::string& slot, const char** error, Body&& body) noexcept {
  try {
    std::forward<Body>(body)();
    return 0;
  } catch (const std::exception& e) {
    return fail(slot, e.what(), error);
  } catch (...) {
    return fail(slot, "a non-standard C++ exception", error);
  }
}

kvfuzz::DType dtype_of(int32_t code) {
  switch (code) {
    case KVFUZZ_DTYPE_F32:
      return kvfuzz::DType::f32;
    case KVFUZZ_DTYPE_F16:
      return kvfuzz::DType::f16;
    case KVFUZZ_DTYPE_BF16:
      return kvfuzz::DType::bf16;
    default:
      throw EngineError("unknown dtype code " + std::to_string(code));
  }
}

kvfuzz::Poison poison_of(int32_t code) {
  switch (code) {
    case KVFUZZ_POISON_NAN:
      return kvfuzz::Poison::nan;
    case KVFUZZ_POISON_POS_INF:
      return kvfuzz::Poison::pos_inf;
    case KVFUZZ_POISON_NEG_INF:
      return kvfuzz::Poison::neg_inf;
    case KVFUZZ_POISON_HUGE:
      return kvfuzz::Poison::huge;
    default:
      throw EngineError("unknown poison code " + std::to_string(code));
  }
}

// A KVFUZZ_KV_* code and its scales (kv_heads of them for fp8; one when all are equal, a
// per-tensor scale, as the fixture says it).
kvfuzz::KvFormat kv_format_of(int32_t code, const double* scales, int32_t group, int32_t kv_heads,
                              const char* field) {
  static_assert(static_cast<int>(kvfuzz::KvQuant::q5_1) == KVFUZZ_KV_Q5_1 &&
                static_cast<int>(kvfuzz::KvQuant::fp8_e4m3fn) == KVFUZZ_KV_FP8_E4M3FN &&
                static_cast<int>(kvfuzz::KvQuant::affine2) == KVFUZZ_KV_AFFINE2 &&
                static_cast<int>(kvfuzz::KvQuant::affine8) == KVFUZZ_KV_AFFINE8 &&
                static_cast<int>(kvfuzz::KvQuant::channel_u8) == KVFUZZ_KV_CHANNEL_U8 &&
                static_cast<int>(kvfuzz::KvQuant::channel_u4) == KVFUZZ_KV_CHANNEL_U4);
  if (code < KVFUZZ_KV_NONE || code > KVFUZZ_KV_CHANNEL_U4) {
    throw EngineError(std::string("config.") + field + ": unknown KVFUZZ_KV_* code " +
                      std::to_string(code));
  }
  kvfuzz::KvFormat format{static_cast<kvfuzz::KvQuant>(code), {}};
  if (kvfuzz::has_group(format.quant)) {
    const std::span<const int> groups = kvfuzz::format_groups(format.quant);
    if (std::ranges::find(groups, group) == groups.end()) {
      const bool affine = kvfuzz::is_affine(format.quant);
      throw EngineError(std::string("config.") + field +
                        (affine ? ": an affine format" : ": a per-channel format") +
                        " with group " + std::to_string(group) + "; expected " +
                        (affine ? "32, 64 or 128" : "16, 32, 64 or 128"));
    }
    format.group = group;
  }
  if (!kvfuzz::is_fp8(format.quant)) return format;
  if (scales == nullptr) {
    throw EngineError(std::string("config.") + field + ": an fp8 format with NULL scales");
  }
  format.scale.assign(scales, scales + std::max(0, kv_heads));
  // (erase, not resize: g++ 12 -O3 then warns of a bounds error no path reaches)
  if (format.scale.size() > 1 && std::all_of(format.scale.begin(), format.scale.end(),
                                             [&](double s) { return s == format.scale.front(); })) {
    format.scale.erase(format.scale.begin() + 1, format.scale.end());
  }
  return format;
}

// The ABI's config as the C++ engines take it. The engines check the layout themselves
// (head counts, divisibility, page order a permutation); this checks what C adds.
kvfuzz::EngineConfig engine_config(const kvfuzz_engine_config* c) {
  if (c == nullptr) throw EngineError("no config (NULL)");
  if (c->struct_size < sizeof(kvfuzz_engine_config)) {
    throw EngineError("config struct_size " + std::to_string(c->struct_size) + ", expected " +
                      std::to_string(sizeof(kvfuzz_engine_config)));
  }
  if (c->pool_pages < 0 || (c->pool_pages > 0 && c->page_order == nullptr)) {
    throw EngineError("config has " + std::to_string(c->pool_pages) +
                      " pool pages and page_order " + (c->page_order ? "set" : "NULL"));
  }
  kvfuzz::EngineConfig config;
  kvfuzz::Layout& layout = config.layout;
  layout.q_heads = c->q_heads;
  layout.kv_heads = c->kv_heads;
  layout.head_dim = c->head_dim;
  layout.value_dim = c->value_dim;
  layout.page_size = c->page_size;
  layout.dtype = dtype_of(c->dtype);
  // kvfuzz always sends the scale it means; passing it on explicitly gives the engines the
  // same double they would compute themselves.
  layout.scale = c->scale;
  if (c->rope_theta != 0) layout.rope_theta = c->rope_theta;
  if (c->window != 0) layout.window = c->window;
  if (c->softcap != 0) layout.softcap = c->softcap;
  const auto per_head = [&](const double* values) {
    return values ? std::vector<double>(values, values + std::max(0, c->q_heads))
                  : std::vector<double>{};
  };
  layout.sinks = per_head(c->sinks);
  layout.alibi = per_head(c->alibi_slopes);
  if (c->chunked_local != 0) layout.chunked_local = c->chunked_local;
  layout.k_format = kv_format_of(c->k_format, c->k_scales, c->k_group, c->kv_heads, "k_format");
  layout.v_format = kv_format_of(c->v_format, c->v_scales, c->v_group, c->kv_heads, "v_format");
  layout.value_from_key = c->value_from_key != 0;
  if (c->rope_style != KVFUZZ_ROPE_HALF_SPLIT && c->rope_style != KVFUZZ_ROPE_INTERLEAVED) {
    throw EngineError("config.rope_style: unknown KVFUZZ_ROPE_* code " +
                      std::to_string(c->rope_style));
  }
  if (c->rope_style == KVFUZZ_ROPE_INTERLEAVED) layout.rope_style = kvfuzz::RopeStyle::interleaved;
  if (c->rope_dims < 0 || c->rope_dims > c->head_dim) {
    throw EngineError("config.rope_dims: 0 (the whole head) to head_dim (" +
                      std::to_string(c->head_dim) + "), got " + std::to_string(c->rope_dims));
  }
  if (c->rope_dims != 0 && c->rope_dims != c->head_dim) layout.rope_dims = c->rope_dims;
  // A block or group format stores whole rows only (what validate() asks of a fixture).
  for (const auto& [format, row, name] : {std::tuple{&layout.k_format, c->head_dim, "k_format"},
                                          std::tuple{&layout.v_format, c->value_dim, "v_format"}}) {
    const int multiple = kvfuzz::row_multiple(*format);
    if (format->quantized() && (row <= 0 || row % multiple != 0)) {
      throw EngineError(std::string("config.") + name + ": " +
                        std::string(kvfuzz::kv_quant_name(format->quant)) +
                        " stores rows of a multiple of " + std::to_string(multiple) +
                        " elements, got " + std::to_string(row));
    }
  }
  config.sequences = c->sequences;
  config.poison = poison_of(c->poison);
  config.page_order.assign(c->page_order, c->page_order + c->pool_pages);
  return config;
}

// The create error outlives the call until the next create; thread_local keeps two hosts'
// threads from overwriting each other's message.
thread_local std::string create_error;

kvfuzz_engine* create_engine(size_t index, const kvfuzz_engine_config* config,
                             const char** error) noexcept {
  try {
    const kvfuzz::EngineConfig cpp_config = engine_config(config);
    auto handle = std::make_unique<kvfuzz_engine>();
    const kvfuzz::EngineInfo& info = g_engines->at(index);
    if (!info.make) {
      throw EngineError("engine " + info.name +
                        " runs whole models only (kvfuzz loads it through the plugin's model "
                        "door, kvfuzz/engine_plugin.h)");
    }
    handle->engine = info.make(cpp_config);
    if (!handle->engine) throw EngineError("the engine's factory returned no engine");
    handle->layout = cpp_config.layout;
    return handle.release();
  } catch (const std::exception& e) {
    fail(create_error, e.what(), error);
  } catch (...) {
    fail(create_error, "a non-standard C++ exception", error);
  }
  return nullptr;
}

void destroy_engine(kvfuzz_engine* engine) {
  delete engine;  // the engines' destructors do not throw
}

size_t count_of(int64_t tokens, int a, int b) {
  return static_cast<size_t>(tokens) * static_cast<size_t>(a) * static_cast<size_t>(b);
}

// The ABI's chunks as the C++ engine takes them, its rows copied back. The engine's own
// output shape is passed on as `rows` for kvfuzz to judge, after checking it fits.
int step_engine(kvfuzz_engine* e, const kvfuzz_chunk_in* chunks, kvfuzz_chunk_out* outs,
                int32_t count, const char** error) {
  return guarded(e->error, error, [&] {
    if (count < 0 || (count > 0 && (chunks == nullptr || outs == nullptr))) {
      throw EngineError("step: " + std::to_string(count) + " chunks with missing arrays");
    }
    const kvfuzz::Layout& l = e->layout;
    const auto n = static_cast<size_t>(count);
    e->ins.resize(n);
    e->outs.resize(n);
    for (size_t i = 0; i < n; ++i) {
      const kvfuzz_chunk_in& c = chunks[i];
      if (c.tokens < 0) throw EngineError("step: negative token count " + std::to_string(c.tokens));
      if (c.tokens > 0 && (c.q == nullptr || c.k == nullptr || c.v == nullptr)) {
        throw EngineError("step: chunk " + std::to_string(i) + " has tokens but no q/k/v");
      }
      kvfuzz::ChunkIn& in = e->ins[i];
      in.seq = c.seq;
      in.tokens = c.tokens;
      in.q = std::span<const float>(c.q, count_of(c.tokens, l.q_heads, l.head_dim));
      in.k = std::span<const float>(c.k, count_of(c.tokens, l.kv_heads, l.head_dim));
      in.v = std::span<const float>(c.v, count_of(c.tokens, l.kv_heads, l.value_dim));
      e->outs[i].out.clear();
      e->outs[i].positions.clear();
    }
    e->engine->step(e->ins, e->outs);
    const size_t row_size = count_of(1, l.q_heads, l.value_dim);
    for (size_t i = 0; i < n; ++i) {
      const kvfuzz::ChunkOut& got = e->outs[i];
      kvfuzz_chunk_out& out = outs[i];
      const size_t rows = got.positions.size();
      if (got.out.size() != rows * row_size) {
        throw EngineError("step: the engine returned " + std::to_string(got.out.size()) +
                          " values for " + std::to_string(rows) + " positions");
      }
      if (got.out.size() > static_cast<size_t>(out.out_capacity) ||
          rows > static_cast<size_t>(out.positions_capacity)) {
        throw EngineError("step: the engine returned " + std::to_string(rows) +
                          " rows, more than chunk " + std::to_string(i) + " has room for");
      }
      std::copy(got.out.begin(), got.out.end(), out.out);
      std::copy(got.positions.begin(), got.positions.end(), out.positions);
      out.rows = static_cast<int64_t>(rows);
    }
  });
}

int reset_engine(kvfuzz_engine* e, int32_t seq, const char** error) {
  return guarded(e->error, error, [&] { e->engine->reset(seq); });
}

int truncate_engine(kvfuzz_engine* e, int32_t seq, int64_t keep, const char** error) {
  return guarded(e->error, error, [&] { e->engine->truncate(seq, keep); });
}

int fork_engine(kvfuzz_engine* e, int32_t src, int32_t dst, const char** error) {
  return guarded(e->error, error, [&] { e->engine->fork(src, dst); });
}

// ABI 5: the C++ engine's own numerics, those of the layout it was made for (an engine that
// computes in the storage dtype declares per dtype), written into the entry's numerics
// slots; the rest of the entry is written back as it was read.
int numerics_of_engine(kvfuzz_engine* e, kvfuzz_engine_api* entry, const char** error) {
  return guarded(e->error, error, [&] {
    kvfuzz::EngineDeclarations declared;
    const std::string problem =
        kvfuzz::doors::abi::read(*entry, KVFUZZ_ENGINE_ABI_VERSION, declared);
    if (!problem.empty()) throw kvfuzz::EngineError("its entry has " + problem);
    declared.numerics = e->engine->numerics();
    kvfuzz::doors::abi::write(declared, *entry);
  });
}

// The ABI's create names no engine, so each table entry needs a create function of its
// own: one instantiation per registry index, up to kCreateSlots. More engines than slots:
// no table (export_engines).
using CreateFn = kvfuzz_engine* (*)(const kvfuzz_engine_config*, const char**);
constexpr size_t kCreateSlots = kvfuzz::kPluginEngineSlots;

template <size_t Index>
kvfuzz_engine* create_at(const kvfuzz_engine_config* config, const char** error) {
  return create_engine(Index, config, error);
}

template <size_t... Index>
constexpr std::array<CreateFn, sizeof...(Index)> create_functions(std::index_sequence<Index...>) {
  return {&create_at<Index>...};
}

constexpr std::array<CreateFn, kCreateSlots> kCreate =
    create_functions(std::make_index_sequence<kCreateSlots>{});

// What the engine declares, asked as kvfuzz asks a linked-in engine (probe_declarations),
// written into its entry, each field into its slot as doors/abi_fields.h maps it.
void declare(const kvfuzz::EngineInfo& info, kvfuzz_engine_api& api) {
  try {
    kvfuzz::doors::abi::write(kvfuzz::probe_declarations(info), api);
  } catch (const EngineError&) {
    // It cannot be made at all; its create will say why.
  }
}

kvfuzz_engine_api entry(size_t index) {
  const kvfuzz::EngineInfo& info = g_engines->at(index);
  kvfuzz_engine_api api = kvfuzz_engine_api_defaults();
  api.name = info.name.c_str();  // the table's engines live as long as the library
  api.description = info.description.c_str();
  declare(info, api);
  api.mutant = info.mutant ? 1 : 0;
  api.create = kCreate[index];
  api.destroy = destroy_engine;
  api.step = step_engine;
  api.reset = reset_engine;
  api.truncate = (api.capabilities & KVFUZZ_CAN_TRUNCATE) != 0 ? truncate_engine : nullptr;
  api.fork = (api.capabilities & KVFUZZ_CAN_FORK) != 0 ? fork_engine : nullptr;
  api.numerics_of = numerics_of_engine;
  return api;
}

// Built in place, once: the table points into `engines`, which never moves afterwards.
struct ExportedTable {
  std::vector<kvfuzz::EngineInfo> infos;
  std::vector<kvfuzz_engine_api> engines;
  kvfuzz_engine_plugin_table table{};

  explicit ExportedTable(std::vector<kvfuzz::EngineInfo> exported) : infos(std::move(exported)) {
    if (infos.size() > kCreateSlots) {
      throw EngineError("more engines than create slots (kvfuzz::kPluginEngineSlots)");
    }
    g_engines = &infos;
    for (size_t i = 0; i < infos.size(); ++i) engines.push_back(entry(i));
    table.abi_version = KVFUZZ_ENGINE_ABI_VERSION;
    table.engine_count = static_cast<uint32_t>(engines.size());
    table.engines = engines.data();
  }
  ExportedTable(const ExportedTable&) = delete;
  ExportedTable& operator=(const ExportedTable&) = delete;
};

}  // namespace

namespace kvfuzz {

namespace {

ModelDoor g_model_door;  // engines set once the table is built

}  // namespace

const kvfuzz_engine_plugin_table* export_engines(std::vector<EngineInfo> (*engines)()) noexcept {
  try {
    static const ExportedTable exported(engines());  // thread-safe static initialisation
    g_model_door.engines = &exported.infos;
    return &exported.table;
  } catch (...) {
    return nullptr;  // kvfuzz reports a plugin without a table
  }
}

const ModelDoor* exported_model_door() noexcept {
  return g_model_door.engines != nullptr ? &g_model_door : nullptr;
}

}  // namespace kvfuzz
