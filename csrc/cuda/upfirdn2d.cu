// upfirdn2d on CUDA: one thread per output column (n, c, ox) and a chunk of
// output rows. The column's horizontal taps are computed once per thread, the
// chunk's vertical taps once per block; each output then loops only over the
// taps that hit real (not inserted) input samples. Warps
// run along W for NCHW outputs and along C for channels_last outputs, so reads
// and writes are coalesced in both layouts. Inputs are read through their
// strides (no copy). 32-bit index arithmetic when every offset fits, else 64-bit.
#include <limits>

#include "../upfirdn2d_impl.h"
#include "cuda_common.cuh"

namespace fusedops {
namespace {

using upfirdn2d::AxisTaps;
using upfirdn2d::Params;

constexpr int kThreads = 256;
constexpr int kMaxRows = 16;  // output rows per block (and per thread)

// Grid: x over output columns (n, c, ox), y over chunks of <= kMaxRows output
// rows. The chunk's vertical taps are computed once per block (shared memory),
// the column's horizontal taps once per thread; the inner loops then walk
// pointers over the taps that hit real input samples.
// MAXT > 0: at most MAXT taps per axis hit real samples; the tap loops are
// unrolled (and predicated). MAXT == 0: any number of taps (runtime loops).
template <typename scalar_t, typename I, int MAXT>
__global__ void __launch_bounds__(kThreads)
    upfirdn2d_kernel(const scalar_t* __restrict__ x, const float* __restrict__ f, scalar_t* __restrict__ y,
                     const Params p, const int64_t cols, const int rows_per_chunk, const int64_t row_chunks,
                     const bool channels_last) {
  using acc_t = opmath_t<scalar_t>;
  __shared__ I s_yoff[kMaxRows];  // input row offset of the first vertical tap
  __shared__ I s_wy[kMaxRows];    // filter offset of the first vertical tap
  __shared__ int s_ny[kMaxRows];  // number of vertical taps

  const I C = static_cast<I>(p.C), OW = static_cast<I>(p.OW), OH = static_cast<I>(p.OH);
  const I IH = static_cast<I>(p.IH), IW = static_cast<I>(p.IW);
  const I fh = static_cast<I>(p.fh), fw = static_cast<I>(p.fw);
  const I upx = static_cast<I>(p.upx), upy = static_cast<I>(p.upy);
  const I downx = static_cast<I>(p.downx), downy = static_cast<I>(p.downy);
  const I padx0 = static_cast<I>(p.padx0), pady0 = static_cast<I>(p.pady0);
  const I sxh = static_cast<I>(p.sxh), sxw = static_cast<I>(p.sxw), syh = static_cast<I>(p.syh);
  // w[ky][kx] = wbase[ky*wsy + kx*wsx]: conv2d's weight, flip(f) unless p.flip.
  const float* wbase = p.flip ? f : f + (fh * fw - 1);
  const I wsy = p.flip ? fw : -fw;
  const I wsx = p.flip ? I(1) : I(-1);
  const I x_step_w = upx * wsx;  // filter step between horizontal taps
  const I y_step_w = upy * wsy;  // filter step between vertical taps
  const acc_t gain = static_cast<acc_t>(p.gain);
  const int64_t col_step = static_cast<int64_t>(gridDim.x) * blockDim.x;

  for (int64_t chunk = blockIdx.y; chunk < row_chunks; chunk += gridDim.y) {
    const I oy_begin = static_cast<I>(chunk) * rows_per_chunk;
    const int nrows = static_cast<int>(OH - oy_begin < rows_per_chunk ? OH - oy_begin : rows_per_chunk);
    __syncthreads();  // the previous chunk's table is no longer read
    const int t = static_cast<int>(threadIdx.x);
    if (t < nrows) {
      const AxisTaps<I> ty = upfirdn2d::axis_taps<I>(oy_begin + static_cast<I>(t), downy, pady0, upy, IH, fh);
      const bool any = ty.k_begin < ty.k_end;
      s_ny[t] = any ? static_cast<int>((ty.k_end - ty.k_begin + upy - 1) / upy) : 0;
      s_yoff[t] = any ? ty.i_begin * sxh : I(0);
      s_wy[t] = any ? ty.k_begin * wsy : I(0);
    }
    __syncthreads();

    for (int64_t col = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; col < cols; col += col_step) {
      const I ci = static_cast<I>(col);
      I n, c, ox;
      if (channels_last) {
        c = ci % C;
        const I t = ci / C;
        ox = t % OW;
        n = t / OW;
      } else {
        ox = ci % OW;
        const I t = ci / OW;
        c = t % C;
        n = t / C;
      }
      const AxisTaps<I> tx = upfirdn2d::axis_taps<I>(ox, downx, padx0, upx, IW, fw);
      const bool any = tx.k_begin < tx.k_end;
      const int nx = any ? static_cast<int>((tx.k_end - tx.k_begin + upx - 1) / upx) : 0;
      const scalar_t* base = x + (n * static_cast<I>(p.sxn) + c * static_cast<I>(p.sxc) + (any ? tx.i_begin * sxw : I(0)));
      const float* wcol = wbase + (any ? tx.k_begin * wsx : I(0));
      scalar_t* out = y + (n * static_cast<I>(p.syn) + c * static_cast<I>(p.syc) + ox * static_cast<I>(p.syw) +
                           oy_begin * syh);
      for (int r = 0; r < nrows; ++r) {
        const int ny = s_ny[r];
        const scalar_t* px_row = base + s_yoff[r];
        const float* pw_row = wcol + s_wy[r];
        acc_t acc = acc_t(0);
        if constexpr (MAXT > 0) {
#pragma unroll
          for (int j = 0; j < MAXT; ++j) {
            if (j < ny) {
#pragma unroll
              for (int i = 0; i < MAXT; ++i) {
                if (i < nx) {
                  acc += static_cast<acc_t>(px_row[i * sxw]) * static_cast<acc_t>(pw_row[i * x_step_w]);
                }
              }
            }
            px_row += sxh;
            pw_row += y_step_w;
          }
        } else {
          for (int j = 0; j < ny; ++j) {
            const scalar_t* px = px_row;
            const float* pw = pw_row;
            for (int i = 0; i < nx; ++i) {
              acc += static_cast<acc_t>(*px) * static_cast<acc_t>(*pw);
              px += sxw;
              pw += x_step_w;
            }
            px_row += sxh;
            pw_row += y_step_w;
          }
        }
        out[r * syh] = static_cast<scalar_t>(acc * gain);
      }
    }
  }
}

template <typename scalar_t>
void launch(bool use32, int64_t max_taps, dim3 grid, cudaStream_t stream, const scalar_t* x, const float* f,
            scalar_t* y, const Params& p, int64_t cols, int rows_per_chunk, int64_t row_chunks, bool channels_last) {
#define FUSEDOPS_UPFIRDN2D_LAUNCH(I, MAXT)                                                   \
  upfirdn2d_kernel<scalar_t, I, MAXT>                                                       \
      <<<grid, kThreads, 0, stream>>>(x, f, y, p, cols, rows_per_chunk, row_chunks, channels_last)
  if (!use32) {
    FUSEDOPS_UPFIRDN2D_LAUNCH(int64_t, 0);
  } else if (max_taps <= 2) {
    FUSEDOPS_UPFIRDN2D_LAUNCH(int32_t, 2);
  } else if (max_taps <= 4) {
    FUSEDOPS_UPFIRDN2D_LAUNCH(int32_t, 4);
  } else if (max_taps <= 8) {
    FUSEDOPS_UPFIRDN2D_LAUNCH(int32_t, 8);
  } else {
    FUSEDOPS_UPFIRDN2D_LAUNCH(int32_t, 0);
  }
#undef FUSEDOPS_UPFIRDN2D_LAUNCH
  FUSEDOPS_CUDA_CHECK(cudaGetLastError());
}

int64_t max_offset(const Params& p, bool input) {
  const int64_t sizes[4] = {p.N, p.C, input ? p.IH : p.OH, input ? p.IW : p.OW};
  const int64_t strides[4] = {input ? p.sxn : p.syn, input ? p.sxc : p.syc, input ? p.sxh : p.syh,
                              input ? p.sxw : p.syw};
  int64_t off = 0;
  for (int i = 0; i < 4; ++i) off += (sizes[i] > 0 ? sizes[i] - 1 : 0) * strides[i];
  return off;
}

// True when every index the kernel forms fits in int32 (with margin).
bool fits_int32(const Params& p, int64_t cols) {
  const int64_t lim = std::numeric_limits<int32_t>::max() / 2;
  const int64_t coords = std::max(p.OH * p.downy, p.OW * p.downx) + std::max(std::abs(p.padx0), std::abs(p.pady0)) +
                         std::max(p.IH * p.upy, p.IW * p.upx) + std::max(p.fh, p.fw);
  return cols < lim && p.OH < lim && max_offset(p, true) < lim && max_offset(p, false) < lim && coords < lim &&
         p.fh * p.fw < lim;
}

Tensor upfirdn2d_cuda(Tensor x, Tensor f, int64_t upx, int64_t upy, int64_t downx, int64_t downy, int64_t padx0,
                      int64_t padx1, int64_t pady0, int64_t pady1, bool flip, double gain) {
  cuda::check_cuda_tensor(x, "upfirdn2d", "x");
  const int32_t device = x.get_device_index();
  cuda::DeviceGuardIfNeeded guard(device);
  upfirdn2d::Prepared r = upfirdn2d::prepare(x, f, upx, upy, downx, downy, padx0, padx1, pady0, pady1, flip, gain);
  const Params& p = r.p;
  const int64_t cols = p.N * p.C * p.OW;
  if (cols == 0 || p.OH == 0) return r.y;

  // Rows per block: up to kMaxRows (amortises the column set-up), fewer when
  // the grid would not fill the GPU.
  const int64_t col_blocks_needed = (cols + kThreads - 1) / kThreads;
  const int64_t target_blocks = static_cast<int64_t>(cuda::multiprocessor_count(device)) * 8;
  int64_t rows_per_chunk = kMaxRows;
  while (rows_per_chunk > 1 && col_blocks_needed * ((p.OH + rows_per_chunk - 1) / rows_per_chunk) < target_blocks) {
    rows_per_chunk /= 2;
  }
  const int64_t row_chunks = (p.OH + rows_per_chunk - 1) / rows_per_chunk;
  const int64_t col_blocks = std::min<int64_t>(col_blocks_needed, int64_t(1) << 20);
  const dim3 grid(static_cast<unsigned int>(col_blocks), static_cast<unsigned int>(std::min<int64_t>(row_chunks, 65535)));
  cudaStream_t stream = cuda::current_stream(device);
  const float* fptr = static_cast<const float*>(r.f.const_data_ptr());
  const bool use32 = fits_int32(p, cols);
  const bool cl = r.channels_last;
  const int rpc = static_cast<int>(rows_per_chunk);
  // Taps per axis that can hit real samples: at most ceil(f / up).
  const int64_t max_taps = std::max((p.fw + p.upx - 1) / p.upx, (p.fh + p.upy - 1) / p.upy);

  THO_DISPATCH_V2(
      x.scalar_type(), "upfirdn2d_cuda", AT_WRAP([&] {
        const auto* xp = static_cast<const scalar_t*>(x.const_data_ptr());
        auto* yp = static_cast<scalar_t*>(r.y.mutable_data_ptr());
        launch<scalar_t>(use32, max_taps, grid, stream, xp, fptr, yp, p, cols, rpc, row_chunks, cl);
      }),
      AT_FLOATING_TYPES, ScalarType::Half, ScalarType::BFloat16);
  return r.y;
}

}  // namespace
}  // namespace fusedops

STABLE_TORCH_LIBRARY_IMPL(fusedops, CUDA, m) {
  m.impl("upfirdn2d", TORCH_BOX(&fusedops::upfirdn2d_cuda));
}
