// The C++ Engine over one plugin entry: kvfuzz's values become the ABI's structs, the
// plugin's status codes and messages become EngineError, and every answer is checked
// before the runner sees it. A plugin that returns, however wrongly, never crashes kvfuzz;
// one that crashes or corrupts memory inside a call takes the process with it (plugins
// run in kvfuzz's address space; exec: engines run in their own).
#include "doors/plugin_adapter.h"

#include <cstring>
#include <limits>
#include <string>
#include <string_view>
#include <utility>

#include "doors/abi_fields.h"
#include "kvfuzz/engine_fields.h"
#include "support/text.h"

namespace kvfuzz::doors {

namespace {

// A plugin's message as one line of bounded length (reports and the CLI print one line)
// and valid UTF-8 (it may end up in a fixture, which is JSON): support/text.h.
std::string plugin_message(const char* error) {
  if (error == nullptr) return "(no message)";
  constexpr size_t kMostChars = 1000;
  // A character is at most 4 bytes: no need to look further for kMostChars of them, nor to
  // trust the plugin to end its string soon.
  const std::string_view text(error, strnlen(error, 4 * kMostChars + 1));
  std::string message = one_line(text, kMostChars);
  return message.empty() ? "(empty message)" : message;
}

int32_t poison_code(Poison poison) {
  switch (poison) {
    case Poison::pos_inf:
      return KVFUZZ_POISON_POS_INF;
    case Poison::neg_inf:
      return KVFUZZ_POISON_NEG_INF;
    case Poison::huge:
      return KVFUZZ_POISON_HUGE;
    case Poison::nan:
      break;
  }
  return KVFUZZ_POISON_NAN;
}

// An fp8 format's scales, one per kv head (NULL in the config for any other format).
std::vector<double> head_scales(const KvFormat& format, int kv_heads) {
  std::vector<double> scales;
  if (!is_fp8(format.quant)) return scales;
  for (int g = 0; g < kv_heads; ++g) scales.push_back(format.scale_of(g));
  return scales;
}

kvfuzz_engine_config abi_config(const EngineConfig& config, const std::vector<int32_t>& pages,
                                const std::vector<double>& k_scales,
                                const std::vector<double>& v_scales) {
  const Layout& layout = config.layout;
  kvfuzz_engine_config c{};
  c.struct_size = sizeof(kvfuzz_engine_config);
  c.q_heads = layout.q_heads;
  c.kv_heads = layout.kv_heads;
  c.head_dim = layout.head_dim;
  c.value_dim = layout.value_dim;
  c.page_size = layout.page_size;
  c.dtype = abi::dtype_code(layout.dtype);
  c.scale = layout.softmax_scale();
  c.rope_theta = layout.rope_theta.value_or(0.0);
  c.window = layout.window.value_or(0);
  c.sequences = config.sequences;
  c.poison = poison_code(config.poison);
  c.pool_pages = static_cast<int32_t>(pages.size());
  c.page_order = pages.data();
  c.softcap = layout.softcap.value_or(0.0);
  c.sinks = layout.sinks.empty() ? nullptr : layout.sinks.data();
  c.alibi_slopes = layout.alibi.empty() ? nullptr : layout.alibi.data();
  c.chunked_local = layout.chunked_local.value_or(0);
  c.k_format = static_cast<int32_t>(layout.k_format.quant);
  c.v_format = static_cast<int32_t>(layout.v_format.quant);
  c.k_scales = k_scales.empty() ? nullptr : k_scales.data();
  c.v_scales = v_scales.empty() ? nullptr : v_scales.data();
  c.value_from_key = layout.value_from_key ? 1 : 0;
  c.rope_style = layout.rope_style == RopeStyle::interleaved ? KVFUZZ_ROPE_INTERLEAVED
                                                             : KVFUZZ_ROPE_HALF_SPLIT;
  c.rope_dims = layout.rope_dims.value_or(0);
  c.k_group = layout.k_format.group;
  c.v_group = layout.v_format.group;
  return c;
}

}  // namespace

PluginEngine::PluginEngine(std::shared_ptr<PluginLibrary> library, const PluginEntry& entry,
                           const EngineConfig& config)
    : library_(std::move(library)),
      api_(entry.api),
      bitwise_(entry.bitwise),
      numerics_(entry.numerics),
      supports_(entry.supports),
      page_order_(config.page_order.begin(), config.page_order.end()),
      q_heads_(config.layout.q_heads),
      value_dim_(config.layout.value_dim) {
  const std::vector<double> k_scales = head_scales(config.layout.k_format, config.layout.kv_heads);
  const std::vector<double> v_scales = head_scales(config.layout.v_format, config.layout.kv_heads);
  const kvfuzz_engine_config c = abi_config(config, page_order_, k_scales, v_scales);
  const char* error = nullptr;
  const std::lock_guard<std::mutex> lock(library_->create_mutex);
  try {
    engine_ = api_.create(&c, &error);
  } catch (...) {
    throw EngineError("plugin create threw a C++ exception across the C ABI");
  }
  if (engine_ == nullptr) throw EngineError("plugin create failed: " + plugin_message(error));
  if (api_.numerics_of != nullptr) {
    try {
      numerics_ = numerics_of(entry);
    } catch (...) {
      api_.destroy(engine_);  // no destructor runs for a constructor that throws
      throw;
    }
  }
}

EngineNumerics PluginEngine::numerics_of(const PluginEntry& entry) {
  kvfuzz_engine_api copy = api_;
  copy.name = entry.name.c_str();
  copy.description = entry.description.c_str();
  call("numerics_of", [&](const char** error) { return api_.numerics_of(engine_, &copy, error); });
  // Read as the table's entries are read; only numerics may have changed.
  EngineDeclarations declared;
  if (const std::string problem = abi::read(copy, KVFUZZ_ENGINE_ABI_VERSION, declared);
      !problem.empty()) {
    throw EngineError("plugin numerics_of gave " + problem);
  }
  const kvfuzz_engine_api& before = api_;
  const bool same_functions = copy.create == before.create && copy.destroy == before.destroy &&
                              copy.step == before.step && copy.reset == before.reset &&
                              copy.truncate == before.truncate && copy.fork == before.fork &&
                              copy.numerics_of == before.numerics_of;
  const auto same = []<Declared Struct>(const Struct& a, const Struct& b) {
    bool equal = true;
    for_each_field<Struct>(
        [&](const auto& field) { equal = equal && a.*field.member == b.*field.member; });
    return equal;
  };
  if (!same(declared.capabilities, capabilities()) || !same(declared.bitwise, bitwise_) ||
      !same(declared.supports, supports_) || !same_functions || copy.name != entry.name.c_str() ||
      copy.description != entry.description.c_str() || copy.abi_version != before.abi_version ||
      copy.struct_size != before.struct_size || copy.mutant != before.mutant ||
      copy.reserved != before.reserved) {
    throw EngineError(
        "plugin numerics_of changed a declaration other than numerics (capabilities, bitwise "
        "claims, supports, the entry's name or functions); only numerics may follow the layout "
        "(kvfuzz/engine_abi.h)");
  }
  return declared.numerics;
}

PluginEngine::~PluginEngine() {
  try {
    api_.destroy(engine_);
  } catch (...) {
    // Nothing to report to: a destructor cannot throw, and the engine is gone either way.
  }
}

template <class Call>
void PluginEngine::call(const char* what, Call&& call) {
  const char* error = nullptr;
  int status = 0;
  try {
    status = std::forward<Call>(call)(&error);
  } catch (...) {
    throw EngineError(std::string("plugin ") + what + " threw a C++ exception across the C ABI");
  }
  if (status != 0) {
    throw EngineError(std::string("plugin ") + what + " failed: " + plugin_message(error));
  }
}

// api_ holds this ABI's struct (older entries were read over its defaults at load), whose
// capabilities flags are never refused: reading them cannot fail.
EngineCapabilities PluginEngine::capabilities() const {
  EngineCapabilities can;
  abi::read(api_, KVFUZZ_ENGINE_ABI_VERSION, can);
  return can;
}

void PluginEngine::step(std::span<const ChunkIn> chunks, std::span<ChunkOut> outs) {
  const size_t row_size = static_cast<size_t>(q_heads_) * static_cast<size_t>(value_dim_);
  ins_.resize(chunks.size());
  outs_.resize(chunks.size());
  for (size_t i = 0; i < chunks.size(); ++i) {
    const ChunkIn& in = chunks[i];
    ins_[i] = kvfuzz_chunk_in{in.seq, in.tokens, in.q.data(), in.k.data(), in.v.data()};
    // Pre-filled so that a row the plugin claims but never writes is a NaN at position -1,
    // which the comparator reports, instead of zeros that might pass.
    const size_t tokens = static_cast<size_t>(in.tokens);
    ChunkOut& out = outs[i];
    out.out.assign(tokens * row_size, std::numeric_limits<float>::quiet_NaN());
    out.positions.assign(tokens, -1);
    outs_[i] =
        kvfuzz_chunk_out{out.out.data(), static_cast<int64_t>(out.out.size()), out.positions.data(),
                         static_cast<int64_t>(out.positions.size()), -1};
  }
  call("step", [&](const char** error) {
    return api_.step(engine_, ins_.data(), outs_.data(), static_cast<int32_t>(ins_.size()), error);
  });
  for (size_t i = 0; i < chunks.size(); ++i) {
    if (outs_[i].rows != chunks[i].tokens) {
      throw EngineError("plugin step returned a wrong row count for chunk " + std::to_string(i) +
                        " (seq " + std::to_string(chunks[i].seq) +
                        "): " + std::to_string(outs_[i].rows) + " rows written, " +
                        std::to_string(chunks[i].tokens) + " tokens expected");
    }
  }
}

void PluginEngine::reset(int seq) {
  call("reset", [&](const char** error) { return api_.reset(engine_, seq, error); });
}

// The runner calls these only when capabilities() announces them, and the table check made
// sure an announced function is there; a direct caller gets the base class's refusal.
void PluginEngine::truncate(int seq, int64_t keep) {
  if (api_.truncate == nullptr || !capabilities().truncate) return Engine::truncate(seq, keep);
  call("truncate", [&](const char** error) { return api_.truncate(engine_, seq, keep, error); });
}

void PluginEngine::fork(int src, int dst) {
  if (api_.fork == nullptr || !capabilities().fork) return Engine::fork(src, dst);
  call("fork", [&](const char** error) { return api_.fork(engine_, src, dst, error); });
}

}  // namespace kvfuzz::doors
