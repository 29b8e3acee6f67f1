// Elementwise math for the CPU kernels, written so that the compiler can
// vectorise the loops that call it.
//
// std::exp, std::tanh, std::log1p are calls into libm: a loop that calls them
// stays scalar (one call per element, 20-40 cycles each). The float versions
// below are branch-free arithmetic (range reduction, a polynomial, an exponent
// built from integer bits), so GCC and Clang turn a loop over them into SIMD
// code at -O3 with the baseline instruction set. They are accurate to a few
// float ulp, well inside the tolerance the tests hold the kernels to against
// float64 references. double keeps libm: its accuracy is the point of double.
//
// Half and bfloat16 are computed in float (opmath), so they use the float path.
//
// Everything here lives in the namespace of the instruction set the including
// file is compiled for (see isa.h), so the AVX2 and the baseline copies never
// meet at link time.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include "isa.h"

namespace fusedops {
namespace cpu {
namespace FUSEDOPS_CPU_ISA {

FUSEDOPS_CPU_INLINE int32_t float_bits(float x) {
  int32_t i;
  std::memcpy(&i, &x, sizeof(i));
  return i;
}

FUSEDOPS_CPU_INLINE float bits_float(int32_t i) {
  float x;
  std::memcpy(&x, &i, sizeof(x));
  return x;
}

FUSEDOPS_CPU_INLINE int64_t double_bits(double x) {
  int64_t i;
  std::memcpy(&i, &x, sizeof(i));
  return i;
}

FUSEDOPS_CPU_INLINE double bits_double(int64_t i) {
  double x;
  std::memcpy(&x, &i, sizeof(x));
  return x;
}

// c ? a : b with both a and b already computed, as a bit mask. Under GCC's
// default -ftrapping-math a plain `c ? a : z * alpha` is not if-converted (the
// multiply would be speculated), which leaves control flow in the loop and
// stops vectorisation; the mask form has none. The build flags stay as they
// are (no -ffast-math, no -fno-trapping-math): NaN and inf behave as in IEEE.
FUSEDOPS_CPU_INLINE float sel(bool c, float a, float b) {
  const int32_t m = -static_cast<int32_t>(c);
  return bits_float((float_bits(a) & m) | (float_bits(b) & ~m));
}

FUSEDOPS_CPU_INLINE double sel(bool c, double a, double b) {
  const int64_t m = -static_cast<int64_t>(c);
  return bits_double((double_bits(a) & m) | (double_bits(b) & ~m));
}

// exp(x) in float. x = n*ln2 + r with |r| <= ln2/2 (n found by the 1.5*2^23
// rounding trick, no floor/rint call); e^r by its Taylor polynomial to degree
// 7 (truncation error < 6e-9 relative); 2^n applied as two factors 2^(n/2) so
// that both stay normal floats over the whole range: overflow gives inf,
// underflow goes through the denormals to 0, NaN stays NaN.
FUSEDOPS_CPU_INLINE float exp_f(float x) {
  constexpr float kShift = 12582912.0f;  // 1.5 * 2^23
  constexpr float kLog2e = 1.44269504088896341f;
  constexpr float kLn2Hi = 0.693145751953125f;  // ln2 split so that n * kLn2Hi is exact
  constexpr float kLn2Lo = 1.42860682030941723212e-6f;
  x = sel(x > 89.0f, 89.0f, x);
  x = sel(x < -104.0f, -104.0f, x);
  const float t = x * kLog2e + kShift;
  const int32_t n = float_bits(t) - float_bits(kShift);
  const float nf = t - kShift;
  float r = x - nf * kLn2Hi;
  r = r - nf * kLn2Lo;
  float p = 1.0f / 5040.0f;
  p = p * r + 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * (r * r) + r + 1.0f;
  const int32_t n1 = n >> 1;
  const int32_t n2 = n - n1;
  return p * bits_float((n1 + 127) << 23) * bits_float((n2 + 127) << 23);
}

// expm1(x): the Taylor series near 0 (where exp(x) - 1 cancels), exp(x) - 1
// elsewhere. Both are computed and one is selected, which keeps the loop
// branch-free.
FUSEDOPS_CPU_INLINE float expm1_f(float x) {
  float p = 1.0f / 40320.0f;
  p = p * x + 1.0f / 5040.0f;
  p = p * x + 1.0f / 720.0f;
  p = p * x + 1.0f / 120.0f;
  p = p * x + 1.0f / 24.0f;
  p = p * x + 1.0f / 6.0f;
  p = p * x + 0.5f;
  const float small = p * (x * x) + x;
  const float large = exp_f(x) - 1.0f;
  return sel(std::fabs(x) < 0.34657359f, small, large);
}

// log1p(u) for u in [0, 1] (all softplus needs): 2 * atanh(s) with
// s = u / (2 + u) <= 1/3, as its odd series to s^15 (error < 2e-8 relative).
FUSEDOPS_CPU_INLINE float log1p_unit_f(float u) {
  const float s = u / (2.0f + u);
  const float s2 = s * s;
  float p = 1.0f / 15.0f;
  p = p * s2 + 1.0f / 13.0f;
  p = p * s2 + 1.0f / 11.0f;
  p = p * s2 + 1.0f / 9.0f;
  p = p * s2 + 1.0f / 7.0f;
  p = p * s2 + 1.0f / 5.0f;
  p = p * s2 + 1.0f / 3.0f;
  p = p * s2 + 1.0f;
  return 2.0f * s * p;
}

// tanh(x) = expm1(2x) / (expm1(2x) + 2): exact to a few ulp near 0 too. Beyond
// |x| = 9 tanh is 1 in float; the clamp keeps expm1 finite.
FUSEDOPS_CPU_INLINE float tanh_f(float x) {
  float xc = sel(x > 9.0f, 9.0f, x);
  xc = sel(xc < -9.0f, -9.0f, xc);
  const float e = expm1_f(2.0f * xc);
  return e / (e + 2.0f);
}

FUSEDOPS_CPU_INLINE float sigmoid_f(float x) { return 1.0f / (1.0f + exp_f(-x)); }

// softplus(x) = log(1 + e^x) = max(x, 0) + log1p(e^-|x|): no overflow, and
// equal to torch's softplus (beta 1, threshold 20) within float rounding.
FUSEDOPS_CPU_INLINE float softplus_f(float x) {
  const float pos = sel(x > 0.0f, x, 0.0f);
  return pos + log1p_unit_f(exp_f(-std::fabs(x)));
}

// The same functions by type: float takes the vectorisable versions above,
// double the C library.
template <typename T>
struct Math;

template <>
struct Math<float> {
  static FUSEDOPS_CPU_INLINE float exp(float x) { return exp_f(x); }
  static FUSEDOPS_CPU_INLINE float expm1(float x) { return expm1_f(x); }
  static FUSEDOPS_CPU_INLINE float tanh(float x) { return tanh_f(x); }
  static FUSEDOPS_CPU_INLINE float sigmoid(float x) { return sigmoid_f(x); }
  static FUSEDOPS_CPU_INLINE float softplus(float x) { return softplus_f(x); }
};

template <>
struct Math<double> {
  static inline double exp(double x) { return std::exp(x); }
  static inline double expm1(double x) { return std::expm1(x); }
  static inline double tanh(double x) { return std::tanh(x); }
  static inline double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }
  static inline double softplus(double x) {
    return sel(x > 0.0, x, 0.0) + std::log1p(std::exp(-std::fabs(x)));
  }
};

}  // namespace FUSEDOPS_CPU_ISA
}  // namespace cpu
}  // namespace fusedops
