/* my_engine.c: an attention engine in plain C11, loaded by kvfuzz as a plugin.
 *
 *   kvfuzz check --engine plugin:./build/libmy_engine.so:my-engine
 *
 * The whole plugin ABI is one header, kvfuzz/engine_abi.h: this file exports one function,
 * kvfuzz_engine_plugin(), returning a table of two engines that share all of the code below:
 *
 *   my-engine        an honest KV-cached engine: per sequence, K and V grow in one f32
 *                    array as tokens arrive, and a position counter drives RoPE and the
 *                    positions it reports. Announces truncate and fork.
 *   my-engine-buggy  the same engine with one bug switched on in its handle: an off-by-one
 *                    in the sliding window, so a query sees window + 1 keys instead of
 *                    window (the classic inclusive/exclusive slip). kvfuzz finds it in a
 *                    few generated cases and shrinks it to three tokens.
 *
 * What an engine computes, for every new token of a sequence at absolute position p:
 *   - RoPE (when rope_theta > 0): rotate q and k at p, NeoX half split: for i < d/2,
 *     (x[i], x[i + d/2]) turns by the angle p * theta^(-2i/d);
 *   - append the rotated k and the v to the sequence's cache;
 *   - for every query head h: softmax(scale * q . k_j) weighted sum of v_j over the keys j
 *     it may see: j <= p (causal) and j > p - window (sliding window, when window > 0),
 *     reading kv head h / (q_heads / kv_heads) (grouped-query attention);
 *   - report the row with its position p. kvfuzz never tells an engine positions.
 * Inputs arrive already rounded to the layout's dtype; computing in f32 is accurate enough.
 *
 * Errors are returned, never raised: every call returns 0 or points *error at a message in
 * the handle, valid until the next call on it (create, which has no handle yet, uses
 * string literals). There is no mutable global state, so any number of handles may live
 * side by side. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvfuzz/engine_abi.h"

/* One sequence's cache. Entry j of the cache holds the token at position j (the honest
 * engine keeps the two in step: reset, truncate and fork move both). */
typedef struct sequence {
  float* k;         /* [entry][kv_head][head_dim], rotated */
  float* v;         /* [entry][kv_head][value_dim] */
  int64_t entries;  /* tokens cached */
  int64_t capacity; /* tokens the arrays have room for */
  int64_t position; /* position of the next token */
} sequence;

/* The opaque handle of the ABI: everything one engine instance owns. */
struct kvfuzz_engine {
  int q_heads, kv_heads, head_dim, value_dim, sequences, window;
  double rope_theta;
  float scale;
  int window_off_by_one; /* the bug of my-engine-buggy: 0 in my-engine */
  sequence* seqs;
  float *q_rot, *k_rot, *cos_p, *sin_p; /* per-token scratch */
  float* scores;                        /* per-query scratch, grown with the longest cache */
  int64_t scores_capacity;
  char error[256]; /* the last failure's message */
};

/* Formats a message into the handle, points *error at it and returns 1. */
static int fail(kvfuzz_engine* e, const char** error, const char* format, ...)
#if defined(__GNUC__) || defined(__clang__)
    __attribute__((format(printf, 3, 4))) /* the compiler checks every fail() format */
#endif
    ;
static int fail(kvfuzz_engine* e, const char** error, const char* format, ...) {
  va_list args;
  va_start(args, format);
  vsnprintf(e->error, sizeof e->error, format, args);
  va_end(args);
  if (error != NULL) *error = e->error;
  return 1;
}

static void destroy_engine(kvfuzz_engine* e) {
  if (e == NULL) return;
  if (e->seqs != NULL) {
    for (int s = 0; s < e->sequences; ++s) {
      free(e->seqs[s].k);
      free(e->seqs[s].v);
    }
  }
  free(e->seqs);
  free(e->q_rot);
  free(e->k_rot);
  free(e->cos_p);
  free(e->sin_p);
  free(e->scores);
  free(e);
}

/* create's errors must outlive the call; string literals do, without a global buffer. */
static kvfuzz_engine* create_engine(const kvfuzz_engine_config* c, const char** error,
                                    int window_off_by_one) {
  const char* problem = NULL;
  if (c == NULL || c->struct_size < sizeof(kvfuzz_engine_config)) {
    problem = "my-engine: no config, or one older than this plugin";
  } else if (c->q_heads < 1 || c->kv_heads < 1 || c->head_dim < 1 || c->value_dim < 1) {
    problem = "my-engine: head counts and dimensions must be >= 1";
  } else if (c->q_heads % c->kv_heads != 0) {
    problem = "my-engine: kv_heads must divide q_heads";
  } else if (c->rope_theta < 0 || (c->rope_theta > 0 && c->head_dim % 2 != 0)) {
    problem = "my-engine: RoPE needs rope_theta > 0 and an even head_dim";
  } else if (c->window < 0 || c->sequences < 1) {
    problem = "my-engine: window must be >= 0 and sequences >= 1";
  }
  if (problem != NULL) {
    if (error != NULL) *error = problem;
    return NULL;
  }
  kvfuzz_engine* e = calloc(1, sizeof *e);
  if (e == NULL) {
    if (error != NULL) *error = "my-engine: out of memory";
    return NULL;
  }
  e->q_heads = c->q_heads;
  e->kv_heads = c->kv_heads;
  e->head_dim = c->head_dim;
  e->value_dim = c->value_dim;
  e->sequences = c->sequences;
  e->window = c->window;
  e->rope_theta = c->rope_theta;
  e->scale = (float)c->scale; /* always set by kvfuzz: use it, do not recompute it */
  e->window_off_by_one = window_off_by_one;
  e->seqs = calloc((size_t)c->sequences, sizeof *e->seqs);
  e->q_rot = malloc((size_t)c->q_heads * (size_t)c->head_dim * sizeof(float));
  e->k_rot = malloc((size_t)c->kv_heads * (size_t)c->head_dim * sizeof(float));
  e->cos_p = malloc(((size_t)c->head_dim / 2 + 1) * sizeof(float));
  e->sin_p = malloc(((size_t)c->head_dim / 2 + 1) * sizeof(float));
  if (e->seqs == NULL || e->q_rot == NULL || e->k_rot == NULL || e->cos_p == NULL ||
      e->sin_p == NULL) {
    destroy_engine(e);
    if (error != NULL) *error = "my-engine: out of memory";
    return NULL;
  }
  return e;
}

static kvfuzz_engine* create_honest(const kvfuzz_engine_config* c, const char** error) {
  return create_engine(c, error, 0);
}

static kvfuzz_engine* create_buggy(const kvfuzz_engine_config* c, const char** error) {
  return create_engine(c, error, 1);
}

static size_t k_row(const kvfuzz_engine* e) {
  return (size_t)e->kv_heads * (size_t)e->head_dim;
}
static size_t v_row(const kvfuzz_engine* e) {
  return (size_t)e->kv_heads * (size_t)e->value_dim;
}

/* Room for `tokens` cached tokens in `s` (and in the score scratch); 0 on success. */
static int reserve(kvfuzz_engine* e, sequence* s, int64_t tokens) {
  if (tokens > s->capacity) {
    int64_t capacity = s->capacity > 0 ? s->capacity : 16;
    while (capacity < tokens) capacity *= 2;
    float* k = realloc(s->k, (size_t)capacity * k_row(e) * sizeof(float));
    if (k == NULL) return 1;
    s->k = k;
    float* v = realloc(s->v, (size_t)capacity * v_row(e) * sizeof(float));
    if (v == NULL) return 1;
    s->v = v;
    s->capacity = capacity;
  }
  if (tokens > e->scores_capacity) {
    float* scores = realloc(e->scores, (size_t)s->capacity * sizeof(float));
    if (scores == NULL) return 1;
    e->scores = scores;
    e->scores_capacity = s->capacity;
  }
  return 0;
}

/* RoPE at position `pos`: the angles once per token, then every head turned in place. */
static void rope_angles(kvfuzz_engine* e, int64_t pos) {
  const int half = e->head_dim / 2;
  for (int i = 0; i < half; ++i) {
    const double angle = (double)pos * pow(e->rope_theta, -2.0 * i / e->head_dim);
    e->cos_p[i] = (float)cos(angle);
    e->sin_p[i] = (float)sin(angle);
  }
}

static void rope_apply(const kvfuzz_engine* e, float* x) {
  const int half = e->head_dim / 2;
  for (int i = 0; i < half; ++i) {
    const float a = x[i], b = x[i + half];
    x[i] = a * e->cos_p[i] - b * e->sin_p[i];
    x[i + half] = a * e->sin_p[i] + b * e->cos_p[i];
  }
}

/* One query head's row over cache entries [lo, hi] of kv head g: a numerically stable
 * softmax (subtract the largest score) and the weighted sum of the values. */
static void attend(const kvfuzz_engine* e, const sequence* s, const float* q, int g, int64_t lo,
                   int64_t hi, float* out) {
  const size_t hd = (size_t)e->head_dim, vd = (size_t)e->value_dim;
  float max_score = -INFINITY;
  for (int64_t j = lo; j <= hi; ++j) {
    const float* k = s->k + (size_t)j * k_row(e) + (size_t)g * hd;
    float dot = 0;
    for (size_t d = 0; d < hd; ++d) dot += q[d] * k[d];
    const float score = e->scale * dot;
    e->scores[j - lo] = score;
    if (score > max_score) max_score = score;
  }
  for (size_t d = 0; d < vd; ++d) out[d] = 0;
  float sum = 0;
  for (int64_t j = lo; j <= hi; ++j) {
    const float w = expf(e->scores[j - lo] - max_score);
    const float* v = s->v + (size_t)j * v_row(e) + (size_t)g * vd;
    sum += w;
    for (size_t d = 0; d < vd; ++d) out[d] += w * v[d];
  }
  for (size_t d = 0; d < vd; ++d) out[d] /= sum;
}

/* Appends one chunk's tokens to its sequence, one row per token. Room is reserved. */
static void run_chunk(kvfuzz_engine* e, const kvfuzz_chunk_in* in, kvfuzz_chunk_out* out) {
  sequence* s = &e->seqs[in->seq];
  const size_t hd = (size_t)e->head_dim, vd = (size_t)e->value_dim;
  const size_t q_stride = (size_t)e->q_heads * hd;
  const int group = e->q_heads / e->kv_heads;
  for (int32_t t = 0; t < in->tokens; ++t) {
    const int64_t pos = s->position;
    memcpy(e->q_rot, in->q + (size_t)t * q_stride, q_stride * sizeof(float));
    memcpy(e->k_rot, in->k + (size_t)t * k_row(e), k_row(e) * sizeof(float));
    if (e->rope_theta > 0) {
      rope_angles(e, pos);
      for (int h = 0; h < e->q_heads; ++h) rope_apply(e, e->q_rot + (size_t)h * hd);
      for (int g = 0; g < e->kv_heads; ++g) rope_apply(e, e->k_rot + (size_t)g * hd);
    }
    /* Cache the token first: a query sees its own key. */
    const int64_t entry = s->entries++;
    memcpy(s->k + (size_t)entry * k_row(e), e->k_rot, k_row(e) * sizeof(float));
    memcpy(s->v + (size_t)entry * v_row(e), in->v + (size_t)t * v_row(e), v_row(e) * sizeof(float));
    s->position++;
    /* Causal: entries up to this one; the window keeps the last `window` of them, the
     * first being entry - window + 1. THE BUG (my-engine-buggy) drops the "+ 1". */
    int64_t lo = 0;
    if (e->window > 0) {
      const int64_t first = entry - e->window + (e->window_off_by_one ? 0 : 1);
      if (first > 0) lo = first;
    }
    for (int h = 0; h < e->q_heads; ++h) {
      float* row = out->out + ((size_t)t * (size_t)e->q_heads + (size_t)h) * vd;
      attend(e, s, e->q_rot + (size_t)h * hd, h / group, lo, entry, row);
    }
    out->positions[t] = pos;
  }
  out->rows = in->tokens;
}

static int step_engine(kvfuzz_engine* e, const kvfuzz_chunk_in* chunks, kvfuzz_chunk_out* outs,
                       int32_t count, const char** error) {
  if (count < 0 || (count > 0 && (chunks == NULL || outs == NULL))) {
    return fail(e, error, "step: %d chunks without arrays", (int)count);
  }
  /* Check every chunk and make room before touching any sequence: a refused step leaves
   * the engine as it was. */
  for (int32_t i = 0; i < count; ++i) {
    const kvfuzz_chunk_in* c = &chunks[i];
    if (c->seq < 0 || c->seq >= e->sequences) {
      return fail(e, error, "step: no sequence %d (the engine has %d)", (int)c->seq, e->sequences);
    }
    for (int32_t j = 0; j < i; ++j) {
      if (chunks[j].seq == c->seq) return fail(e, error, "step: sequence %d twice", (int)c->seq);
    }
    if (c->tokens < 0 || (c->tokens > 0 && (c->q == NULL || c->k == NULL || c->v == NULL))) {
      return fail(e, error, "step: chunk %d has %d tokens and missing q/k/v", (int)i,
                  (int)c->tokens);
    }
    if (outs[i].positions_capacity < c->tokens ||
        outs[i].out_capacity < (int64_t)c->tokens * e->q_heads * e->value_dim) {
      return fail(e, error, "step: chunk %d has no room for %d rows", (int)i, (int)c->tokens);
    }
    sequence* s = &e->seqs[c->seq];
    if (reserve(e, s, s->entries + c->tokens) != 0) {
      return fail(e, error, "step: out of memory for sequence %d", (int)c->seq);
    }
  }
  for (int32_t i = 0; i < count; ++i) run_chunk(e, &chunks[i], &outs[i]);
  return 0;
}

static int reset_engine(kvfuzz_engine* e, int32_t seq, const char** error) {
  if (seq < 0 || seq >= e->sequences) return fail(e, error, "reset: no sequence %d", (int)seq);
  e->seqs[seq].entries = 0;  /* the old K/V are gone (the memory is kept for reuse) */
  e->seqs[seq].position = 0; /* and the new request starts at position 0 */
  return 0;
}

static int truncate_engine(kvfuzz_engine* e, int32_t seq, int64_t keep, const char** error) {
  if (seq < 0 || seq >= e->sequences) return fail(e, error, "truncate: no sequence %d", (int)seq);
  sequence* s = &e->seqs[seq];
  if (keep < 0 || keep > s->entries) {
    return fail(e, error, "truncate: sequence %d holds %lld tokens, cannot keep %lld", (int)seq,
                (long long)s->entries, (long long)keep);
  }
  s->entries = keep;
  s->position = keep; /* the next token continues right after the kept ones */
  return 0;
}

static int fork_engine(kvfuzz_engine* e, int32_t src, int32_t dst, const char** error) {
  if (src < 0 || src >= e->sequences || dst < 0 || dst >= e->sequences || src == dst) {
    return fail(e, error, "fork: cannot fork sequence %d into %d", (int)src, (int)dst);
  }
  sequence* from = &e->seqs[src];
  sequence* to = &e->seqs[dst];
  if (reserve(e, to, from->entries) != 0) return fail(e, error, "fork: out of memory");
  /* dst drops what it held and starts as a copy: K, V, and the position counter. */
  if (from->entries > 0) { /* (memcpy from an empty sequence's NULL arrays is undefined) */
    memcpy(to->k, from->k, (size_t)from->entries * k_row(e) * sizeof(float));
    memcpy(to->v, from->v, (size_t)from->entries * v_row(e) * sizeof(float));
  }
  to->entries = from->entries;
  to->position = from->position;
  return 0;
}

/* The table kvfuzz reads: one entry per engine, constant data. mutant = 0 says "this engine
 * should pass" (1 is for deliberately wrong engines kvfuzz must reject). The capability
 * flags announce truncate and fork; without them kvfuzz never calls those two. The
 * declarations (ABI 2 and 3) say how it computes: the fields left out are 0, which means f32
 * output and accumulation, every storage dtype and no layout limit; P is not rounded
 * (KVFUZZ_DTYPE_NONE: 0 would be f32, which kvfuzz refuses for P), and keys are cached
 * rotated but in f32, not in the storage dtype (0). */
static const kvfuzz_engine_api engines[] = {
    {.abi_version = KVFUZZ_ENGINE_ABI_VERSION,
     .struct_size = sizeof(kvfuzz_engine_api),
     .name = "my-engine",
     .description = "A contiguous-cache attention engine in C (the kvfuzz C plugin example).",
     .capabilities = KVFUZZ_CAN_TRUNCATE | KVFUZZ_CAN_FORK,
     .mutant = 0,
     .create = create_honest,
     .destroy = destroy_engine,
     .step = step_engine,
     .reset = reset_engine,
     .truncate = truncate_engine,
     .fork = fork_engine,
     .p_dtype = KVFUZZ_DTYPE_NONE,
     .rotated_keys_in_storage = 0},
    {.abi_version = KVFUZZ_ENGINE_ABI_VERSION,
     .struct_size = sizeof(kvfuzz_engine_api),
     .name = "my-engine-buggy",
     .description = "my-engine with an off-by-one sliding window: a query sees window + 1 keys.",
     .capabilities = KVFUZZ_CAN_TRUNCATE | KVFUZZ_CAN_FORK,
     .mutant = 0,
     .create = create_buggy, /* the only difference */
     .destroy = destroy_engine,
     .step = step_engine,
     .reset = reset_engine,
     .truncate = truncate_engine,
     .fork = fork_engine,
     .p_dtype = KVFUZZ_DTYPE_NONE,
     .rotated_keys_in_storage = 0},
};

static const kvfuzz_engine_plugin_table table = {
    .abi_version = KVFUZZ_ENGINE_ABI_VERSION,
    .engine_count = sizeof engines / sizeof engines[0],
    .engines = engines,
};

/* The one exported symbol (KVFUZZ_PLUGIN_EXPORT; everything else is hidden). */
KVFUZZ_PLUGIN_EXPORT const kvfuzz_engine_plugin_table* kvfuzz_engine_plugin(void) {
  return &table;
}
