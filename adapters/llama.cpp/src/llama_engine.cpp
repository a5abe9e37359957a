#include "llama_engine.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>

#include "ggml_types.h"
#include "kvfuzz/kv_format.h"
#include "llama.h"
#include "model/transformer.h"

namespace kvfuzz::llama_cpp {

namespace {

// llama.cpp's log, kept quiet: its last error line goes into the EngineError that a failed
// load or decode throws, nothing reaches kvfuzz's stderr.
std::string& last_error() {
  static std::string line;
  return line;
}

void quiet_log(ggml_log_level level, const char* text, void*) {
  if (level == GGML_LOG_LEVEL_ERROR && text) {
    std::string line = text;
    while (!line.empty() && (line.back() == '\n' || line.back() == ' ')) line.pop_back();
    if (!line.empty()) last_error() = line;
  }
}

void init_backend() {
  static std::once_flag once;
  std::call_once(once, [] {
    llama_log_set(quiet_log, nullptr);
    llama_backend_init();
  });
}

[[noreturn]] void fail(const std::string& what) {
  const std::string why = last_error().empty() ? "" : " (llama.cpp: " + last_error() + ")";
  throw EngineError("llama.cpp: " + what + why);
}

// A GGUF file of its own for each engine, removed as soon as llama.cpp has read it.
class TempFile {
 public:
  TempFile() {
    const char* dir = std::getenv("TMPDIR");
    path_ = std::string(dir && *dir ? dir : "/tmp") + "/kvfuzz-llama-XXXXXX.gguf";
    const int fd = mkstemps(path_.data(), 5);
    if (fd < 0) fail("cannot create a temporary file " + path_);
    close(fd);
  }
  ~TempFile() { std::remove(path_.c_str()); }
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

}  // namespace

struct LlamaCppEngine::State {
  llama_model* model = nullptr;
  llama_context* context = nullptr;
  int vocab = 0;
  ~State() {
    if (context) llama_free(context);
    if (model) llama_model_free(model);
  }
  llama_memory_t memory() const { return llama_get_memory(context); }
};

LlamaCppEngine::LlamaCppEngine(const ModelEngineConfig& config, const EngineOptions& options)
    : config_(config), options_(options) {
  length_.assign(static_cast<size_t>(std::max(1, config.engine.sequences)), 0);
}

// The model and context are made at the first call that needs them, not in the
// constructor: kvfuzz asks an engine for its declarations by making one for the smallest
// layout (no RoPE, head_dim 1), which the llama architecture cannot express.
LlamaCppEngine::State& LlamaCppEngine::state() {
  if (state_) return *state_;
  auto made = std::make_unique<State>();
  const ModelEngineConfig& config = config_;
  const EngineOptions& options = options_;
  init_backend();
  last_error().clear();
  const Layout& layout = config.engine.layout;
  if (const std::string why = unexpressible(layout); !why.empty())
    throw EngineError("llama.cpp: the llama architecture cannot express " + why);
  const int sequences = std::max(1, config.engine.sequences);
  {
    TempFile file;
    try {
      write_gguf(file.path(), config.model, layout, make_weights(config.model, layout),
                 options.bugs.model);
    } catch (const std::runtime_error& e) {
      fail(std::string("writing the GGUF model: ") + e.what());
    }
    llama_model_params mp = llama_model_default_params();
    mp.load_mode = LLAMA_LOAD_MODE_NONE;  // read, not mapped: the file goes right after
    mp.lazy_mode = LLAMA_LAZY_MODE_OFF;
    made->model = llama_model_load_from_file(file.path().c_str(), mp);
    if (!made->model) fail("llama_model_load_from_file failed");
  }
  made->vocab = config.model.vocab;

  llama_context_params cp = llama_context_default_params();
  // Without a unified cache each sequence has n_ctx / n_seq_max cells of its own.
  cp.n_seq_max = static_cast<uint32_t>(sequences);
  cp.n_ctx = static_cast<uint32_t>(kContextPerSequence * sequences);
  cp.n_batch = cp.n_ctx;  // a step may feed every sequence a full context
  cp.n_threads = 1;       // kvfuzz runs one worker per core
  cp.n_threads_batch = 1;
  // The cache's type: the layout's ggml block format (--cache-type-k / -v), else the dtype
  // the engine caches in.
  const DType dtype = options.cache == CacheType::f16 ? DType::f16 : DType::f32;
  KvFormat k_format = layout.k_format;
  if (options.bugs.k_as_q4_0 && is_ggml_block(k_format.quant)) k_format.quant = KvQuant::q4_0;
  cp.type_k = ggml_attention::cache_type(k_format, dtype);
  cp.type_v = ggml_attention::cache_type(layout.v_format, dtype);
  cp.flash_attn_type = options.attention == Attention::automatic ? LLAMA_FLASH_ATTN_TYPE_AUTO
                                                                 : LLAMA_FLASH_ATTN_TYPE_DISABLED;
  made->context = llama_init_from_model(made->model, cp);
  if (!made->context) fail("llama_init_from_model failed");
  state_ = std::move(made);
  return *state_;
}

LlamaCppEngine::~LlamaCppEngine() = default;

// What ggml-cpu does (the vendored ggml/src/ggml-cpu/ops.cpp and ggml-cpu.c), the README
// beside this folder says more.
EngineNumerics declared_numerics(const EngineOptions& options, const Layout& layout) {
  EngineNumerics n;
  // Keys are rotated in f32, then stored in the cache's type; ggml's RoPE computes its
  // angles in f32 (theta *= theta_scale, powf), not in double.
  n.rotated_keys_in_storage = true;
  n.rope_angles_exact = false;
  if (options.cache == CacheType::f32) return n;  // f32 throughout (no flash attention)
  if (options.attention == Attention::automatic) {
    // Flash attention over an f16 V cache accumulates exp(s - M) * v in an f16 vector
    // (ggml_vec_mad_f16) whenever a head has fewer query rows than a tile (decode and
    // short chunks), in f32 on the tiled path; q.k sums in f32 on both. Queries are
    // rounded to f16 on the first path but not on the tiled one: not declared either way.
    n.value_accumulation = DType::f16;
    // A V cache in a ggml block format: each row converted to f32 (v_to_float) and summed
    // in f32 (ggml_vec_mad_f32). Keys in one: q converted to the keys' vec_dot type, q8_0
    // (q8_1 for q4_1 and q5_1) blocks, before q.k (ggml_compute_forward_flash_attn_ext_f16_
    // one_chunk; neither the tiled nor the split path takes quantized keys).
    if (is_ggml_block(layout.v_format.quant)) n.value_accumulation = DType::f32;
    n.query_blocks = is_ggml_block(layout.k_format.quant);
  } else {
    // mul_mat(k, q) over an f16 cache converts q to f16 (the vec_dot type of f16) and sums
    // in f32; softmax in f32; mul_mat(v, P) converts P to f16 the same way.
    n.rotated_queries_in_storage = true;
    n.p = DType::f16;
  }
  return n;
}

EngineSupports declared_supports(const EngineOptions& options) {
  EngineSupports s;
  s.dtypes = {options.cache == CacheType::f16 ? DType::f16 : DType::f32};
  // The llama architecture (gguf_export.h, unexpressible): always RoPE over the whole head,
  // no sliding window, one head size.
  s.rope_required = true;
  s.windows = false;
  s.value_dim_is_head_dim = true;
  s.max_context = kContextPerSequence;
  // --cache-type-k and -v in ggml's blocks with flash attention (llama.cpp refuses a
  // quantized V cache without it).
  s.kv_ggml_blocks = options.cache == CacheType::f16 && options.attention == Attention::automatic;
  return s;
}

EngineNumerics LlamaCppEngine::numerics() const {
  return declared_numerics(options_, config_.engine.layout);
}
EngineSupports LlamaCppEngine::supports() const {
  return declared_supports(options_);
}

void LlamaCppEngine::step(std::span<const ModelChunkIn> chunks, std::span<ModelChunkOut> outs) {
  size_t tokens = 0;
  for (const ModelChunkIn& c : chunks) {
    if (c.seq < 0 || static_cast<size_t>(c.seq) >= length_.size())
      throw EngineError("llama.cpp: sequence " + std::to_string(c.seq) + " out of range");
    tokens += c.ids.size();
  }
  if (tokens == 0) {
    for (size_t i = 0; i < chunks.size(); ++i) outs[i] = {};
    return;
  }
  llama_batch batch = llama_batch_init(static_cast<int32_t>(tokens), 0, 1);
  struct BatchFree {
    llama_batch* b;
    ~BatchFree() { llama_batch_free(*b); }
  } batch_free{&batch};
  for (size_t i = 0; i < chunks.size(); ++i) {
    const ModelChunkIn& c = chunks[i];
    ModelChunkOut& out = outs[i];
    out.positions.clear();
    for (const int id : c.ids) {
      const int32_t at = batch.n_tokens++;
      const int64_t pos = length_[static_cast<size_t>(c.seq)]++;
      batch.token[at] = id;
      batch.pos[at] = static_cast<llama_pos>(pos);
      batch.n_seq_id[at] = 1;
      batch.seq_id[at][0] = c.seq;
      batch.logits[at] = 1;
      out.positions.push_back(pos);
    }
  }
  last_error().clear();
  if (const int32_t status = llama_decode(state().context, batch); status != 0)
    fail("llama_decode returned " + std::to_string(status));
  const auto vocab = static_cast<size_t>(state_->vocab);  // made by the decode above
  int32_t at = 0;
  for (size_t i = 0; i < chunks.size(); ++i) {
    ModelChunkOut& out = outs[i];
    out.logits.resize(chunks[i].ids.size() * vocab);
    for (size_t t = 0; t < chunks[i].ids.size(); ++t, ++at) {
      const float* row = llama_get_logits_ith(state_->context, at);
      if (!row) fail("no logits for batch token " + std::to_string(at));
      std::copy(row, row + vocab, out.logits.begin() + static_cast<ptrdiff_t>(t * vocab));
    }
  }
}

void LlamaCppEngine::reset(int seq) {
  llama_memory_seq_rm(state().memory(), seq, -1, -1);
  length_.at(static_cast<size_t>(seq)) = 0;
}

void LlamaCppEngine::truncate(int seq, int64_t keep) {
  const int64_t from = options_.bugs.truncate_keeps_one_more ? keep + 1 : keep;
  if (!llama_memory_seq_rm(state().memory(), seq, static_cast<llama_pos>(from), -1))
    fail("llama_memory_seq_rm(" + std::to_string(seq) + ", " + std::to_string(from) + ") failed");
  length_.at(static_cast<size_t>(seq)) = from;
}

void LlamaCppEngine::fork(int src, int dst) {
  llama_memory_seq_rm(state().memory(), dst, -1, -1);
  if (options_.bugs.fork_without_copy) {
    length_.at(static_cast<size_t>(dst)) = 0;
    return;
  }
  llama_memory_seq_cp(state().memory(), src, dst, -1, -1);
  length_.at(static_cast<size_t>(dst)) = length_.at(static_cast<size_t>(src));
}

std::vector<EngineInfo> engines() {
  const auto info = [](std::string name, std::string description, EngineOptions options) {
    EngineInfo e;
    e.name = std::move(name);
    e.description = std::move(description);
    e.mutant = options.bugs.model.skip_rope_permutation || options.bugs.model.skip_scale_fold ||
               options.bugs.truncate_keeps_one_more || options.bugs.fork_without_copy ||
               options.bugs.k_as_q4_0;
    e.make_model = [options](const ModelEngineConfig& config) -> std::unique_ptr<ModelEngine> {
      return std::make_unique<LlamaCppEngine>(config, options);
    };
    return e;
  };
  return {
      info("llama-cpp",
           "llama.cpp (CPU) running the scenario's model as a GGUF llama model with its "
           "defaults: f16 K/V cache, flash attention.",
           {.cache = CacheType::f16, .attention = Attention::automatic, .bugs = {}}),
      info("llama-cpp-unfused",
           "llama.cpp (CPU), f16 K/V cache, flash attention off (mul_mat, softmax, mul_mat).",
           {.cache = CacheType::f16, .attention = Attention::unfused, .bugs = {}}),
      info("llama-cpp-f32", "llama.cpp (CPU), f32 K/V cache, flash attention off.",
           {.cache = CacheType::f32, .attention = Attention::unfused, .bugs = {}}),
      // The negative controls, for `kvfuzz check` through the plugin door (ctest's
      // llama_cpp:check-mutant-*): llama-cpp with one mapping broken on purpose.
      info("llama-cpp-rope-unpermuted",
           "Mutant: llama-cpp with q and k written in kvfuzz's half-split lane order, so "
           "llama.cpp rotates the wrong pairs.",
           {.cache = CacheType::f16,
            .attention = Attention::automatic,
            .bugs = {.model = {.skip_rope_permutation = true, .skip_scale_fold = false}}}),
      info("llama-cpp-scale-unfolded",
           "Mutant: llama-cpp with the layout's softmax scale left out of wq and wk, so "
           "llama.cpp scales by 1/sqrt(head_dim) whatever the layout says.",
           {.cache = CacheType::f16,
            .attention = Attention::automatic,
            .bugs = {.model = {.skip_rope_permutation = false, .skip_scale_fold = true}}}),
      info("llama-cpp-truncate-keeps-one",
           "Mutant: llama-cpp whose truncate keeps one token more than asked.",
           {.cache = CacheType::f16,
            .attention = Attention::automatic,
            .bugs = {.model = {}, .truncate_keeps_one_more = true}}),
      info("llama-cpp-fork-without-copy",
           "Mutant: llama-cpp whose fork empties the destination instead of copying the "
           "source into it.",
           {.cache = CacheType::f16,
            .attention = Attention::automatic,
            .bugs = {.model = {}, .truncate_keeps_one_more = false, .fork_without_copy = true}}),
      info("llama-cpp-k-as-q4_0",
           "Mutant: llama-cpp whose K cache in a ggml block format is made as q4_0 whatever the "
           "format (--cache-type-k mapped wrong): right only for q4_0 keys.",
           {.cache = CacheType::f16,
            .attention = Attention::automatic,
            .bugs = {.model = {},
                     .truncate_keeps_one_more = false,
                     .fork_without_copy = false,
                     .k_as_q4_0 = true}})};
}

}  // namespace kvfuzz::llama_cpp
