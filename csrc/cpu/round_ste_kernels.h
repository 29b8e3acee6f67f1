// round_ste CPU kernel, compiled once per instruction set (isa.h).
#pragma once

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "../common.h"
#include "vec_math.h"

namespace fusedops {
namespace cpu {

template <typename scalar_t>
void round_ste_run_avx2(const scalar_t* src, scalar_t* dst, int64_t n);  // avx2.cpp
template <typename scalar_t>
void round_ste_run_avx512(const scalar_t* src, scalar_t* dst, int64_t n);  // avx512.cpp

namespace FUSEDOPS_CPU_ISA {

// Round half to even without calling libm (std::nearbyint is a call per
// element, which keeps the loop scalar): adding and subtracting 2^mantissa_bits
// makes the FPU round in the default round-to-nearest-even mode. Values that
// large are already integers (and inf/NaN pass through). The select is a bit
// mask (sel) so the loop has no control flow and vectorises.
template <typename T>
FUSEDOPS_CPU_INLINE T round_half_even(T x) {
  constexpr T big = std::is_same_v<T, double> ? T(4503599627370496.0) : T(8388608.0f);
  const T ax = std::fabs(x);
  const T r = (ax + big) - big;
  return sel(ax < big, std::copysign(r, x), x);
}

template <typename scalar_t>
void round_segment(const scalar_t* __restrict src, scalar_t* __restrict dst, int64_t len) {
  using T = opmath_t<scalar_t>;
  for (int64_t i = 0; i < len; ++i) {
    dst[i] = static_cast<scalar_t>(round_half_even(static_cast<T>(src[i])));
  }
}

template <typename scalar_t>
void round_ste_run(const scalar_t* src, scalar_t* dst, int64_t n) {
  torch::stable::parallel_for(0, n, int64_t{1} << 16, [src, dst](int64_t begin, int64_t end) {
    round_segment(src + begin, dst + begin, end - begin);
  });
}

}  // namespace FUSEDOPS_CPU_ISA
}  // namespace cpu
}  // namespace fusedops
