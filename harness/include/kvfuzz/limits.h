// Documented size limits for scenarios. The parser rejects anything larger, so no fixture
// can make kvfuzz allocate or compute without bound. docs/fixture-format.md lists them.
#pragma once

#include <cstdint>

namespace kvfuzz::limits {

constexpr int kMaxQHeads = 128;
constexpr int kMaxKvHeads = 128;
constexpr int kMaxHeadDim = 512;
constexpr int kMaxValueDim = 512;
constexpr int kMaxPageSize = 4096;
constexpr int kMaxSequences = 256;
constexpr int kMaxTableTokens = 1 << 16;
// q, k and v floats of the whole token table together.
constexpr int64_t kMaxTableFloats = int64_t{1} << 24;
constexpr int kMaxOps = 1 << 16;
constexpr int kMaxChunkTokens = 1 << 14;
// Tokens in one (sequence, epoch): bounds the reference's quadratic cost.
constexpr int kMaxEpochTokens = 1 << 14;
// Tokens appended by the whole program.
constexpr int64_t kMaxProgramTokens = int64_t{1} << 18;
constexpr int kMaxPoolPages = 1 << 20;
// K and V elements of the whole page pool: pages x page_size x kv_heads x (head_dim +
// value_dim), for the resolved pool (an explicit page list's length, pool_pages, or the
// pages the program needs). 128 MiB in f32; kernels/cpu/page_pool.cpp refuses more.
constexpr int64_t kMaxPoolElements = int64_t{1} << 25;
// Output values of the whole program: program tokens x q_heads x value_dim. Bounds the
// rows the reference and every engine hold at once.
constexpr int64_t kMaxRowValues = int64_t{1} << 24;
// Largest RoPE base: the tolerance derivation (harness/src/judge/tolerance.cpp) assumes it.
constexpr double kMaxRopeTheta = 1e7;
// Attention features (Layout): the soft cap, |sink logit| and the ALiBi slopes at most these.
constexpr double kMaxSoftcap = 1e4;
constexpr double kMaxSinkLogit = 1e4;
constexpr double kMaxAlibiSlope = 256;
// An fp8 KV format's scales (kvfuzz/kv_format.h) lie in [2^-32, 2^32].
constexpr double kMinKvScale = 0x1p-32;
constexpr double kMaxKvScale = 0x1p32;
constexpr int kMaxExpectRows = 1 << 16;
// Generated q and k scaled by at most 2^12: 4 * 2^12 still fits f16 (generate/score_spreads.h).
constexpr int kMaxQkLog2 = 12;

// Model level (Scenario::model, docs/fixture-format.md "model").
constexpr int kMaxModelVocab = 4096;
constexpr int kMaxModelWidth = 1024;
constexpr int kMaxModelLayers = 16;
constexpr int kMaxModelFfn = 4096;
// Weights of the whole model: vocab x width (embedding) + layers x (width x (q_heads x
// head_dim + kv_heads x (head_dim + value_dim)) + q_heads x value_dim x width + 3 x width x
// ffn + 2 x width) + width + width x vocab (LM head). 64 MiB in f32.
constexpr int64_t kMaxModelWeights = int64_t{1} << 24;
// What both evaluations keep per row, over the whole program: program tokens x (layers x
// (q_heads x value_dim + width) + vocab) (each layer's attention output and hidden state,
// and the logits).
constexpr int64_t kMaxModelRowValues = int64_t{1} << 24;
// Multiply-adds of the dense layers over the whole program: program tokens x (layers x
// (width x (q_heads x head_dim + kv_heads x (head_dim + value_dim)) + q_heads x value_dim x
// width + 3 x width x ffn) + width x vocab). Bounds the time of one evaluation.
constexpr int64_t kMaxModelWork = int64_t{1} << 32;
// Model level: q/k/v values one evaluation holds at once, per op in the cached forward and
// per (sequence, epoch) stream in the reference (tokens x (q_heads x head_dim + kv_heads x
// (head_dim + value_dim))): 2^25 doubles are 256 MiB.
constexpr int64_t kMaxModelActivations = int64_t{1} << 25;
// Model level with a quantized KV cache: the softmax scale at most this over sqrt(head_dim)
// (8 times the model's own; validate.cpp says why).
constexpr double kMaxModelKvBlocksScale = 8;
constexpr int kMaxTextLength = 1 << 16;
constexpr int kMaxJsonDepth = 64;
constexpr int64_t kMaxFixtureBytes = int64_t{64} << 20;

}  // namespace kvfuzz::limits
