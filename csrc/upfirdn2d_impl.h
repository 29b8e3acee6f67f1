// upfirdn2d: shared by the CPU and CUDA kernels. Argument checks, output
// allocation (memory format follows the input) and the per-axis tap arithmetic.
//
// Semantics (StyleGAN2-ADA): for each NCHW plane, upsample by inserting up-1
// zeros after every sample, pad (negative pads crop), cross-correlate with the
// filter w = flip(f) (or w = f when flip is set) as conv2d does, keep every
// down-th sample, multiply by gain. In one axis, with u = o*down - pad0 + k the
// upsampled coordinate that tap k of output o reads:
//
//   y[o] = gain * sum_k xup[o*down - pad0 + k] * w[k],   xup[u] = x[u/up] if u % up == 0
//
// Only taps with u % up == 0 and 0 <= u < in*up hit a real sample; they are
// k = k_begin, k_begin + up, ... < k_end and read i = i_begin, i_begin + 1, ...
#pragma once

#include "common.h"

#if defined(__CUDACC__)
#define FUSEDOPS_HD __host__ __device__ __forceinline__
#else
#define FUSEDOPS_HD inline
#endif

namespace fusedops {
namespace upfirdn2d {
namespace {  // internal to each library (and Tensor members need hidden visibility)

struct Params {
  int64_t N, C, IH, IW, OH, OW;
  int64_t fh, fw;
  int64_t upx, upy, downx, downy;
  int64_t padx0, pady0;
  int64_t sxn, sxc, sxh, sxw;  // input strides (any, read directly)
  int64_t syn, syc, syh, syw;  // output strides
  bool flip;
  double gain;
};

// Taps of one output coordinate along one axis.
template <typename I>
struct AxisTaps {
  I k_begin;  // first tap hitting a real input sample
  I k_end;    // taps k < k_end
  I i_begin;  // input index read by tap k_begin
};

template <typename I>
FUSEDOPS_HD AxisTaps<I> axis_taps(I o, I down, I pad0, I up, I in_size, I taps) {
  const I u0 = o * down - pad0;  // upsampled coordinate read by tap 0
  AxisTaps<I> a;
  if (u0 < 0) {
    a.k_begin = -u0;  // u == 0: the first real sample
  } else {
    const I r = u0 % up;
    a.k_begin = r == 0 ? I(0) : up - r;
  }
  const I limit = in_size * up - u0;  // u < in_size*up  <=>  k < limit
  a.k_end = limit < taps ? limit : taps;
  a.i_begin = (u0 + a.k_begin) / up;  // exact (a multiple of up, >= 0) when k_begin < k_end
  return a;
}

// Output extent along one axis; <= 0 when the padded input is smaller than the filter.
inline int64_t out_size(int64_t in, int64_t up, int64_t pad0, int64_t pad1, int64_t taps, int64_t down) {
  const int64_t span = in * up + pad0 + pad1 - taps;  // conv output is span + 1 samples
  if (span < 0) return 0;
  return span / down + 1;
}

inline bool dense_in_order(const Tensor& t, const int64_t (&order)[4]) {
  int64_t expected = 1;
  for (int64_t d : order) {
    const int64_t size = t.size(d);
    if (size == 1) continue;
    if (t.stride(d) != expected) return false;
    expected *= size;
  }
  return true;
}

// The output is channels_last exactly when the input is channels_last-dense
// and not also NCHW-dense (mirrored by _upfirdn2d.py's fake kernel).
inline bool wants_channels_last(const Tensor& x) {
  if (x.numel() == 0) return false;
  return dense_in_order(x, {1, 3, 2, 0}) && !dense_in_order(x, {3, 2, 1, 0});
}

struct Prepared {
  Params p;
  Tensor f;  // contiguous float32 [fh, fw]
  Tensor y;
  bool channels_last;
};

inline Prepared prepare(const Tensor& x, const Tensor& f, int64_t upx, int64_t upy, int64_t downx,
                        int64_t downy, int64_t padx0, int64_t padx1, int64_t pady0, int64_t pady1,
                        bool flip, double gain) {
  FUSEDOPS_CHECK(x.dim() == 4, "upfirdn2d: x must be a 4-D NCHW tensor, got ", x.dim(), " dimensions");
  FUSEDOPS_CHECK(is_floating(x.scalar_type()),
                 "upfirdn2d: x must be a floating-point tensor, got ", dtype_name(x.scalar_type()));
  FUSEDOPS_CHECK(f.scalar_type() == ScalarType::Float,
                 "upfirdn2d: f must be a float32 tensor, got ", dtype_name(f.scalar_type()));
  FUSEDOPS_CHECK(f.dim() == 2, "upfirdn2d: f must be a 2-D filter [fh, fw], got ", f.dim(), " dimensions");
  FUSEDOPS_CHECK(f.is_cuda() == x.is_cuda() && f.is_cpu() == x.is_cpu() &&
                     f.get_device_index() == x.get_device_index(),
                 "upfirdn2d: f must be on the same device as x");
  FUSEDOPS_CHECK(f.numel() > 0, "upfirdn2d: f must not be empty");
  FUSEDOPS_CHECK(upx >= 1 && upy >= 1, "upfirdn2d: up must be >= 1, got [", upx, ", ", upy, "]");
  FUSEDOPS_CHECK(downx >= 1 && downy >= 1, "upfirdn2d: down must be >= 1, got [", downx, ", ", downy, "]");
  Prepared r;
  Params& p = r.p;
  p.N = x.size(0);
  p.C = x.size(1);
  p.IH = x.size(2);
  p.IW = x.size(3);
  p.fh = f.size(0);
  p.fw = f.size(1);
  p.upx = upx;
  p.upy = upy;
  p.downx = downx;
  p.downy = downy;
  p.padx0 = padx0;
  p.pady0 = pady0;
  p.OH = out_size(p.IH, upy, pady0, pady1, p.fh, downy);
  p.OW = out_size(p.IW, upx, padx0, padx1, p.fw, downx);
  FUSEDOPS_CHECK(p.OH > 0 && p.OW > 0, "upfirdn2d: padding gives an empty output (input ", p.IH, "x", p.IW,
                 ", up [", upx, ", ", upy, "], padding [", padx0, ", ", padx1, ", ", pady0, ", ", pady1,
                 "], filter ", p.fh, "x", p.fw, ")");
  p.sxn = x.stride(0);
  p.sxc = x.stride(1);
  p.sxh = x.stride(2);
  p.sxw = x.stride(3);
  p.flip = flip;
  p.gain = gain;
  r.f = torch::stable::contiguous(f);
  r.channels_last = wants_channels_last(x);
  if (r.channels_last) {
    Tensor nhwc = torch::stable::new_empty(x, {p.N, p.OH, p.OW, p.C});
    r.y = torch::stable::transpose(torch::stable::transpose(nhwc, 1, 3), 2, 3);
  } else {
    r.y = torch::stable::new_empty(x, {p.N, p.C, p.OH, p.OW});
  }
  p.syn = r.y.stride(0);
  p.syc = r.y.stride(1);
  p.syh = r.y.stride(2);
  p.syw = r.y.stride(3);
  return r;
}

// One output pixel: row/column tap ranges precomputed; strides in elements.
// The filter is read as w[ky][kx] = wbase[ky*wsy + kx*wsx] (flipped or not).
template <typename scalar_t, typename acc_t, typename I>
FUSEDOPS_HD acc_t dot_taps(const scalar_t* __restrict__ plane, const float* __restrict__ wbase, I wsy, I wsx,
                           const AxisTaps<I>& ty, const AxisTaps<I>& tx, I upy, I upx, I sxh, I sxw) {
  acc_t acc = acc_t(0);
  I iy = ty.i_begin;
  for (I ky = ty.k_begin; ky < ty.k_end; ky += upy, ++iy) {
    const scalar_t* row = plane + iy * sxh;
    const float* wrow = wbase + ky * wsy;
    I ix = tx.i_begin;
    for (I kx = tx.k_begin; kx < tx.k_end; kx += upx, ++ix) {
      acc += static_cast<acc_t>(row[ix * sxw]) * static_cast<acc_t>(wrow[kx * wsx]);
    }
  }
  return acc;
}

}  // namespace
}  // namespace upfirdn2d
}  // namespace fusedops
