// The blocked reference's kernel on plain C++ lanes: what every CPU runs that lacks AVX-512,
// with the same operations as reference_kernel_avx512.cpp lane for lane (std::fma for each
// fused multiply-add), so the same bits.
#include <bit>
#include <cmath>
#include <cstdint>

#include "judge/reference_kernel.h"

#define KVFUZZ_KERNEL_TARGET

namespace kvfuzz::reference_kernel {
namespace {

struct Lanes {
  struct T {
    double x[kLanes];
  };
  template <class F>
  static T map(F f) {
    T out;
    for (int l = 0; l < kLanes; ++l) out.x[l] = f(l);
    return out;
  }
  static T zero() { return set1(0.0); }
  static T set1(double a) {
    return map([&](int) { return a; });
  }
  static T load(const double* p) {
    return map([&](int l) { return p[l]; });
  }
  static void store(double* p, const T& a) {
    for (int l = 0; l < kLanes; ++l) p[l] = a.x[l];
  }
  static T fma(const T& a, const T& b, const T& c) {
    return map([&](int l) { return std::fma(a.x[l], b.x[l], c.x[l]); });
  }
  static T add(const T& a, const T& b) {
    return map([&](int l) { return a.x[l] + b.x[l]; });
  }
  static T sub(const T& a, const T& b) {
    return map([&](int l) { return a.x[l] - b.x[l]; });
  }
  static T mul(const T& a, const T& b) {
    return map([&](int l) { return a.x[l] * b.x[l]; });
  }
  static T div(const T& a, const T& b) {
    return map([&](int l) { return a.x[l] / b.x[l]; });
  }
  static T max(const T& a, const T& b) {
    return map([&](int l) { return a.x[l] > b.x[l] ? a.x[l] : b.x[l]; });
  }
  static T abs(const T& a) {
    return map([&](int l) { return std::fabs(a.x[l]); });
  }
  static T round(const T& a) {
    return map([&](int l) { return std::nearbyint(a.x[l]); });
  }
  // The exponent field of 2^k from k's integer bits: k + 1.5 * 2^52 holds k in its low bits.
  static T pow2(const T& k) {
    return map([&](int l) {
      const uint64_t bits = std::bit_cast<uint64_t>(k.x[l] + 0x1.8p52);
      return std::bit_cast<double>((bits + 1023) << 52);
    });
  }
  static T zero_below(const T& x, const T& limit, const T& y) {
    return map([&](int l) { return x.x[l] < limit.x[l] ? 0.0 : y.x[l]; });
  }
};

}  // namespace
}  // namespace kvfuzz::reference_kernel

#include "judge/reference_kernel_body.h"

namespace kvfuzz::reference_kernel {

void attend_lanes(Block& block) {
  attend<Lanes>(block);
}

void exp_nonpositive_lanes(double* x, size_t n) {
  exp_in_place<Lanes>(x, n);
}

}  // namespace kvfuzz::reference_kernel
