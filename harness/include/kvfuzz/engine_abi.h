/* The kvfuzz engine plugin ABI, version 7: an engine in a shared library, in C.
 *
 *   kvfuzz check --engine plugin:./libmy_engine.so            (the library's only engine)
 *   kvfuzz check --engine plugin:./libmy_engine.so:my-engine  (one of several, by name)
 *
 * A plugin exports one function, kvfuzz_engine_plugin(), returning a table of engines. Each
 * engine is a set of function pointers over an opaque handle, and the declarations that
 * tell kvfuzz how to judge it. kvfuzz owns every buffer it passes in; the plugin owns its
 * handles and its error strings. Walk-through: docs/writing-an-engine.md; the built-in
 * engines exported this way: plugins/builtin.
 *
 * The contract (the same as the C++ interface, kvfuzz/engine.h):
 *   - kvfuzz never tells the engine positions. The engine assigns an absolute position to
 *     every token it is fed and reports it with the token's row.
 *   - Arrays are token-major floats, already rounded to the layout's dtype:
 *       q[token][q_head][head_dim], k[token][kv_head][head_dim], v[token][kv_head][value_dim]
 *       out[token][q_head][value_dim]
 *   - Query head h reads kv head h / (q_heads / kv_heads).
 *   - Every call but destroy returns 0 on success. On failure it returns non-zero and points
 *     *error at a NUL-terminated message that stays valid until the next call on the same
 *     handle (for create: until the next create). kvfuzz reports it as an engine error.
 *   - Calls on one handle never overlap; different handles may live at the same time.
 *   - The plugin runs in kvfuzz's process, on kvfuzz's thread, with no timeout: a call that
 *     never returns hangs kvfuzz, and one that crashes or corrupts memory takes kvfuzz
 *     with it. (exec: engines run in a process of their own, with timeouts.)
 *
 * The table: kvfuzz calls kvfuzz_engine_plugin() when it loads the library (once per
 * process, for a table it accepts), checks the table and copies it (every entry, with its
 * name and description strings) before making any engine. It never reads the plugin's
 * table again: changing or freeing it afterwards changes nothing kvfuzz calls. Every
 * declaration of an entry (capabilities, bitwise claims, numerics, supports) is one value
 * for every layout, as with the C++ interface.
 *
 * Versioning. kvfuzz speaks ABI 7 and still reads ABI 1 to 6; no other version is
 * accepted.
 * Every entry begins with its abi_version and struct_size, the size of that version's
 * kvfuzz_engine_api. kvfuzz reads only the fields within that size; the fields a version
 * lacks take kvfuzz_engine_api_defaults()' values, which say what that version meant, so
 * a plugin built against an older header loads unchanged and is judged as it was.
 *   - ABI 1: kvfuzz_engine_api up to `fork` (KVFUZZ_ENGINE_API_V1_SIZE): no declarations
 *     (no bitwise claims, f32 numerics, every storage dtype and layout supported).
 *   - ABI 2, up to `rope_angles_exact` (KVFUZZ_ENGINE_API_V2_SIZE), adds the declarations:
 *     bitwise claims, output, P and accumulation dtypes, rotated keys and queries in
 *     storage, exact RoPE angles, storage dtypes, layout limits, value_dim == head_dim.
 *   - ABI 3, up to `reserved` (KVFUZZ_ENGINE_API_V3_SIZE), adds `supports`, the
 *     KVFUZZ_SUPPORTS_* flags (RoPE required, no sliding windows), and `reserved`; an ABI 2
 *     entry declares neither flag.
 *   - ABI 4, up to `exp_ulps` (KVFUZZ_ENGINE_API_V4_SIZE), adds `numerics`, the
 *     KVFUZZ_NUMERICS_* flags (split partials combined by log-sum-exp, P normalised before
 *     it is rounded),
 *     `split_partials_dtype`, `rope_tables_dtype` and `exp_ulps` (first `reserved2`, which
 *     kvfuzz refused unless 0, the value that still means a one-ulp exp); an ABI 3 entry
 *     declares neither flag, f32 partials, f32 RoPE tables and a one-ulp exp.
 *   - ABI 5 (sizeof(kvfuzz_engine_api)) adds `numerics_of`: an engine's numerics for its own
 *     layout (one that computes in the storage dtype declares per dtype); an ABI 4 entry
 *     declares the same numerics for every layout.
 *   - ABI 6 (the same kvfuzz_engine_api) adds the attention features: kvfuzz_engine_config's
 *     softcap, sinks, alibi_slopes and chunked_local, and the KVFUZZ_SUPPORTS_SOFTCAP,
 *     _SINKS, _ALIBI and _CHUNKED_LOCAL flags that ask for them; an ABI 5 entry declares
 *     none, and its engines never get a layout with a feature.
 *   - ABI 7 (the same kvfuzz_engine_api) adds the quantized KV caches: kvfuzz_engine_config's
 *     k_format, v_format, k_scales and v_scales, and the KVFUZZ_SUPPORTS_KV_FP8 and
 *     _KV_GGML_BLOCKS flags that ask for them; an ABI 6 entry declares neither, and its
 *     engines never get a quantized layout.
 *   - ABI 8 (the same kvfuzz_engine_api) adds MLA's value read from its key:
 *     kvfuzz_engine_config's value_from_key and the KVFUZZ_SUPPORTS_VALUE_FROM_KEY flag that
 *     asks for it; an ABI 7 entry does not declare it, and its engines never get such a
 *     layout.
 *   - ABI 9 (the same kvfuzz_engine_api) adds MLX's affine KV groups: the KVFUZZ_KV_AFFINE*
 *     formats, kvfuzz_engine_config's k_group and v_group, and the KVFUZZ_SUPPORTS_KV_AFFINE
 *     flag that asks for them; an ABI 8 entry does not declare it, and its engines never get
 *     such a layout.
 *   - ABI 10 (the same kvfuzz_engine_api) adds RoPE's interleaved pairs:
 *     kvfuzz_engine_config's rope_style and the KVFUZZ_SUPPORTS_ROPE_INTERLEAVED flag that
 *     asks for them; an ABI 9 entry does not declare it, and its engines get RoPE in
 *     half-split pairs only.
 *   - ABI 11 (the same kvfuzz_engine_api) adds RoPE on part of the head (MLA's decoupled
 *     RoPE part): kvfuzz_engine_config's rope_dims and the KVFUZZ_SUPPORTS_ROPE_DIMS flag that
 *     asks for it; an ABI 10 entry does not declare it, and its engines get RoPE over the
 *     whole head only.
 * kvfuzz refuses a declaration out of range at load, naming the entry and the field.
 * kvfuzz_engine_api_defaults() gives an entry of this version whose declarations are
 * ABI 1's.
 * A table's abi_version says which: every entry carries the same abi_version and a
 * struct_size of exactly that version's size, because kvfuzz walks engines[] with it as
 * the stride. Any change to the layout of any struct here, a field added at the end
 * included, bumps KVFUZZ_ENGINE_ABI_VERSION and names the old size (as
 * KVFUZZ_ENGINE_API_V2_SIZE); the fields of an older version never move, so an older
 * plugin keeps loading as long as kvfuzz still reads its version. A new flag in an
 * existing flags field needs no new version: an older kvfuzz refuses a bit it does not
 * know, naming it, and a plugin that leaves it out means what it meant.
 * Inside kvfuzz, one table (harness/src/doors/abi_fields.h) says which C++ declaration
 * (kvfuzz/engine.h) each field or flag here carries, and since which version; a new
 * declaration field gets its slot there, and here, before kvfuzz builds.
 */
#ifndef KVFUZZ_ENGINE_ABI_H
#define KVFUZZ_ENGINE_ABI_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#ifdef __cplusplus
extern "C" {
#endif

#define KVFUZZ_ENGINE_ABI_VERSION 11

/* kvfuzz_engine_config.dtype, and the dtypes of kvfuzz_engine_api's numerics */
#define KVFUZZ_DTYPE_F32 0
#define KVFUZZ_DTYPE_F16 1
#define KVFUZZ_DTYPE_BF16 2
/* kvfuzz_engine_api.p_dtype: P is not rounded to a dtype of its own. */
#define KVFUZZ_DTYPE_NONE (-1)

/* kvfuzz_engine_config.poison: what a paged engine writes into slots that hold no token. */
#define KVFUZZ_POISON_NAN 0
#define KVFUZZ_POISON_POS_INF 1
#define KVFUZZ_POISON_NEG_INF 2
#define KVFUZZ_POISON_HUGE 3

/* kvfuzz_engine_api.capabilities: the optional operations. The generator leaves out what an
 * engine does not announce, and kvfuzz never calls a function whose flag is absent. The
 * flags are one value per entry and must hold for every layout: kvfuzz reads them once
 * (making one engine, for a small layout, to ask) and then sends the operations they
 * announce to engines of any layout. An engine that can truncate or fork only for some
 * layouts announces neither. */
#define KVFUZZ_CAN_TRUNCATE 1u
#define KVFUZZ_CAN_FORK 2u

/* kvfuzz_engine_api.bitwise (ABI 2): the invariances the engine keeps bit for bit, as
 * deterministic-inference engines do; kvfuzz then judges that property's variants by
 * exact equality instead of its tolerance (kvfuzz/engine.h, BitwiseClaims). */
#define KVFUZZ_BITWISE_BATCH 1u    /* batch composition, a sequence's place in the batch */
#define KVFUZZ_BITWISE_SCHEDULE 2u /* the chunk schedule */
#define KVFUZZ_BITWISE_LAYOUT 4u   /* page size and physical page order */
#define KVFUZZ_BITWISE_POISON 8u   /* what bytes outside the valid prefix hold */

/* kvfuzz_engine_api.supports (ABI 3): layouts the engine cannot take beyond its limits;
 * kvfuzz generates none of them for it and skips a fixture that has one
 * (kvfuzz/engine.h, EngineSupports). */
#define KVFUZZ_SUPPORTS_ROPE_REQUIRED 1u /* only layouts with RoPE (rope_theta != 0) */
#define KVFUZZ_SUPPORTS_NO_WINDOWS 2u    /* only layouts without a sliding window */
/* ABI 6: the attention features the engine computes (off unless declared; the layout's
 * values arrive in kvfuzz_engine_config's ABI 6 fields). */
#define KVFUZZ_SUPPORTS_SOFTCAP 4u        /* config.softcap */
#define KVFUZZ_SUPPORTS_SINKS 8u          /* config.sinks */
#define KVFUZZ_SUPPORTS_ALIBI 16u         /* config.alibi_slopes */
#define KVFUZZ_SUPPORTS_CHUNKED_LOCAL 32u /* config.chunked_local */
/* ABI 7: the quantized KV caches the engine stores (config.k_format and v_format). */
#define KVFUZZ_SUPPORTS_KV_FP8 64u          /* KVFUZZ_KV_FP8_E4M3FN, _FP8_E5M2 */
#define KVFUZZ_SUPPORTS_KV_GGML_BLOCKS 128u /* KVFUZZ_KV_Q8_0, _Q4_0, _Q4_1, _Q5_0, _Q5_1 */
/* ABI 8: MLA's value read from its key (config.value_from_key). */
#define KVFUZZ_SUPPORTS_VALUE_FROM_KEY 256u
/* ABI 9: MLX's affine KV groups (config.k_format and v_format KVFUZZ_KV_AFFINE*, with
 * config.k_group and v_group). */
#define KVFUZZ_SUPPORTS_KV_AFFINE 512u
/* Narrower quantized caches (ABI 9, new flags in the same word): K and V in one format, both
 * or neither, as vLLM's kv_cache_dtype; one fp8 scale per tensor (every kv head's entry of
 * config.k_scales, and of v_scales, the same), not one per kv head. An engine without them
 * gets every combination its KV flags allow. */
#define KVFUZZ_SUPPORTS_KV_ONE_FORMAT 1024u
#define KVFUZZ_SUPPORTS_KV_TENSOR_SCALES 2048u
/* ABI 10: RoPE's interleaved pairs (config.rope_style KVFUZZ_ROPE_INTERLEAVED). */
#define KVFUZZ_SUPPORTS_ROPE_INTERLEAVED 4096u
/* ABI 11: RoPE on the head's last config.rope_dims elements only. */
#define KVFUZZ_SUPPORTS_ROPE_DIMS 8192u
/* ABI 11, a flag added later (an older kvfuzz refuses the bit, naming it): keys quantized by
 * channel over groups of config.k_group positions (config.k_format KVFUZZ_KV_CHANNEL_U8 or
 * _U4; docs/fixture-format.md). */
#define KVFUZZ_SUPPORTS_KV_CHANNEL 16384u

/* kvfuzz_engine_config.rope_style (ABI 10): which elements RoPE turns together. Pair
 * i < head_dim / 2 turns by pos * rope_theta^(-2i / head_dim) in both. */
#define KVFUZZ_ROPE_HALF_SPLIT 0  /* (x_i, x_{i + head_dim/2}): NeoX's rotate_half */
#define KVFUZZ_ROPE_INTERLEAVED 1 /* (x_{2i}, x_{2i+1}): GPT-J's, ggml's normal mode */

/* kvfuzz_engine_config.k_format and v_format (ABI 7): how the cache stores K and V
 * (kvfuzz/kv_format.h; docs/fixture-format.md, "Quantized KV caches"). */
#define KVFUZZ_KV_NONE 0 /* in the layout's dtype */
#define KVFUZZ_KV_FP8_E4M3FN 1
#define KVFUZZ_KV_FP8_E5M2 2
#define KVFUZZ_KV_Q8_0 3
#define KVFUZZ_KV_Q4_0 4
#define KVFUZZ_KV_Q4_1 5
#define KVFUZZ_KV_Q5_0 6
#define KVFUZZ_KV_Q5_1 7
/* ABI 9: MLX's affine groups of config.k_group (v_group) elements, 2, 4 or 8 bits a quant:
 * each group's scale and bias in f32 from its extremes (mlx::core::quantize), rounded to
 * `dtype`, read back as scale * q + bias in f32 (docs/fixture-format.md). */
#define KVFUZZ_KV_AFFINE2 8
#define KVFUZZ_KV_AFFINE4 9
#define KVFUZZ_KV_AFFINE8 10
/* With KVFUZZ_SUPPORTS_KV_CHANNEL: K only, quantized by channel over groups of
 * config.k_group positions (16, 32, 64 or 128) once the cache holds a group whole, 8 or 4
 * bits a quant, each channel's scale (hi - lo) / levels and lo in f32, read back as
 * q * scale + lo in f32 (OpenVINO's BY_CHANNEL keys, KIVI's; docs/fixture-format.md). */
#define KVFUZZ_KV_CHANNEL_U8 11
#define KVFUZZ_KV_CHANNEL_U4 12

/* kvfuzz_engine_api.numerics (ABI 4): how the engine's arithmetic departs from the plain
 * forms (kvfuzz/engine.h, EngineNumerics::split_combine_lse and p_normalised). */
#define KVFUZZ_NUMERICS_SPLIT_COMBINE_LSE            \
  1u /* partials combined as normalised O_s with f32 \
        log-sum-exps, weights exp(lse_s - lse) */
#define KVFUZZ_NUMERICS_P_NORMALISED             \
  2u /* P divided by the normaliser before it is \
        rounded to p_dtype */
#define KVFUZZ_NUMERICS_QUERY_BLOCKS                  \
  4u /* with K in a ggml block format: q quantized to \
        ggml's q8_0 (q8_1) blocks before q.k */

typedef struct kvfuzz_engine_config {
  /* sizeof(kvfuzz_engine_config) as kvfuzz was built: create can compare it with its own
   * sizeof before reading further and refuse a config of another layout. */
  uint32_t struct_size;
  int32_t q_heads;
  int32_t kv_heads; /* divides q_heads: MHA (equal), GQA, MQA (1) */
  int32_t head_dim;
  int32_t value_dim;
  int32_t page_size;  /* tokens per page, for engines that page their cache */
  int32_t dtype;      /* KVFUZZ_DTYPE_* */
  double scale;       /* softmax scale, always set (1/sqrt(head_dim) unless the fixture says) */
  double rope_theta;  /* RoPE (half-split, NeoX style) with this base; 0: no RoPE */
  int32_t window;     /* sliding window: the query at p sees keys [p - window + 1, p]; 0: none */
  int32_t sequences;  /* sequences are numbered 0 .. sequences-1 */
  int32_t poison;     /* KVFUZZ_POISON_* */
  int32_t pool_pages; /* physical pages available ... */
  const int32_t* page_order; /* ... handed out in this order (a permutation of 0..pool_pages-1) */

  /* ABI 6: the attention features (docs/fixture-format.md, "Attention features"). Zero or
   * NULL: off. An engine gets one only when it declares its KVFUZZ_SUPPORTS_* flag. A
   * logit is scale * q.k, then soft-capped, then biased by ALiBi; a sink joins the softmax
   * with its logit and no value. */
  double softcap;             /* logit -> softcap * tanh(logit / softcap) */
  const double* sinks;        /* q_heads sink logits, one per q head */
  const double* alibi_slopes; /* q_heads slopes: logit += slope[h] * (key pos - query pos) */
  int32_t chunked_local;      /* the query at p sees keys from floor(p / C) * C on */

  /* ABI 7: the quantized KV caches. KVFUZZ_KV_NONE: K (V) is stored in `dtype`. An engine
   * gets a format only when it declares its KVFUZZ_SUPPORTS_KV_* flag. fp8: an element x of
   * kv head g is stored as fp8(x / scales[g]) and read back as fp8 * scales[g] (kv_heads
   * scales, all equal for a per-tensor scale); a ggml block format: NULL scales. */
  int32_t k_format;       /* KVFUZZ_KV_* */
  int32_t v_format;       /* KVFUZZ_KV_* */
  const double* k_scales; /* kv_heads scales (fp8), else NULL */
  const double* v_scales; /* kv_heads scales (fp8), else NULL */

  /* ABI 8: multi-head latent attention as MLA kernels see it. Nonzero: each value is its
   * key's first value_dim elements (value_dim <= head_dim; the chunks' v holds exactly
   * those), so an engine may cache the key's row alone and read the value from it. An
   * engine gets it only when it declares KVFUZZ_SUPPORTS_VALUE_FROM_KEY. */
  int32_t value_from_key;

  /* ABI 9: an affine format's group size (32, 64 or 128) for K and for V; 0 for the other
   * formats. An engine gets one only when it declares KVFUZZ_SUPPORTS_KV_AFFINE. */
  int32_t k_group;
  int32_t v_group;

  /* ABI 10: KVFUZZ_ROPE_* (with rope_theta). An engine gets KVFUZZ_ROPE_INTERLEAVED only when
   * it declares KVFUZZ_SUPPORTS_ROPE_INTERLEAVED. */
  int32_t rope_style;

  /* ABI 11: with rope_theta, RoPE turns only the head's last rope_dims elements of each q
   * and k head (pair i < rope_dims / 2 by pos * rope_theta^(-2i / rope_dims), its elements
   * counted from head_dim - rope_dims); the elements before them stay (MLA's latent part).
   * 0: the whole head. An engine gets another value only when it declares
   * KVFUZZ_SUPPORTS_ROPE_DIMS. */
  int32_t rope_dims;
} kvfuzz_engine_config;

/* sizeof(kvfuzz_engine_config) up to ABI 5, whose fields are this struct's up to
 * page_order. kvfuzz sends the whole struct; a plugin built against ABI 5 reads its part. */
#define KVFUZZ_ENGINE_CONFIG_V5_SIZE offsetof(kvfuzz_engine_config, softcap)
/* ... and up to ABI 6: up to chunked_local. */
#define KVFUZZ_ENGINE_CONFIG_V6_SIZE offsetof(kvfuzz_engine_config, k_format)
/* ... and up to ABI 7: up to v_scales. */
#define KVFUZZ_ENGINE_CONFIG_V7_SIZE offsetof(kvfuzz_engine_config, value_from_key)
/* ... and up to ABI 8: up to value_from_key. */
#define KVFUZZ_ENGINE_CONFIG_V8_SIZE offsetof(kvfuzz_engine_config, k_group)
/* ... and up to ABI 9: up to v_group. */
#define KVFUZZ_ENGINE_CONFIG_V9_SIZE offsetof(kvfuzz_engine_config, rope_style)
/* ... and up to ABI 10: up to rope_style. */
#define KVFUZZ_ENGINE_CONFIG_V10_SIZE offsetof(kvfuzz_engine_config, rope_dims)

/* One sequence's new tokens in a batched forward. */
typedef struct kvfuzz_chunk_in {
  int32_t seq;
  int32_t tokens;
  const float* q; /* tokens * q_heads * head_dim */
  const float* k; /* tokens * kv_heads * head_dim */
  const float* v; /* tokens * kv_heads * value_dim */
} kvfuzz_chunk_in;

/* Where the engine writes that chunk's rows. The buffers belong to kvfuzz and have room
 * for exactly the chunk: out_capacity == tokens * q_heads * value_dim floats and
 * positions_capacity == tokens. The engine sets rows to the number of token rows it wrote
 * (kvfuzz reports anything but `tokens` as a wrongly shaped chunk). */
typedef struct kvfuzz_chunk_out {
  float* out;
  int64_t out_capacity;
  int64_t* positions;
  int64_t positions_capacity;
  int64_t rows;
} kvfuzz_chunk_out;

typedef struct kvfuzz_engine kvfuzz_engine; /* the plugin's own engine state */

typedef struct kvfuzz_engine_api {
  uint32_t abi_version;    /* KVFUZZ_ENGINE_ABI_VERSION, as in the table */
  uint32_t struct_size;    /* exactly sizeof(kvfuzz_engine_api) (ABI 1: ..._V1_SIZE) */
  const char* name;        /* [A-Za-z0-9._-]+, unique within the plugin */
  const char* description; /* one sentence: valid UTF-8, no control characters; or NULL */
  uint32_t capabilities;   /* KVFUZZ_CAN_* */
  uint32_t mutant;         /* 1: deliberately wrong, kvfuzz check expects it to fail */

  /* A new engine for this layout, with every sequence empty. NULL and *error on failure. */
  kvfuzz_engine* (*create)(const kvfuzz_engine_config* config, const char** error);
  void (*destroy)(kvfuzz_engine* engine);
  /* One batched forward: append each chunk's tokens to its sequence (chunks name distinct
   * sequences) and write one row per new token into outs[i]. */
  int (*step)(kvfuzz_engine* engine, const kvfuzz_chunk_in* chunks, kvfuzz_chunk_out* outs,
              int32_t count, const char** error);
  /* A new request on `seq`: positions start at 0 again and its old K/V are gone. */
  int (*reset)(kvfuzz_engine* engine, int32_t seq, const char** error);
  /* KVFUZZ_CAN_TRUNCATE: keep the first `keep` tokens of `seq` (0 <= keep <= its length);
   * the next token fed to it gets position `keep`. NULL when not announced. */
  int (*truncate)(kvfuzz_engine* engine, int32_t seq, int64_t keep, const char** error);
  /* KVFUZZ_CAN_FORK: `dst` drops what it held and starts with the tokens of `src`
   * (src != dst); both may grow independently afterwards. NULL when not announced. */
  int (*fork)(kvfuzz_engine* engine, int32_t src, int32_t dst, const char** error);

  /* ABI 2: the declarations (kvfuzz/engine.h, EngineNumerics and EngineSupports, says
   * what the judge does with each; docs/writing-an-engine.md, "Numerics"). */
  uint32_t bitwise;                /* KVFUZZ_BITWISE_* */
  int32_t output_dtype;            /* KVFUZZ_DTYPE_*: every returned value is rounded to it */
  int32_t p_dtype;                 /* KVFUZZ_DTYPE_F16, _BF16: softmax weights rounded to it
                                      before P.V; KVFUZZ_DTYPE_NONE: not rounded */
  int32_t score_accumulation;      /* KVFUZZ_DTYPE_F32 or _F16: the running sums of q.k */
  int32_t value_accumulation;      /* KVFUZZ_DTYPE_F32 or _F16: the running sums of P.V */
  int32_t rotated_keys_in_storage; /* with RoPE: 1 keys cached rotated, in the storage
                                      dtype; 0 unrotated or at f32; -1 not declared */
  uint32_t dtypes;                 /* storage dtypes it takes: bits 1u << KVFUZZ_DTYPE_*; 0 all */
  int32_t head_dim_multiple;       /* head_dim and value_dim are multiples of it; 0 or 1: any */
  int32_t max_head_dim;            /* the limits: 0 is none beyond kvfuzz's own */
  int32_t max_q_heads;
  int32_t max_context;                /* tokens of one sequence between resets */
  int32_t rotated_queries_in_storage; /* with RoPE: 1 rotated queries rounded to the storage
                                         dtype before q.k; 0 or -1: kept in f32 */
  uint32_t value_dim_is_head_dim;     /* 1: only layouts with value_dim == head_dim */
  int32_t rope_angles_exact;          /* with RoPE: 1 angles computed in double; 0 or -1: may be
                                         in f32 (an angle error growing with the position is
                                         tolerated) */

  /* ABI 3 */
  uint32_t supports; /* KVFUZZ_SUPPORTS_* flags; 0: every layout the fields above allow */
  uint32_t reserved; /* 0; kvfuzz refuses anything else (room for a later version) */

  /* ABI 4 */
  uint32_t numerics;            /* KVFUZZ_NUMERICS_* flags; 0: neither */
  int32_t split_partials_dtype; /* KVFUZZ_DTYPE_*: split partials stored in it before they
                                   are combined (0, f32: kept in f32, or no split) */
  int32_t rope_tables_dtype;    /* KVFUZZ_DTYPE_*: with RoPE, cos/sin tables rounded to it
                                   (and the rotation perhaps computed in it); 0, f32: f32 */
  int32_t exp_ulps;             /* the softmax's exp off by at most this many f32 ulps of its
                                   result (EngineNumerics::exp_ulps); 0 or 1: one ulp. Was
                                   reserved2, which had to be 0: an older kvfuzz refuses an
                                   entry that declares a coarser exp instead of misjudging it */

  /* ABI 5: the numerics of one engine, made for its layout, for an engine whose arithmetic
   * follows the layout (one computing in the storage dtype). NULL: the fields above serve
   * every layout. Called after `create`, with the engine and `entry`, a copy of this entry;
   * it may set the numerics fields (output_dtype, p_dtype, score_accumulation,
   * value_accumulation, rotated_keys_in_storage, rotated_queries_in_storage,
   * rope_angles_exact, numerics, split_partials_dtype, rope_tables_dtype, exp_ulps) and
   * nothing else: kvfuzz refuses an entry whose other declarations it changed (they plan
   * the run; only numerics may follow the layout). Returns 0, or nonzero with *error. */
  int (*numerics_of)(kvfuzz_engine* engine, struct kvfuzz_engine_api* entry, const char** error);
} kvfuzz_engine_api;

/* sizeof(kvfuzz_engine_api) in ABI 1, whose fields are this struct's up to `fork`. */
#define KVFUZZ_ENGINE_API_V1_SIZE offsetof(kvfuzz_engine_api, bitwise)
/* sizeof(kvfuzz_engine_api) in ABI 2, whose fields are this struct's up to
 * `rope_angles_exact` (no padding follows it). */
#define KVFUZZ_ENGINE_API_V2_SIZE offsetof(kvfuzz_engine_api, supports)
/* sizeof(kvfuzz_engine_api) in ABI 3, whose fields are this struct's up to `reserved`. */
#define KVFUZZ_ENGINE_API_V3_SIZE offsetof(kvfuzz_engine_api, numerics)
/* sizeof(kvfuzz_engine_api) in ABI 4, whose fields are this struct's up to `exp_ulps`
 * (padded to the struct's alignment, where `numerics_of` begins). */
#define KVFUZZ_ENGINE_API_V4_SIZE offsetof(kvfuzz_engine_api, numerics_of)
/* sizeof(kvfuzz_engine_api) in ABI 5: ABI 6 changed kvfuzz_engine_config, not this struct. */
#define KVFUZZ_ENGINE_API_V5_SIZE sizeof(kvfuzz_engine_api)

typedef struct kvfuzz_engine_plugin_table {
  uint32_t abi_version; /* KVFUZZ_ENGINE_ABI_VERSION */
  uint32_t engine_count;
  const kvfuzz_engine_api* engines;
} kvfuzz_engine_plugin_table;

/* An entry of this ABI with every field zero or NULL but the declarations, which say
 * what ABI 1 meant: no bitwise claim, f32 numerics, P not rounded, rotated keys and
 * queries and exact angles not declared, every storage dtype and layout. Fill in the rest
 * (name, functions, ...). */
static inline kvfuzz_engine_api kvfuzz_engine_api_defaults(void) {
  kvfuzz_engine_api api;
  memset(&api, 0, sizeof api);
  api.abi_version = KVFUZZ_ENGINE_ABI_VERSION;
  api.struct_size = sizeof(kvfuzz_engine_api);
  api.output_dtype = KVFUZZ_DTYPE_F32;
  api.p_dtype = KVFUZZ_DTYPE_NONE;
  api.score_accumulation = KVFUZZ_DTYPE_F32;
  api.value_accumulation = KVFUZZ_DTYPE_F32;
  api.rotated_keys_in_storage = -1;
  api.rotated_queries_in_storage = -1;
  api.rope_angles_exact = -1;
  return api;
}

/* The one symbol kvfuzz looks up (dlsym) in a plugin. */
#define KVFUZZ_ENGINE_PLUGIN_SYMBOL "kvfuzz_engine_plugin"
typedef const kvfuzz_engine_plugin_table* (*kvfuzz_engine_plugin_fn)(void);

#if defined(__GNUC__) || defined(__clang__)
#define KVFUZZ_PLUGIN_EXPORT __attribute__((visibility("default")))
#else
#define KVFUZZ_PLUGIN_EXPORT
#endif

/* What a plugin defines:
 *   KVFUZZ_PLUGIN_EXPORT const kvfuzz_engine_plugin_table* kvfuzz_engine_plugin(void); */

#ifdef __cplusplus
}
#endif

#endif /* KVFUZZ_ENGINE_ABI_H */
