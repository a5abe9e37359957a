// The blocked reference's kernel in AVX2 registers with FMA, for CPUs that have both but not
// AVX-512 (chosen at run time: the project builds for the baseline x86-64). An 8-lane vector
// is two 4-lane registers; each operation is the IEEE operation reference_kernel_lanes.cpp
// does lane by lane (a fused multiply-add rounds once, as std::fma does), so the same bits.
// Without it such CPUs ran the plain lanes, where every std::fma is a call into libm.
#include <cmath>
#include <cstdint>

#include "judge/reference_kernel.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>

#define KVFUZZ_KERNEL_TARGET __attribute__((target("avx2,fma")))

namespace kvfuzz::reference_kernel {
namespace {

struct Avx2 {
  struct T {
    __m256d lo, hi;
  };
  KVFUZZ_KERNEL_TARGET static T zero() { return {_mm256_setzero_pd(), _mm256_setzero_pd()}; }
  KVFUZZ_KERNEL_TARGET static T set1(double a) { return {_mm256_set1_pd(a), _mm256_set1_pd(a)}; }
  KVFUZZ_KERNEL_TARGET static T load(const double* p) {
    return {_mm256_loadu_pd(p), _mm256_loadu_pd(p + 4)};
  }
  KVFUZZ_KERNEL_TARGET static void store(double* p, T a) {
    _mm256_storeu_pd(p, a.lo);
    _mm256_storeu_pd(p + 4, a.hi);
  }
  KVFUZZ_KERNEL_TARGET static T fma(T a, T b, T c) {
    return {_mm256_fmadd_pd(a.lo, b.lo, c.lo), _mm256_fmadd_pd(a.hi, b.hi, c.hi)};
  }
  KVFUZZ_KERNEL_TARGET static T add(T a, T b) {
    return {_mm256_add_pd(a.lo, b.lo), _mm256_add_pd(a.hi, b.hi)};
  }
  KVFUZZ_KERNEL_TARGET static T sub(T a, T b) {
    return {_mm256_sub_pd(a.lo, b.lo), _mm256_sub_pd(a.hi, b.hi)};
  }
  KVFUZZ_KERNEL_TARGET static T mul(T a, T b) {
    return {_mm256_mul_pd(a.lo, b.lo), _mm256_mul_pd(a.hi, b.hi)};
  }
  KVFUZZ_KERNEL_TARGET static T div(T a, T b) {
    return {_mm256_div_pd(a.lo, b.lo), _mm256_div_pd(a.hi, b.hi)};
  }
  // a > b ? a : b, as the plain lanes (MAXPD returns its second operand unless a > b).
  KVFUZZ_KERNEL_TARGET static T max(T a, T b) {
    return {_mm256_max_pd(a.lo, b.lo), _mm256_max_pd(a.hi, b.hi)};
  }
  KVFUZZ_KERNEL_TARGET static T abs(T a) {
    const __m256d mask = _mm256_castsi256_pd(_mm256_set1_epi64x(0x7fffffffffffffff));
    return {_mm256_and_pd(a.lo, mask), _mm256_and_pd(a.hi, mask)};
  }
  KVFUZZ_KERNEL_TARGET static T round(T a) {
    constexpr int kNearest = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
    return {_mm256_round_pd(a.lo, kNearest), _mm256_round_pd(a.hi, kNearest)};
  }
  KVFUZZ_KERNEL_TARGET static __m256d pow2(__m256d k) {
    const __m256i bits = _mm256_castpd_si256(_mm256_add_pd(k, _mm256_set1_pd(0x1.8p52)));
    return _mm256_castsi256_pd(
        _mm256_slli_epi64(_mm256_add_epi64(bits, _mm256_set1_epi64x(1023)), 52));
  }
  KVFUZZ_KERNEL_TARGET static T pow2(T k) { return {pow2(k.lo), pow2(k.hi)}; }
  // x < limit ? 0 : y; false for a NaN x, as in the plain lanes.
  KVFUZZ_KERNEL_TARGET static __m256d zero_below(__m256d x, __m256d limit, __m256d y) {
    return _mm256_andnot_pd(_mm256_cmp_pd(x, limit, _CMP_LT_OQ), y);
  }
  KVFUZZ_KERNEL_TARGET static T zero_below(T x, T limit, T y) {
    return {zero_below(x.lo, limit.lo, y.lo), zero_below(x.hi, limit.hi, y.hi)};
  }
};

}  // namespace
}  // namespace kvfuzz::reference_kernel

#include "judge/reference_kernel_body.h"

namespace kvfuzz::reference_kernel {

bool avx2_fma_available() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") != 0 && __builtin_cpu_supports("fma") != 0;
}

void attend_avx2(Block& block) {
  attend<Avx2>(block);
}

void exp_nonpositive_avx2(double* x, size_t n) {
  exp_in_place<Avx2>(x, n);
}

}  // namespace kvfuzz::reference_kernel

#else

namespace kvfuzz::reference_kernel {

bool avx2_fma_available() {
  return false;
}

void attend_avx2(Block& block) {
  attend_lanes(block);
}

void exp_nonpositive_avx2(double* x, size_t n) {
  exp_nonpositive_lanes(x, n);
}

}  // namespace kvfuzz::reference_kernel

#endif
