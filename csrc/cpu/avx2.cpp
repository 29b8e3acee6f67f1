// The AVX2+FMA build of the CPU kernels (see isa.h): the same kernel headers
// as the baseline build, compiled under `#pragma GCC target("avx2,fma")` into
// namespace cpu::avx2, plus the entry points the ops call when the CPU has
// AVX2 and FMA. Every header these kernels need from torch or the standard
// library is included before the pragma, so only our kernels get AVX2 code.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <optional>
#include <type_traits>
#include <vector>

#include "../bias_act_common.h"
#include "../common.h"
#include "../lltm_impl.h"
#include "../upfirdn2d_impl.h"
#include "isa.h"

#if FUSEDOPS_HAVE_AVX2_KERNELS

#pragma GCC push_options
#pragma GCC target("avx2,fma")

#undef FUSEDOPS_CPU_ISA
#define FUSEDOPS_CPU_ISA avx2

#include "bias_act_kernels.h"
#include "lltm_kernels.h"
#include "round_ste_kernels.h"
#include "upfirdn2d_kernels.h"

namespace fusedops {
namespace cpu {

template <typename scalar_t>
void bias_act_run_avx2(const BiasActJob<scalar_t>& j, int order, int64_t act) {
  avx2::bias_act_run(j, order, act);
}

template <typename scalar_t>
void round_ste_run_avx2(const scalar_t* src, scalar_t* dst, int64_t n) {
  avx2::round_ste_run(src, dst, n);
}

template <typename scalar_t>
void lltm_forward_run_avx2(const LltmForwardJob<scalar_t>& j) {
  avx2::lltm_forward_run(j);
}

template <typename scalar_t>
void lltm_backward_run_avx2(const LltmBackwardJob<scalar_t>& j) {
  avx2::lltm_backward_run(j);
}

template <typename scalar_t>
void upfirdn2d_run_avx2(const Upfirdn2dJob<scalar_t>& j) {
  avx2::upfirdn2d_run(j);
}

#define FUSEDOPS_INSTANTIATE(T)                                                      \
  template void bias_act_run_avx2<T>(const BiasActJob<T>&, int, int64_t);           \
  template void round_ste_run_avx2<T>(const T*, T*, int64_t);                     \
  template void lltm_forward_run_avx2<T>(const LltmForwardJob<T>&);                \
  template void lltm_backward_run_avx2<T>(const LltmBackwardJob<T>&);              \
  template void upfirdn2d_run_avx2<T>(const Upfirdn2dJob<T>&);

FUSEDOPS_INSTANTIATE(float)
FUSEDOPS_INSTANTIATE(double)
FUSEDOPS_INSTANTIATE(c10::Half)
FUSEDOPS_INSTANTIATE(c10::BFloat16)

#undef FUSEDOPS_INSTANTIATE

}  // namespace cpu
}  // namespace fusedops

#pragma GCC pop_options

#endif  // FUSEDOPS_HAVE_AVX2_KERNELS
