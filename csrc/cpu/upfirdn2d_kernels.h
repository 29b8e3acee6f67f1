// upfirdn2d CPU kernel (see upfirdn2d.cpp), compiled once per instruction set
// (isa.h).
//
// The old kernel computed each output pixel as its own small dot product over
// the taps that hit real samples; the tap ranges change from pixel to pixel,
// so nothing vectorised. This one works a row at a time:
//
// * along x, each input row that an output row needs is expanded once into
//   the upsampled, padded row (zeros inserted, pads as zeros, crops dropped),
//   stored as `downx` phases so that output column ox and tap kx read element
//   ox + kx / downx of phase kx % downx: contiguous whatever `downx` is;
// * along y, only the taps that hit real input rows are visited (axis_taps);
// * an output row is then sum over (ky, kx) of w[ky][kx] * phase_row[ox + off],
//   a loop over ox that the compiler vectorises, accumulated in opmath.
//
// Tasks are (plane, block of output rows), spread over torch's intra-op
// threads; each task expands only the input rows its block needs.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "../upfirdn2d_impl.h"
#include "vec_math.h"

namespace fusedops {
namespace cpu {

template <typename scalar_t>
struct Upfirdn2dJob {
  upfirdn2d::Params p;
  const scalar_t* x;
  scalar_t* y;
  const float* w;  // [fh, fw], already oriented: out = sum w[ky][kx] * xpad[oy*down + ky][ox*down + kx]
};

template <typename scalar_t>
void upfirdn2d_run_avx2(const Upfirdn2dJob<scalar_t>& j);  // avx2.cpp
template <typename scalar_t>
void upfirdn2d_run_avx512(const Upfirdn2dJob<scalar_t>& j);  // avx512.cpp

namespace FUSEDOPS_CPU_ISA {

// 32-byte vectors of T as a GCC/Clang vector extension: 8 floats or 4 doubles,
// one AVX register, or two SSE registers in the baseline build. The inner loop
// of an output row is written with them directly: left to the auto-vectoriser
// it was versioned (run-time alias checks) into a scalar loop that ran instead.
template <typename T>
struct Vec32 {
  typedef T type __attribute__((vector_size(32)));
  static constexpr int64_t lanes = 32 / sizeof(T);
};

template <typename V, typename T>
FUSEDOPS_CPU_INLINE V vload(const T* p) {
  V v;
  std::memcpy(&v, p, sizeof(V));
  return v;
}

// NV vectors of accumulators (output columns ox0 ...), which stay in registers
// while all the taps of the row are applied; then scaled and stored.
template <int NV, typename acc_t, typename scalar_t>
FUSEDOPS_CPU_INLINE void upfirdn_output_chunk(const acc_t* const* srcs, const acc_t* ws, int64_t ntaps,
                                              int64_t ox0, int64_t len, scalar_t* out, int64_t syw, acc_t gain) {
  using V = typename Vec32<acc_t>::type;
  constexpr int64_t L = Vec32<acc_t>::lanes;
  V acc[NV] = {};
  for (int64_t t = 0; t < ntaps; ++t) {
    const acc_t* s = srcs[t] + ox0;  // rows are padded: reading a full chunk is in bounds
    const V w = V{} + ws[t];
    for (int v = 0; v < NV; ++v) acc[v] += w * vload<V>(s + v * L);
  }
  acc_t a[NV * L];
  std::memcpy(a, acc, sizeof(acc));
  scalar_t* o = out + ox0 * syw;
  if (syw == 1) {
    for (int64_t k = 0; k < len; ++k) o[k] = static_cast<scalar_t>(a[k] * gain);
  } else {
    for (int64_t k = 0; k < len; ++k) o[k * syw] = static_cast<scalar_t>(a[k] * gain);
  }
}

// The most output columns one chunk computes (and so the zero padding a row needs).
template <typename acc_t>
constexpr int64_t upfirdn_chunk() {
  return 4 * Vec32<acc_t>::lanes;
}

template <typename acc_t, typename scalar_t>
FUSEDOPS_CPU_INLINE void upfirdn_output_row(const acc_t* const* srcs, const acc_t* ws, int64_t ntaps,
                                            scalar_t* out, int64_t syw, int64_t OW, acc_t gain) {
  constexpr int64_t L = Vec32<acc_t>::lanes;
  int64_t ox0 = 0;
  for (; ox0 + 4 * L <= OW; ox0 += 4 * L) upfirdn_output_chunk<4>(srcs, ws, ntaps, ox0, 4 * L, out, syw, gain);
  const int64_t rest = OW - ox0;
  if (rest > 2 * L) {
    upfirdn_output_chunk<4>(srcs, ws, ntaps, ox0, rest, out, syw, gain);
  } else if (rest > L) {
    upfirdn_output_chunk<2>(srcs, ws, ntaps, ox0, rest, out, syw, gain);
  } else if (rest > 0) {
    upfirdn_output_chunk<1>(srcs, ws, ntaps, ox0, rest, out, syw, gain);
  }
}

template <typename scalar_t>
void upfirdn2d_run(const Upfirdn2dJob<scalar_t>& j) {
  using acc_t = opmath_t<scalar_t>;
  const upfirdn2d::Params& p = j.p;
  const int64_t P = p.downx;                     // phases of the expanded row
  const int64_t M = p.OW + (p.fw - 1) / P + 1;  // entries per phase that outputs read
  const int64_t stride = M + upfirdn_chunk<acc_t>();      // plus zeros for the last chunk's over-read
  const int64_t row_len = P * stride;
  std::vector<acc_t> w(static_cast<size_t>(p.fh * p.fw));
  for (int64_t k = 0; k < p.fh * p.fw; ++k) w[k] = static_cast<acc_t>(j.w[k]);
  const acc_t gain = static_cast<acc_t>(p.gain);
  // Where tap kx starts reading in an expanded row: phase kx % P, offset kx / P.
  std::vector<int64_t> xoff(static_cast<size_t>(p.fw));
  for (int64_t kx = 0; kx < p.fw; ++kx) xoff[kx] = (kx % P) * stride + kx / P;
  // Input columns that land in the part of the expanded row the outputs read.
  int64_t ix_lo = p.IW, ix_hi = 0;
  for (int64_t ix = 0; ix < p.IW; ++ix) {
    const int64_t t = ix * p.upx + p.padx0;  // position in the padded, upsampled row
    if (t >= 0 && t / P < M) {
      ix_lo = std::min(ix_lo, ix);
      ix_hi = ix + 1;
    }
  }
  // Without upsampling, phase q holds input columns m * P + q - padx0: for each
  // phase, the range of m that hits the input.
  std::vector<int64_t> m_lo(static_cast<size_t>(P)), m_hi(static_cast<size_t>(P));
  for (int64_t q = 0; q < P; ++q) {
    const int64_t first = q - p.padx0;  // input column of m = 0
    m_lo[q] = first >= 0 ? 0 : (-first + P - 1) / P;
    m_hi[q] = std::max(m_lo[q], std::min(M, first <= p.IW - 1 ? (p.IW - 1 - first) / P + 1 : 0));
  }

  // Row taps of every output row (axis_taps divides; once per call, not per plane).
  std::vector<upfirdn2d::AxisTaps<int64_t>> ytaps(static_cast<size_t>(p.OH));
  for (int64_t oy = 0; oy < p.OH; ++oy) {
    ytaps[oy] = upfirdn2d::axis_taps<int64_t>(oy, p.downy, p.pady0, p.upy, p.IH, p.fh);
  }

  // Output rows per task: enough work to amortise the expansion of the rows a
  // block reads, small enough to balance the threads.
  const int64_t block =
      std::max<int64_t>(1, std::min<int64_t>(p.OH, (int64_t{1} << 14) / std::max<int64_t>(1, p.OW)));
  const int64_t blocks_per_plane = (p.OH + block - 1) / block;
  const int64_t tasks = p.N * p.C * blocks_per_plane;

  torch::stable::parallel_for(0, tasks, 1, [&](int64_t begin, int64_t end) {
    std::vector<acc_t> rows;  // the expanded input rows of a task
    std::vector<const acc_t*> srcs(static_cast<size_t>(p.fh * p.fw));
    std::vector<acc_t> ws(static_cast<size_t>(p.fh * p.fw));
    for (int64_t task = begin; task < end; ++task) {
      const int64_t plane = task / blocks_per_plane;
      const int64_t oy0 = (task % blocks_per_plane) * block;
      const int64_t oy1 = std::min(p.OH, oy0 + block);
      const int64_t n = plane / p.C;
      const int64_t c = plane % p.C;
      const scalar_t* xp = j.x + n * p.sxn + c * p.sxc;
      scalar_t* yp = j.y + n * p.syn + c * p.syc;
      // The input rows the block reads.
      int64_t lo = p.IH, hi = -1;
      for (int64_t oy = oy0; oy < oy1; ++oy) {
        const auto& ty = ytaps[oy];
        if (ty.k_begin >= ty.k_end) continue;
        const int64_t count = (ty.k_end - ty.k_begin + p.upy - 1) / p.upy;
        lo = std::min(lo, ty.i_begin);
        hi = std::max(hi, ty.i_begin + count - 1);
      }
      const int64_t nrows = hi >= lo ? hi - lo + 1 : 0;
      rows.resize(static_cast<size_t>(std::max<int64_t>(nrows, 1) * row_len));
      for (int64_t r = 0; r < nrows; ++r) {
        const scalar_t* xrow = xp + (lo + r) * p.sxh;
        acc_t* dst = rows.data() + r * row_len;
        if (p.upx == 1) {
          // Phase q is a strided read of the input row; zeros (padding) around it.
          for (int64_t q = 0; q < P; ++q) {
            const scalar_t* src = xrow + (q - p.padx0) * p.sxw;
            acc_t* d = dst + q * stride;
            std::fill(d, d + m_lo[q], acc_t(0));
            std::fill(d + m_hi[q], d + stride, acc_t(0));
            if (p.sxw == 1 && P == 1) {
              for (int64_t m = m_lo[q]; m < m_hi[q]; ++m) d[m] = static_cast<acc_t>(src[m]);
            } else if (p.sxw == 1 && P == 2) {
              for (int64_t m = m_lo[q]; m < m_hi[q]; ++m) d[m] = static_cast<acc_t>(src[2 * m]);
            } else {
              const int64_t step = P * p.sxw;
              for (int64_t m = m_lo[q]; m < m_hi[q]; ++m) d[m] = static_cast<acc_t>(src[m * step]);
            }
          }
        } else {
          // Zero insertion: input column ix goes to position ix * upx + padx0.
          std::fill(dst, dst + row_len, acc_t(0));
          for (int64_t ix = ix_lo; ix < ix_hi; ++ix) {
            const int64_t t = ix * p.upx + p.padx0;
            dst[(t % P) * stride + t / P] = static_cast<acc_t>(xrow[ix * p.sxw]);
          }
        }
      }
      for (int64_t oy = oy0; oy < oy1; ++oy) {
        const auto& ty = ytaps[oy];
        int64_t ntaps = 0;
        int64_t iy = ty.i_begin;
        for (int64_t ky = ty.k_begin; ky < ty.k_end; ky += p.upy, ++iy) {
          const acc_t* row = rows.data() + (iy - lo) * row_len;
          for (int64_t kx = 0; kx < p.fw; ++kx) {
            srcs[ntaps] = row + xoff[kx];
            ws[ntaps] = w[ky * p.fw + kx];
            ++ntaps;
          }
        }
        upfirdn_output_row(srcs.data(), ws.data(), ntaps, yp + oy * p.syh, p.syw, p.OW, gain);
      }
    }
  });
}

}  // namespace FUSEDOPS_CPU_ISA
}  // namespace cpu
}  // namespace fusedops
