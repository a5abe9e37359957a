// The blocked reference's kernel in AVX-512 registers, for CPUs that have AVX-512F (chosen at
// run time: the project builds for the baseline x86-64). Each operation is the IEEE operation
// reference_kernel_lanes.cpp does lane by lane, so both give the same bits.
#include <cmath>
#include <cstdint>

#include "judge/reference_kernel.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
// GCC 12's AVX-512 intrinsics start some results from _mm*_undefined_*() and then warn, where
// they are inlined, that it may be used uninitialized (a known false positive). For this
// file only.
#if !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>

#define KVFUZZ_KERNEL_TARGET __attribute__((target("avx512f")))

namespace kvfuzz::reference_kernel {
namespace {

struct Avx512 {
  using T = __m512d;
  KVFUZZ_KERNEL_TARGET static T zero() { return _mm512_setzero_pd(); }
  KVFUZZ_KERNEL_TARGET static T set1(double a) { return _mm512_set1_pd(a); }
  KVFUZZ_KERNEL_TARGET static T load(const double* p) { return _mm512_loadu_pd(p); }
  KVFUZZ_KERNEL_TARGET static void store(double* p, T a) { _mm512_storeu_pd(p, a); }
  KVFUZZ_KERNEL_TARGET static T fma(T a, T b, T c) { return _mm512_fmadd_pd(a, b, c); }
  KVFUZZ_KERNEL_TARGET static T add(T a, T b) { return _mm512_add_pd(a, b); }
  KVFUZZ_KERNEL_TARGET static T sub(T a, T b) { return _mm512_sub_pd(a, b); }
  KVFUZZ_KERNEL_TARGET static T mul(T a, T b) { return _mm512_mul_pd(a, b); }
  KVFUZZ_KERNEL_TARGET static T div(T a, T b) { return _mm512_div_pd(a, b); }
  KVFUZZ_KERNEL_TARGET static T max(T a, T b) { return _mm512_max_pd(a, b); }  // a > b ? a : b
  KVFUZZ_KERNEL_TARGET static T abs(T a) {
    return _mm512_castsi512_pd(
        _mm512_and_epi64(_mm512_castpd_si512(a), _mm512_set1_epi64(0x7fffffffffffffff)));
  }
  KVFUZZ_KERNEL_TARGET static T round(T a) {
    return _mm512_roundscale_pd(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  }
  KVFUZZ_KERNEL_TARGET static T pow2(T k) {
    const __m512i bits = _mm512_castpd_si512(_mm512_add_pd(k, _mm512_set1_pd(0x1.8p52)));
    return _mm512_castsi512_pd(
        _mm512_slli_epi64(_mm512_add_epi64(bits, _mm512_set1_epi64(1023)), 52));
  }
  KVFUZZ_KERNEL_TARGET static T zero_below(T x, T limit, T y) {
    return _mm512_mask_mov_pd(y, _mm512_cmp_pd_mask(x, limit, _CMP_LT_OQ), _mm512_setzero_pd());
  }
};

}  // namespace
}  // namespace kvfuzz::reference_kernel

#include "judge/reference_kernel_body.h"

namespace kvfuzz::reference_kernel {

bool avx512_available() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f") != 0;
}

void attend_avx512(Block& block) {
  attend<Avx512>(block);
}

void exp_nonpositive_avx512(double* x, size_t n) {
  exp_in_place<Avx512>(x, n);
}

}  // namespace kvfuzz::reference_kernel

#else

namespace kvfuzz::reference_kernel {

bool avx512_available() {
  return false;
}

void attend_avx512(Block& block) {
  attend_lanes(block);
}

void exp_nonpositive_avx512(double* x, size_t n) {
  exp_nonpositive_lanes(x, n);
}

}  // namespace kvfuzz::reference_kernel

#endif
