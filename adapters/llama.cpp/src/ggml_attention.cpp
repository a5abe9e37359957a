#include "ggml_attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>

#include "cpu/attention_math.h"
#include "ggml-cpu.h"
#include "ggml.h"
#include "ggml_types.h"
#include "kvfuzz/kv_format.h"

namespace kvfuzz::ggml_attention {

namespace {

ggml_type float_type(DType dtype) {
  switch (dtype) {
    case DType::f32:
      return GGML_TYPE_F32;
    case DType::f16:
      return GGML_TYPE_F16;
    case DType::bf16:
      return GGML_TYPE_BF16;
  }
  return GGML_TYPE_F32;
}

// One row of n floats stored as `type`. The block formats go through ggml's reference
// quantizers (ggml_quantize_chunk: quantize_row_*_ref), which kvfuzz's formats are defined
// by; llama.cpp's set_rows would use the CPU backend's from_float, whose x86 q8_0 rounds
// ties to even where the reference rounds them away (README.md).
void store_row(ggml_type type, const float* x, int n, uint8_t* dst) {
  switch (type) {
    case GGML_TYPE_F32:
      std::memcpy(dst, x, static_cast<size_t>(n) * sizeof(float));
      return;
    case GGML_TYPE_F16:
      ggml_fp32_to_fp16_row(x, reinterpret_cast<ggml_fp16_t*>(dst), n);
      return;
    case GGML_TYPE_BF16:
      ggml_fp32_to_bf16_row_ref(x, reinterpret_cast<ggml_bf16_t*>(dst), n);
      return;
    default:
      ggml_quantize_chunk(type, x, dst, 0, 1, n, nullptr);
  }
}

// A ggml context freed at scope end.
struct Context {
  explicit Context(size_t bytes, bool no_alloc) {
    ctx = ggml_init({.mem_size = bytes, .mem_buffer = nullptr, .no_alloc = no_alloc});
    if (!ctx)
      throw EngineError("ggml attention: ggml_init failed (" + std::to_string(bytes) + " bytes)");
  }
  ~Context() { ggml_free(ctx); }
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;
  ggml_context* ctx;
};

constexpr float kMinusInf = -std::numeric_limits<float>::infinity();

// ggml's ALiBi schedule (max_bias 8: m0 = 2^-1 per head count, powf chains) equals the
// standard slopes bit for bit when the q heads' largest power of two is at most 8 (every
// base a power of two); supports() keeps q_heads at most 8.
bool standard_slopes(const Layout& layout) {
  return layout.alibi == standard_alibi_slopes(layout.q_heads);
}

}  // namespace

ggml_type cache_type(const KvFormat& format, DType dtype) {
  switch (format.quant) {
    case KvQuant::q8_0:
      return GGML_TYPE_Q8_0;
    case KvQuant::q4_0:
      return GGML_TYPE_Q4_0;
    case KvQuant::q4_1:
      return GGML_TYPE_Q4_1;
    case KvQuant::q5_0:
      return GGML_TYPE_Q5_0;
    case KvQuant::q5_1:
      return GGML_TYPE_Q5_1;
    case KvQuant::none:
      return float_type(dtype);
    default:
      throw EngineError("ggml attention: K/V format " + std::string(kv_quant_name(format.quant)) +
                        " is not a ggml type (the engine declares only ggml's blocks)");
  }
}

struct GgmlAttentionEngine::Sequence {
  int64_t length = 0;
  int64_t capacity = 0;
  std::vector<uint8_t> k;  // [capacity][kv_heads] rows of K's type
  // flash: [capacity][kv_heads] rows of V's type; matmul: [kv_heads][value_dim][capacity]
  // elements (the transposed cache llama.cpp keeps without flash attention)
  std::vector<uint8_t> v;
};

GgmlAttentionEngine::GgmlAttentionEngine(const EngineConfig& config, const Options& options)
    : config_(config), options_(options), sequences_(static_cast<size_t>(config.sequences)) {
  ggml_cpu_init();  // the CPU backend's tables and function pointers (idempotent)
}

GgmlAttentionEngine::~GgmlAttentionEngine() = default;

EngineNumerics declared_numerics(const Options& options, const Layout& layout) {
  EngineNumerics n;
  n.output = DType::f32;  // dst is f32
  // ggml_v_expf (the tiled path's and soft_max's exp): 1.45 + 0.5 ulps, vec.h.
  n.exp_ulps = 2;
  // The adapter rotates in f32 from double angles (cpu/attention_math.h), stores keys
  // rotated in the cache's type and hands ggml queries rounded to the dtype (as the flash
  // path's vec_dot converts them to K's type anyway; the tiled path would keep f32).
  n.rope_angles_exact = true;
  n.rotated_keys_in_storage = true;
  n.rotated_queries_in_storage = true;
  // ggml converts q to the K type's vec_dot_type: q8_0 (q8_1) blocks for a block K.
  n.query_blocks = !options.bugs.query_blocks_undeclared;
  if (options.path == Path::flash) {
    // ggml_compute_forward_flash_attn_ext_f16_one_chunk accumulates P.V in an f16 vector
    // (VKQ16, ggml_vec_mad_f16 / ggml_vec_scale_f16) when V is f16; f32 otherwise, and in
    // the tiled and split-KV paths. P stays f32; split partials are combined unnormalised.
    if (layout.dtype == DType::f16 && !layout.v_format.quantized()) {
      n.value_accumulation = DType::f16;
    }
  } else {
    // soft_max_ext normalises P in f32; the second mul_mat converts it to V's vec_dot_type.
    n.p_normalised = true;
    if (layout.dtype != DType::f32) n.p = layout.dtype;
  }
  return n;
}

EngineSupports declared_supports(const Options& options) {
  EngineSupports s;
  s.dtypes = {options.dtype};
  s.max_q_heads = 8;  // standard_slopes()
  s.softcap = true;
  s.sinks = true;
  s.alibi = true;
  s.chunked_local = true;
  // ggml's block types, K and V each (the matmul path's transposed V cannot be quantized:
  // llama.cpp refuses a quantized V without flash attention).
  s.kv_ggml_blocks = options.path == Path::flash;
  // RoPE is the adapter's own (cpu/attention_math.h, as the layout shapes it), before the
  // cache: any pairs, any part.
  s.rope_interleaved = true;
  s.rope_dims = true;
  // MLA as llama.cpp's DeepSeek graph caches it: no V cache, V a view of the K cache's
  // first value_dim elements (flash only: the matmul path's V is a transposed cache).
  s.value_from_key = options.path == Path::flash;
  return s;
}

EngineNumerics GgmlAttentionEngine::numerics() const {
  return declared_numerics(options_, config_.layout);
}

EngineSupports GgmlAttentionEngine::supports() const {
  return declared_supports(options_);
}

GgmlAttentionEngine::Sequence& GgmlAttentionEngine::sequence(int seq) {
  if (seq < 0 || seq >= static_cast<int>(sequences_.size())) {
    throw EngineError("ggml attention: no sequence " + std::to_string(seq));
  }
  return sequences_[static_cast<size_t>(seq)];
}

void GgmlAttentionEngine::step(std::span<const ChunkIn> chunks, std::span<ChunkOut> outs) {
  const Layout& l = config_.layout;
  const int hq = l.q_heads, hk = l.kv_heads, dk = l.head_dim, dv = l.value_dim;
  const bool flash = options_.path == Path::flash;
  const Bugs& bug = options_.bugs;
  KvFormat k_format = l.k_format;
  if (bug.k_as_q4_0 && is_ggml_block(k_format.quant)) k_format.quant = KvQuant::q4_0;
  const ggml_type kt = cache_type(k_format, l.dtype);
  const ggml_type vt = cache_type(l.v_format, l.dtype);
  if (!flash && ggml_is_quantized(vt)) {
    throw EngineError(
        "ggml attention: the matmul path cannot hold a quantized V (llama.cpp "
        "requires flash attention for one)");
  }
  // MLA: no V cache; V is a view of K's (ggml_flash_attn_ext below).
  const bool latent = flash && l.value_from_key;
  const size_t k_row = ggml_row_size(kt, dk);
  const size_t v_row = ggml_row_size(vt, dv);
  const size_t v_elem = ggml_type_size(vt);
  const double scale = l.softmax_scale();
  const float cap = static_cast<float>(l.softcap.value_or(0));
  const bool standard = !l.alibi.empty() && standard_slopes(l) != bug.alibi_own_as_standard;
  const bool own_alibi = !l.alibi.empty() && !standard;
  const std::vector<double> sinks = l.stored_sinks();

  // Append every chunk's K and V (the rotated keys at their positions) to its cache.
  const int rope_dims = static_cast<int>(l.rope_shape().dims);  // RoPE's angles are the part's
  std::vector<float> cos_b(static_cast<size_t>(dk / 2 + 1)), sin_b(cos_b.size()), row;
  for (const ChunkIn& c : chunks) {
    Sequence& s = sequence(c.seq);
    const int64_t need = s.length + c.tokens;
    if (need > s.capacity) {
      const int64_t capacity = std::max<int64_t>({need, 2 * s.capacity, 64});
      s.k.resize(static_cast<size_t>(capacity * hk) * k_row);
      if (flash) {
        if (!latent) s.v.resize(static_cast<size_t>(capacity * hk) * v_row);
      } else {
        std::vector<uint8_t> v(static_cast<size_t>(hk * dv * capacity) * v_elem);
        for (int64_t r = 0; s.length > 0 && r < static_cast<int64_t>(hk) * dv; ++r) {
          std::memcpy(v.data() + static_cast<size_t>(r * capacity) * v_elem,
                      s.v.data() + static_cast<size_t>(r * s.capacity) * v_elem,
                      static_cast<size_t>(s.length) * v_elem);
        }
        s.v = std::move(v);
      }
      s.capacity = capacity;
    }
    for (int t = 0; t < c.tokens; ++t) {
      const int64_t pos = s.length + t;
      if (l.rope_theta) cpu::rope_angles(rope_dims, pos, *l.rope_theta, cos_b.data(), sin_b.data());
      for (int g = 0; g < hk; ++g) {
        row.assign(c.k.begin() + (static_cast<ptrdiff_t>(t) * hk + g) * dk,
                   c.k.begin() + (static_cast<ptrdiff_t>(t) * hk + g + 1) * dk);
        if (l.rope_theta) {
          cpu::rope_apply(row.data(), l.rope_shape(), cos_b.data(), sin_b.data());
          // A rotated key in the layout's dtype before a block quantizer sees it, as
          // kvfuzz's reference stores a quantized rotated key (kv_format.h): with an f16
          // or bf16 K type the conversion does the same.
          for (float& x : row) x = round_to_dtype(x, l.dtype);
        }
        const int k_slot = bug.kv_heads_reversed ? hk - 1 - g : g;
        store_row(kt, row.data(), dk, s.k.data() + static_cast<size_t>(pos * hk + k_slot) * k_row);
        const float* v = c.v.data() + (static_cast<size_t>(t) * hk + g) * dv;
        if (latent) continue;
        if (flash) {
          store_row(vt, v, dv, s.v.data() + static_cast<size_t>(pos * hk + g) * v_row);
        } else {
          for (int d = 0; d < dv; ++d) {
            const size_t at =
                static_cast<size_t>((static_cast<int64_t>(g) * dv + d) * s.capacity + pos);
            store_row(vt, v + d, 1, s.v.data() + at * v_elem);
          }
        }
      }
    }
    s.length = need;
  }

  // One graph for the step: a node per chunk.
  size_t bytes = ggml_graph_overhead() + (1 << 20);
  for (const ChunkIn& c : chunks) {
    const size_t n_kv = static_cast<size_t>(sequence(c.seq).length);
    const size_t n_q = static_cast<size_t>(c.tokens);
    bytes += 32 * ggml_tensor_overhead() + 4 * n_q * hq * (dk + dv) + 2 * n_kv * n_q * hq + 4 * hq +
             5 * 4 * n_kv * n_q * hq + 256;
  }
  Context meta(64 * ggml_tensor_overhead() * (chunks.size() + 1), true);
  Context graph(bytes, false);
  ggml_context* ctx = graph.ctx;
  ggml_cgraph* gf = ggml_new_graph(ctx);
  std::vector<ggml_tensor*> results;
  for (const ChunkIn& c : chunks) {
    Sequence& s = sequence(c.seq);
    const int64_t n_kv = s.length, n_q = c.tokens, first = s.length - c.tokens;

    ggml_tensor* q = ggml_new_tensor_3d(ctx, GGML_TYPE_F32, dk, n_q, hq);
    auto* qd = static_cast<float*>(q->data);
    for (int t = 0; t < n_q; ++t) {
      if (l.rope_theta) {
        cpu::rope_angles(rope_dims, first + t, *l.rope_theta, cos_b.data(), sin_b.data());
      }
      for (int h = 0; h < hq; ++h) {
        float* dst = qd + (static_cast<size_t>(h) * n_q + t) * dk;
        std::copy_n(c.q.data() + (static_cast<size_t>(t) * hq + h) * dk, dk, dst);
        if (l.rope_theta) {
          cpu::rope_apply(dst, l.rope_shape(), cos_b.data(), sin_b.data());
          for (int d = 0; d < dk; ++d) dst[d] = round_to_dtype(dst[d], l.dtype);
        }
      }
    }
    // The mask: 0 where the key is visible, -inf elsewhere; with ALiBi the distance k - q
    // (ggml multiplies it by the head's slope for max_bias > 0) or, for slopes that are not
    // ggml's schedule, the bias itself per head (exact in f16: the generator's own slopes are
    // powers of two times distances below 2048).
    const int64_t mask_heads = own_alibi ? hq : 1;
    ggml_tensor* mask = ggml_new_tensor_3d(ctx, GGML_TYPE_F16, n_kv, n_q, mask_heads);
    auto* md = static_cast<ggml_fp16_t*>(mask->data);
    for (int64_t mh = 0; mh < mask_heads; ++mh) {
      const auto h = static_cast<size_t>(mh);
      for (int64_t t = 0; t < n_q; ++t) {
        const int64_t p = first + t;
        int64_t lo = l.first_visible(p);
        if (bug.window_one_more && l.window) lo = std::max<int64_t>(0, lo - 1);
        for (int64_t j = 0; j < n_kv; ++j) {
          float m = kMinusInf;
          if (j >= lo && j <= p) {
            const double distance = static_cast<double>(j - p);
            m = own_alibi ? static_cast<float>(l.alibi[h] * distance)
                          : (standard ? static_cast<float>(distance) : 0.0f);
          }
          md[(mh * n_q + t) * n_kv + j] = ggml_fp32_to_fp16(m);
        }
      }
    }
    const float max_bias = standard ? 8.0f : 0.0f;

    ggml_tensor* sink = nullptr;
    if (!sinks.empty()) {
      sink = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, hq);
      for (int h = 0; h < hq; ++h) {
        static_cast<float*>(sink->data)[h] =
            static_cast<float>(sinks[static_cast<size_t>(bug.sinks_reversed ? hq - 1 - h : h)]);
      }
    }

    ggml_tensor* k_all = ggml_new_tensor_1d(meta.ctx, kt, s.capacity * hk * dk);
    k_all->data = s.k.data();
    ggml_tensor* k = ggml_view_3d(ctx, k_all, dk, n_kv, hk, hk * k_row, k_row, 0);
    const float cap_arg = bug.softcap_unscaled ? cap * static_cast<float>(scale) : cap;
    ggml_tensor* out;
    if (flash) {
      ggml_tensor* v;
      if (latent) {  // llama.cpp's MLA: V a view of each K row's first dv elements
        const size_t at = bug.mla_value_at_key_end ? ggml_row_size(kt, dk - dv) : 0;
        v = ggml_view_3d(ctx, k_all, dv, n_kv, hk, hk * k_row, k_row, at);
      } else {
        ggml_tensor* v_all = ggml_new_tensor_1d(meta.ctx, vt, s.capacity * hk * dv);
        v_all->data = s.v.data();
        v = ggml_view_3d(ctx, v_all, dv, n_kv, hk, hk * v_row, v_row, 0);
      }
      out = ggml_flash_attn_ext(ctx, q, k, v, mask, static_cast<float>(scale), max_bias, cap_arg);
      if (sink) ggml_flash_attn_ext_add_sinks(out, sink);
    } else {
      ggml_tensor* v_all = ggml_new_tensor_1d(meta.ctx, vt, s.capacity * hk * dv);
      v_all->data = s.v.data();
      const size_t col = static_cast<size_t>(s.capacity) * v_elem;
      ggml_tensor* v = ggml_view_3d(ctx, v_all, n_kv, dv, hk, col, col * dv, 0);
      ggml_tensor* kq = ggml_mul_mat(ctx, k, q);  // [n_kv, n_q, hq]
      float softmax_scale = static_cast<float>(scale);
      if (cap > 0) {  // llama.cpp's build_attn_mha: scale by 1/cap, tanh, scale by cap
        kq = ggml_scale(ctx, kq, static_cast<float>(scale) / cap_arg);
        kq = ggml_tanh(ctx, kq);
        kq = ggml_scale(ctx, kq, cap_arg);
        softmax_scale = 1.0f;
      }
      kq = ggml_soft_max_ext(ctx, kq, mask, softmax_scale, max_bias);
      if (sink) ggml_soft_max_add_sinks(kq, sink);
      out = ggml_mul_mat(ctx, v, kq);  // [dv, n_q, hq]
    }
    ggml_build_forward_expand(gf, out);
    results.push_back(out);
  }

  ggml_cplan plan = ggml_graph_plan(gf, options_.threads, nullptr);
  std::vector<uint8_t> work(plan.work_size);
  plan.work_data = work.data();
  if (ggml_graph_compute(gf, &plan) != GGML_STATUS_SUCCESS) {
    throw EngineError("ggml attention: ggml_graph_compute failed");
  }

  for (size_t i = 0; i < chunks.size(); ++i) {
    const ChunkIn& c = chunks[i];
    const Sequence& s = sequence(c.seq);
    ChunkOut& o = outs[i];
    const int64_t n_q = c.tokens, first = s.length - c.tokens;
    o.out.assign(static_cast<size_t>(n_q * hq * dv), 0.0f);
    o.positions.resize(static_cast<size_t>(n_q));
    const ggml_tensor* r = results[i];
    const auto* rd = static_cast<const float*>(r->data);
    for (int64_t t = 0; t < n_q; ++t) {
      o.positions[static_cast<size_t>(t)] = first + t;
      for (int h = 0; h < hq; ++h) {
        const auto slot = static_cast<size_t>(h);
        // flash: [dv, hq, n_q]; matmul: [dv, n_q, hq]
        const size_t at = flash ? (static_cast<size_t>(t) * hq + slot) * dv
                                : (slot * static_cast<size_t>(n_q) + static_cast<size_t>(t)) * dv;
        std::copy_n(rd + at, dv, o.out.data() + (static_cast<size_t>(t) * hq + h) * dv);
      }
    }
  }
}

void GgmlAttentionEngine::reset(int seq) {
  sequence(seq).length = 0;
}

void GgmlAttentionEngine::truncate(int seq, int64_t keep) {
  Sequence& s = sequence(seq);
  if (keep < 0 || keep > s.length) {
    throw EngineError("ggml attention: truncate of seq " + std::to_string(seq) + " to " +
                      std::to_string(keep) + " tokens, which holds " + std::to_string(s.length));
  }
  s.length = keep;
}

void GgmlAttentionEngine::fork(int src, int dst) {
  sequence(dst) = sequence(src);
}

std::vector<EngineInfo> engines() {
  const auto info = [](std::string name, std::string description, Options options, bool mutant) {
    EngineInfo e;
    e.name = std::move(name);
    e.description = std::move(description);
    e.mutant = mutant;
    e.make = [options](const EngineConfig& config) -> std::unique_ptr<Engine> {
      return std::make_unique<GgmlAttentionEngine>(config, options);
    };
    return e;
  };
  std::vector<EngineInfo> list;
  for (const DType dtype : {DType::f32, DType::f16, DType::bf16}) {
    const std::string d(dtype_name(dtype));
    list.push_back(info("ggml-flash-" + d,
                        "ggml_flash_attn_ext on ggml's CPU backend over a " + d +
                            " K/V cache (llama.cpp's attention with flash attention on).",
                        {.path = Path::flash, .dtype = dtype, .threads = 1, .bugs = {}}, false));
    list.push_back(info("ggml-matmul-" + d,
                        "mul_mat, soft_max_ext, mul_mat on ggml's CPU backend over a " + d +
                            " K/V cache, V transposed (llama.cpp's attention with flash "
                            "attention off).",
                        {.path = Path::matmul, .dtype = dtype, .threads = 1, .bugs = {}}, false));
  }
  // Two threads: the split-KV decode (512 keys or more) combines two partials, and the rows
  // are shared out in chunks. (ggml's threads spin at their barriers: give such an engine
  // as many cores as threads, or it crawls.)
  for (const DType dtype : {DType::f32, DType::f16}) {
    const std::string d(dtype_name(dtype));
    list.push_back(info("ggml-flash-" + d + "-t2",
                        "ggml-flash-" + d + " computed by two threads of ggml's CPU backend.",
                        {.path = Path::flash, .dtype = dtype, .threads = 2, .bugs = {}}, false));
  }
  const auto control = [&](std::string name, std::string what, bool Bugs::*bug, Path path) {
    Options options{.path = path, .dtype = DType::f16, .threads = 1, .bugs = {}};
    options.bugs.*bug = true;
    list.push_back(info(std::move(name), "Mutant: " + std::move(what), options, true));
  };
  control("ggml-flash-bug-window", "ggml-flash-f16 whose mask shows a window one key more.",
          &Bugs::window_one_more, Path::flash);
  control("ggml-flash-bug-softcap",
          "ggml-flash-f16 given the cap times the softmax scale as logit_softcap.",
          &Bugs::softcap_unscaled, Path::flash);
  control("ggml-flash-bug-sinks", "ggml-flash-f16 with the q heads' sinks reversed.",
          &Bugs::sinks_reversed, Path::flash);
  control("ggml-flash-bug-alibi",
          "ggml-flash-f16 that gives every ALiBi layout ggml's max_bias 8 schedule.",
          &Bugs::alibi_own_as_standard, Path::flash);
  control("ggml-flash-bug-gqa", "ggml-flash-f16 that stores K's kv heads in reverse order.",
          &Bugs::kv_heads_reversed, Path::flash);
  control("ggml-flash-bug-k-format",
          "ggml-flash-f16 that stores every K block format (q8_0, q4_1, ...) as q4_0.",
          &Bugs::k_as_q4_0, Path::flash);
  control("ggml-flash-bug-query-blocks",
          "ggml-flash-f16, honest, but not declaring that ggml quantizes q to q8_0 blocks "
          "for a block-quantized K.",
          &Bugs::query_blocks_undeclared, Path::flash);
  control("ggml-flash-bug-mla-value",
          "ggml-flash-f16 whose MLA V view starts at the key row's last value_dim elements "
          "instead of its first.",
          &Bugs::mla_value_at_key_end, Path::flash);
  control("ggml-matmul-bug-window", "ggml-matmul-f16 whose mask shows a window one key more.",
          &Bugs::window_one_more, Path::matmul);
  return list;
}

}  // namespace kvfuzz::ggml_attention
