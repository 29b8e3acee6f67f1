// upfirdn2d on the CPU: upsample (zero insertion), pad/crop, FIR filter,
// downsample, in one pass. Any input strides are read directly; the output is
// channels_last when the input is. The kernel is in upfirdn2d_kernels.h
// (baseline here, AVX2 in avx2.cpp).
#include <vector>

#include "upfirdn2d_kernels.h"

namespace fusedops {
namespace {

template <typename scalar_t>
void run_typed(const upfirdn2d::Params& p, const Tensor& x, Tensor& y, const float* w) {
  cpu::Upfirdn2dJob<scalar_t> j;
  j.p = p;
  j.x = static_cast<const scalar_t*>(x.const_data_ptr());
  j.y = static_cast<scalar_t*>(y.mutable_data_ptr());
  j.w = w;
#if FUSEDOPS_HAVE_AVX2_KERNELS
  if (cpu::use_avx512()) return cpu::upfirdn2d_run_avx512(j);
  if (cpu::use_avx2()) return cpu::upfirdn2d_run_avx2(j);
#endif
  cpu::base::upfirdn2d_run(j);
}

Tensor upfirdn2d_cpu(Tensor x, Tensor f, int64_t upx, int64_t upy, int64_t downx, int64_t downy, int64_t padx0,
                     int64_t padx1, int64_t pady0, int64_t pady1, bool flip, double gain) {
  FUSEDOPS_CHECK(x.is_cpu(), "upfirdn2d: x must be a CPU tensor for this kernel");
  upfirdn2d::Prepared r = upfirdn2d::prepare(x, f, upx, upy, downx, downy, padx0, padx1, pady0, pady1, flip, gain);
  const upfirdn2d::Params p = r.p;
  if (p.N * p.C * p.OH == 0) return r.y;
  // The kernel cross-correlates with w: w = f when flip is set, f flipped in both axes otherwise.
  const float* fptr = static_cast<const float*>(r.f.const_data_ptr());
  std::vector<float> w(static_cast<size_t>(p.fh * p.fw));
  for (int64_t ky = 0; ky < p.fh; ++ky) {
    for (int64_t kx = 0; kx < p.fw; ++kx) {
      w[ky * p.fw + kx] = flip ? fptr[ky * p.fw + kx] : fptr[(p.fh - 1 - ky) * p.fw + (p.fw - 1 - kx)];
    }
  }
  THO_DISPATCH_V2(
      x.scalar_type(), "upfirdn2d_cpu", AT_WRAP([&] { run_typed<scalar_t>(p, x, r.y, w.data()); }), AT_FLOATING_TYPES,
      ScalarType::Half, ScalarType::BFloat16);
  return r.y;
}

}  // namespace
}  // namespace fusedops

STABLE_TORCH_LIBRARY_FRAGMENT(fusedops, m) {
  m.def(
      "upfirdn2d(Tensor x, Tensor f, int upx, int upy, int downx, int downy, int padx0, int padx1, int pady0, "
      "int pady1, bool flip, float gain) -> Tensor");
}

STABLE_TORCH_LIBRARY_IMPL(fusedops, CPU, m) {
  m.impl("upfirdn2d", TORCH_BOX(&fusedops::upfirdn2d_cpu));
}
