// The blocked reference's kernel, written once over an 8-lane vector type V (reference_kernel.h
// says what it computes). Included by reference_kernel_lanes.cpp (V: C++ lanes),
// reference_kernel_avx2.cpp (V: two AVX2 registers) and reference_kernel_avx512.cpp (V: one
// AVX-512 register), each with its own
// KVFUZZ_KERNEL_TARGET; everything here is in an unnamed namespace, so each file has its own
// copy. V provides: T, zero, set1, load, store, fma (a * b + c, rounded once), add, sub, mul,
// div, max (a > b ? a : b, as the AVX-512 instruction), abs, round (to nearest even), pow2
// (2^k for an integer-valued k in [-1022, 1023]) and zero_below (0 where x < limit, else y).
//
// Every sum has one order, fixed by the block (which the scenario fixes): a dot product in
// dim order per key; a weighted sum in key order per dim; a total lane by lane, then lanes 0
// to 7. The plain form sums in other orders; both are within 1e-12 of the exact value.

#ifndef KVFUZZ_KERNEL_TARGET
#error "define KVFUZZ_KERNEL_TARGET before including reference_kernel_body.h"
#endif

namespace kvfuzz::reference_kernel {
namespace {

// exp(x) for x <= 0 (a logit minus the row's max, or -inf for a key the query does not see),
// to about 1 ulp: x = k ln2 + r with |r| <= ln2 / 2 (Cody-Waite, ln2 in two parts), exp(r)
// by its Taylor series to r^13 (the remainder is below 1e-17 relative) evaluated in
// Estrin's scheme (a dependency chain of 5 operations instead of Horner's 13), times 2^k.
// Results below the smallest normal double (x < -708) are 0: such a weight is below 1e-307
// of the largest, which is 1. exp(0) is exactly 1.
template <class V>
KVFUZZ_KERNEL_TARGET inline typename V::T exp_lanes(typename V::T x) {
  using T = typename V::T;
  const T clamped = V::max(x, V::set1(-709.0));
  const T k = V::round(V::mul(clamped, V::set1(0x1.71547652b82fep0)));  // x / ln2
  T r = V::fma(k, V::set1(-0x1.62e42feep-1), clamped);                  // ln2, high part
  r = V::fma(k, V::set1(-0x1.a39ef35793c76p-33), r);                    // ln2, low part
  constexpr double c[] = {
      1.0,
      1.0,
      1.0 / 2,
      1.0 / 6,
      1.0 / 24,
      1.0 / 120,
      1.0 / 720,
      1.0 / 5040,
      1.0 / 40320,
      1.0 / 362880,
      1.0 / 3628800,
      1.0 / 39916800,
      1.0 / 479001600,
      1.0 / 6227020800,
  };  // 1 / i!
  const T r2 = V::mul(r, r), r4 = V::mul(r2, r2), r8 = V::mul(r4, r4);
  const T p01 = V::fma(V::set1(c[1]), r, V::set1(c[0])),
          p23 = V::fma(V::set1(c[3]), r, V::set1(c[2]));
  const T p45 = V::fma(V::set1(c[5]), r, V::set1(c[4])),
          p67 = V::fma(V::set1(c[7]), r, V::set1(c[6]));
  const T p89 = V::fma(V::set1(c[9]), r, V::set1(c[8])),
          p1011 = V::fma(V::set1(c[11]), r, V::set1(c[10]));
  const T p1213 = V::fma(V::set1(c[13]), r, V::set1(c[12]));
  const T q03 = V::fma(p23, r2, p01), q47 = V::fma(p67, r2, p45);
  const T q811 = V::fma(p1011, r2, p89);
  const T s07 = V::fma(q47, r4, q03), s813 = V::fma(p1213, r4, q811);
  const T poly = V::fma(s813, r8, s07);
  return V::zero_below(x, V::set1(-708.0), V::mul(poly, V::pow2(k)));
}

// exp of n values x <= 0 in place, 8 at a time by exp_lanes (the tail padded with zeros).
template <class V>
KVFUZZ_KERNEL_TARGET void exp_in_place(double* x, size_t n) {
  size_t i = 0;
  for (; i + kLanes <= n; i += kLanes) V::store(x + i, exp_lanes<V>(V::load(x + i)));
  if (i == n) return;
  double tail[kLanes] = {};
  for (size_t j = i; j < n; ++j) tail[j - i] = x[j];
  V::store(tail, exp_lanes<V>(V::load(tail)));
  for (size_t j = i; j < n; ++j) x[j] = tail[j - i];
}

// The lanes of one vector, in order.
template <class V>
KVFUZZ_KERNEL_TARGET inline void lanes_of(typename V::T x, double* lanes) {
  V::store(lanes, x);
}

// kMagnitude: compute the weighted mean |v| (only f16 value sums' tolerance needs it; a
// quarter of the arithmetic).
template <class V, int NQ, bool kMagnitude>
KVFUZZ_KERNEL_TARGET void attend_block(Block& b) {
  using T = typename V::T;
  const int tiles = (b.end - b.first + kTile - 1) / kTile;
  const int width = tiles * kTile;  // scores per query, from b.first
  const T scale = V::set1(b.scale);

  // 1. Scores: per tile, every query against 16 keys, each dot product in dim order.
  for (int t = 0; t < tiles; ++t) {
    const double* kt = b.kt + b.first + t * kTile;
    T acc0[NQ], acc1[NQ];
#pragma GCC unroll 8
    for (int qi = 0; qi < NQ; ++qi) acc0[qi] = acc1[qi] = V::zero();
    for (int d = 0; d < b.head_dim; ++d) {
      const double* row = kt + static_cast<size_t>(d) * b.stride;
      const T k0 = V::load(row), k1 = V::load(row + kLanes);
#pragma GCC unroll 8
      for (int qi = 0; qi < NQ; ++qi) {
        const T qd = V::set1(b.q[qi][d]);
        acc0[qi] = V::fma(qd, k0, acc0[qi]);
        acc1[qi] = V::fma(qd, k1, acc1[qi]);
      }
    }
#pragma GCC unroll 8
    for (int qi = 0; qi < NQ; ++qi) {
      double* s = b.scores + static_cast<size_t>(qi) * b.stride + t * kTile;
      V::store(s, V::mul(scale, acc0[qi]));
      V::store(s + kLanes, V::mul(scale, acc1[qi]));
    }
  }

  // 2. Per query: keys it does not see to -inf and the max; then, all queries at once (their
  // exps are independent, so they overlap), exp, the total and the weights.
  alignas(64) double lanes[kLanes];
  T best[NQ], sum[NQ];
  for (int qi = 0; qi < NQ; ++qi) {
    double* s = b.scores + static_cast<size_t>(qi) * b.stride;
    for (int j = 0; j < b.lo[qi] - b.first; ++j) s[j] = -HUGE_VAL;
    for (int j = b.hi[qi] + 1 - b.first; j < width; ++j) s[j] = -HUGE_VAL;
    T m = V::set1(-HUGE_VAL);
    for (int j = 0; j < width; j += kLanes) m = V::max(V::load(s + j), m);
    lanes_of<V>(m, lanes);
    double max = lanes[0];
    for (int l = 1; l < kLanes; ++l) max = lanes[l] > max ? lanes[l] : max;
    best[qi] = V::set1(max);
    sum[qi] = V::zero();
  }
  for (int j = 0; j < width; j += kLanes) {
#pragma GCC unroll 8
    for (int qi = 0; qi < NQ; ++qi) {
      double* s = b.scores + static_cast<size_t>(qi) * b.stride + j;
      const T p = exp_lanes<V>(V::sub(V::load(s), best[qi]));
      V::store(s, p);
      sum[qi] = V::add(sum[qi], p);
    }
  }
  for (int qi = 0; qi < NQ; ++qi) {
    lanes_of<V>(sum[qi], lanes);
    double total = lanes[0];
    for (int l = 1; l < kLanes; ++l) total += lanes[l];
    b.total[qi] = total;
    const double* s = b.scores + static_cast<size_t>(qi) * b.stride;
    double* w = b.weights + static_cast<size_t>(qi) * b.stride;
    const T divisor = V::set1(total);
    for (int j = 0; j < width; j += kLanes) V::store(w + j, V::div(V::load(s + j), divisor));
  }

  // 3. Per 8 value dims: the rows and the weighted mean |v|, then the weighted mean
  // |v - row|, each in key order.
  const int keys = b.end - b.first;
  T mag_max[NQ], dev_max[NQ];  // lane by lane over the dims so far (all >= 0)
  for (int qi = 0; qi < NQ; ++qi) mag_max[qi] = dev_max[qi] = V::zero();
  for (size_t dv = 0; dv < b.v_stride; dv += kLanes) {
    const double* v = b.v + static_cast<size_t>(b.first) * b.v_stride + dv;
    const double* a = b.v_abs + static_cast<size_t>(b.first) * b.v_stride + dv;
    T out[NQ], mag[NQ];
#pragma GCC unroll 8
    for (int qi = 0; qi < NQ; ++qi) out[qi] = mag[qi] = V::zero();
    for (int j = 0; j < keys; ++j) {
      const T vj = V::load(v + static_cast<size_t>(j) * b.v_stride);
#pragma GCC unroll 8
      for (int qi = 0; qi < NQ; ++qi) {
        const T w = V::set1(b.weights[static_cast<size_t>(qi) * b.stride + j]);
        out[qi] = V::fma(w, vj, out[qi]);
      }
      if constexpr (kMagnitude) {
        const T aj = V::load(a + static_cast<size_t>(j) * b.v_stride);
#pragma GCC unroll 8
        for (int qi = 0; qi < NQ; ++qi) {
          const T w = V::set1(b.weights[static_cast<size_t>(qi) * b.stride + j]);
          mag[qi] = V::fma(w, aj, mag[qi]);
        }
      }
    }
    T dev[NQ];
#pragma GCC unroll 8
    for (int qi = 0; qi < NQ; ++qi) dev[qi] = V::zero();
    for (int j = 0; j < keys; ++j) {
      const T vj = V::load(v + static_cast<size_t>(j) * b.v_stride);
#pragma GCC unroll 8
      for (int qi = 0; qi < NQ; ++qi) {
        const T w = V::set1(b.weights[static_cast<size_t>(qi) * b.stride + j]);
        dev[qi] = V::fma(w, V::abs(V::sub(vj, out[qi])), dev[qi]);
      }
    }
    for (int qi = 0; qi < NQ; ++qi) {
      V::store(b.out + static_cast<size_t>(qi) * b.v_stride + dv, out[qi]);
      mag_max[qi] = V::max(mag[qi], mag_max[qi]);
      dev_max[qi] = V::max(dev[qi], dev_max[qi]);
    }
  }
  for (int qi = 0; qi < NQ; ++qi) {
    b.magnitude[qi] = b.deviation[qi] = 0;
    lanes_of<V>(mag_max[qi], lanes);
    for (double x : lanes) b.magnitude[qi] = x > b.magnitude[qi] ? x : b.magnitude[qi];
    lanes_of<V>(dev_max[qi], lanes);
    for (double x : lanes) b.deviation[qi] = x > b.deviation[qi] ? x : b.deviation[qi];
  }
}

template <class V, bool kMagnitude>
KVFUZZ_KERNEL_TARGET void attend_queries(Block& b) {
  switch (b.queries) {
    case 1:
      return attend_block<V, 1, kMagnitude>(b);
    case 2:
      return attend_block<V, 2, kMagnitude>(b);
    case 3:
      return attend_block<V, 3, kMagnitude>(b);
    case 4:
      return attend_block<V, 4, kMagnitude>(b);
    case 5:
      return attend_block<V, 5, kMagnitude>(b);
    case 6:
      return attend_block<V, 6, kMagnitude>(b);
    case 7:
      return attend_block<V, 7, kMagnitude>(b);
    default:
      return attend_block<V, 8, kMagnitude>(b);
  }
}

template <class V>
KVFUZZ_KERNEL_TARGET void attend(Block& b) {
  if (b.magnitude_needed) return attend_queries<V, true>(b);
  attend_queries<V, false>(b);
}

}  // namespace
}  // namespace kvfuzz::reference_kernel
