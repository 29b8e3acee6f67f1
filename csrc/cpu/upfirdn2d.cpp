// upfirdn2d on the CPU: upsample (zero insertion), pad/crop, FIR filter,
// downsample, in one pass. Any input strides are read directly; the output is
// channels_last when the input is. Parallel over output rows of all planes.
#include "../upfirdn2d_impl.h"

namespace fusedops {
namespace {

Tensor upfirdn2d_cpu(Tensor x, Tensor f, int64_t upx, int64_t upy, int64_t downx, int64_t downy, int64_t padx0,
                     int64_t padx1, int64_t pady0, int64_t pady1, bool flip, double gain) {
  FUSEDOPS_CHECK(x.is_cpu(), "upfirdn2d: x must be a CPU tensor for this kernel");
  upfirdn2d::Prepared r = upfirdn2d::prepare(x, f, upx, upy, downx, downy, padx0, padx1, pady0, pady1, flip, gain);
  const upfirdn2d::Params p = r.p;
  const int64_t rows = p.N * p.C * p.OH;
  if (rows == 0) return r.y;
  const float* fptr = static_cast<const float*>(r.f.const_data_ptr());
  const float* wbase = flip ? fptr : fptr + (p.fh * p.fw - 1);
  const int64_t wsy = flip ? p.fw : -p.fw;
  const int64_t wsx = flip ? 1 : -1;
  THO_DISPATCH_V2(
      x.scalar_type(), "upfirdn2d_cpu", AT_WRAP([&] {
        using acc_t = opmath_t<scalar_t>;
        const auto* xp = static_cast<const scalar_t*>(x.const_data_ptr());
        auto* yp = static_cast<scalar_t*>(r.y.mutable_data_ptr());
        const acc_t g = static_cast<acc_t>(p.gain);
        // Column taps depend only on ox: computed once.
        std::vector<upfirdn2d::AxisTaps<int64_t>> xtaps(p.OW);
        for (int64_t ox = 0; ox < p.OW; ++ox) {
          xtaps[ox] = upfirdn2d::axis_taps<int64_t>(ox, p.downx, p.padx0, p.upx, p.IW, p.fw);
        }
        const int64_t grain = std::max<int64_t>(1, (1 << 14) / std::max<int64_t>(1, p.OW * p.fh * p.fw));
        torch::stable::parallel_for(0, rows, grain, [&](int64_t begin, int64_t end) {
          for (int64_t row = begin; row < end; ++row) {
            const int64_t oy = row % p.OH;
            const int64_t nc = row / p.OH;
            const int64_t c = nc % p.C;
            const int64_t n = nc / p.C;
            const scalar_t* plane = xp + n * p.sxn + c * p.sxc;
            scalar_t* out = yp + n * p.syn + c * p.syc + oy * p.syh;
            const auto ty = upfirdn2d::axis_taps<int64_t>(oy, p.downy, p.pady0, p.upy, p.IH, p.fh);
            for (int64_t ox = 0; ox < p.OW; ++ox) {
              const acc_t acc = upfirdn2d::dot_taps<scalar_t, acc_t, int64_t>(plane, wbase, wsy, wsx, ty, xtaps[ox],
                                                                             p.upy, p.upx, p.sxh, p.sxw);
              out[ox * p.syw] = static_cast<scalar_t>(acc * g);
            }
          }
        });
      }),
      AT_FLOATING_TYPES, ScalarType::Half, ScalarType::BFloat16);
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
