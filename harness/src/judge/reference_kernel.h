// The blocked reference's inner kernel (reference_blocked.cpp drives it): up to eight queries
// that share one kv head, scored against a run of keys 16 at a time, softmaxed and averaged,
// in 8-lane double vectors. Three builds of the same code (reference_kernel_body.h): AVX-512
// and AVX2 with FMA, chosen at run time where the CPU has them, and plain C++ lanes
// everywhere else. All do the
// same IEEE operations in the same order on every lane (fused multiply-adds as std::fma),
// so every machine computes the same bits.
#pragma once

#include <cstddef>
#include <vector>

#include "kvfuzz/engine.h"
#include "kvfuzz/rows.h"
#include "kvfuzz/scenario.h"
#include "kvfuzz/token_table.h"

namespace kvfuzz::reference_kernel {

constexpr int kLanes = 8;
constexpr int kTile = 16;  // keys scored per tile: two vectors
constexpr int kMaxQueries = 8;

struct Block {
  // The kv head's keys, transposed: key j's element d at kt[d * stride + j], zero past the
  // stream's last key up to `stride` (which covers every tile the block scores).
  const double* kt = nullptr;
  int head_dim = 0;
  // Its values and their magnitudes: key j's element d at v[j * v_stride + d], value_dim
  // rounded up to a multiple of kLanes, zero beyond value_dim.
  const double* v = nullptr;
  const double* v_abs = nullptr;
  size_t v_stride = 0;
  size_t stride = 0;  // of kt, scores and weights; >= first + a whole number of tiles
  double scale = 0;
  bool magnitude_needed = true;                    // else `magnitude` is 0 and v_abs is not read
  int queries = 0;                                 // 1..kMaxQueries
  const double* q[kMaxQueries] = {};               // rotated queries, head_dim each
  int lo[kMaxQueries] = {}, hi[kMaxQueries] = {};  // each query's keys: [lo, hi]
  int first = 0, end = 0;  // the keys scored: [first, end), first a multiple of kLanes
  // Out, per query qi, at [qi * stride + (j - first)]: exp(logit - max) in `scores` and
  // that over the total in `weights` (0 for keys the query does not see); the row at
  // out[qi * v_stride + d]; the total and the largest weighted mean |v - row| and |v| over
  // the value dims.
  double* scores = nullptr;
  double* weights = nullptr;
  double* out = nullptr;
  double total[kMaxQueries] = {}, deviation[kMaxQueries] = {}, magnitude[kMaxQueries] = {};
};

using Kernel = void (*)(Block&);

void attend_lanes(Block& block);

// exp(x) of n values x <= 0 in place: the kernel's softmax exp (about 1 ulp; 0 below -708),
// each build giving the same bits. exp_nonpositive is the build for this CPU; the model
// level's reference softmax uses it too.
using ExpKernel = void (*)(double* x, size_t n);
void exp_nonpositive(double* x, size_t n);
void exp_nonpositive_lanes(double* x, size_t n);
void exp_nonpositive_avx2(double* x, size_t n);
void exp_nonpositive_avx512(double* x, size_t n);

// The AVX-512 build; only where avx512_available() (x86-64 CPUs with AVX-512F).
bool avx512_available();
void attend_avx512(Block& block);

// The AVX2 + FMA build; only where avx2_fma_available().
bool avx2_fma_available();
void attend_avx2(Block& block);

// reference_rows (reference.h) with a given kernel: tests hold the builds to the same bits.
std::vector<ReferenceRow> blocked_rows(const Layout& layout, const TokenTable& table,
                                       const LogicalStream& stream, const EngineNumerics& numerics,
                                       Kernel kernel);

}  // namespace kvfuzz::reference_kernel
