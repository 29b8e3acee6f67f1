// LLTM cell CPU kernels (see lltm.cpp), compiled once per instruction set
// (isa.h). Same math as ../lltm_impl.h (which the CUDA kernels use), written
// for the CPU's vector units: activations from vec_math.h, branch-free selects,
// and one loop over the state columns of a row through __restrict pointers,
// which vectorises (rows with other column strides are copied to a buffer
// first). Rows are split across torch's intra-op threads.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "../common.h"
#include "vec_math.h"

namespace fusedops {
namespace cpu {

// A strided 2-D view: element (r, c) at data[r * s0 + c * s1].
template <typename T>
struct Strided2d {
  const T* data;
  int64_t s0;
  int64_t s1;
};

template <typename scalar_t>
struct LltmForwardJob {
  Strided2d<scalar_t> gates;     // (B, 3S) pre-activations: input gate, output gate, candidate
  Strided2d<scalar_t> old_cell;  // (B, S)
  scalar_t* new_h;               // (B, S) contiguous
  scalar_t* new_cell;            // (B, S) contiguous
  int64_t B, S;
};

template <typename scalar_t>
struct LltmBackwardJob {
  Strided2d<scalar_t> grad_h;     // data == nullptr: no gradient (zeros)
  Strided2d<scalar_t> grad_cell;  // likewise
  Strided2d<scalar_t> gates;
  Strided2d<scalar_t> new_cell;
  scalar_t* d_gates;     // (B, 3S) contiguous
  scalar_t* d_old_cell;  // (B, S) contiguous
  int64_t B, S;
};

template <typename scalar_t>
void lltm_forward_run_avx2(const LltmForwardJob<scalar_t>& j);  // avx2.cpp
template <typename scalar_t>
void lltm_forward_run_avx512(const LltmForwardJob<scalar_t>& j);  // avx512.cpp
template <typename scalar_t>
void lltm_backward_run_avx2(const LltmBackwardJob<scalar_t>& j);  // avx2.cpp
template <typename scalar_t>
void lltm_backward_run_avx512(const LltmBackwardJob<scalar_t>& j);  // avx512.cpp

namespace FUSEDOPS_CPU_ISA {

// Rows per parallel task: about 8k elements of the (B, S) outputs.
inline int64_t lltm_row_grain(int64_t S) {
  return std::max<int64_t>(1, (int64_t{1} << 13) / std::max<int64_t>(S, 1));
}

template <typename T>
struct LltmForwardOut {
  T new_h, new_cell;
};

template <typename T>
FUSEDOPS_CPU_INLINE LltmForwardOut<T> lltm_forward_elem(T g0, T g1, T g2, T old_cell) {
  using M = Math<T>;
  const T input_gate = M::sigmoid(g0);
  const T output_gate = M::sigmoid(g1);
  const T candidate = sel(g2 > T(0), g2, M::expm1(g2));  // elu, alpha = 1
  const T new_cell = old_cell + candidate * input_gate;
  return {M::tanh(new_cell) * output_gate, new_cell};
}

template <typename T>
struct LltmBackwardOut {
  T d_g0, d_g1, d_g2, d_old_cell;
};

template <typename T>
FUSEDOPS_CPU_INLINE LltmBackwardOut<T> lltm_backward_elem(T grad_h, T grad_cell, T g0, T g1, T g2, T new_cell) {
  using M = Math<T>;
  const T input_gate = M::sigmoid(g0);
  const T output_gate = M::sigmoid(g1);
  const T t = M::tanh(new_cell);
  const T e = M::exp(g2);
  const T candidate = sel(g2 > T(0), g2, e - T(1));
  const T d_new_cell = grad_h * output_gate * (T(1) - t * t) + grad_cell;
  const T d_candidate = d_new_cell * input_gate;
  LltmBackwardOut<T> o;
  o.d_g0 = d_new_cell * candidate * input_gate * (T(1) - input_gate);
  o.d_g1 = grad_h * t * output_gate * (T(1) - output_gate);
  o.d_g2 = sel(g2 > T(0), d_candidate, d_candidate * e);
  o.d_old_cell = d_new_cell;
  return o;
}

// One row, columns contiguous in every input.
template <typename scalar_t>
void lltm_forward_row(const scalar_t* __restrict g, const scalar_t* __restrict c, scalar_t* __restrict h_out,
                      scalar_t* __restrict c_out, int64_t S) {
  using T = opmath_t<scalar_t>;
  for (int64_t j = 0; j < S; ++j) {
    const auto o = lltm_forward_elem<T>(static_cast<T>(g[j]), static_cast<T>(g[S + j]), static_cast<T>(g[2 * S + j]),
                                        static_cast<T>(c[j]));
    h_out[j] = static_cast<scalar_t>(o.new_h);
    c_out[j] = static_cast<scalar_t>(o.new_cell);
  }
}

// Row r of a strided view as a contiguous pointer: the row itself when its
// columns are contiguous, else a copy in `buf` (e.g. the stride-0 gradient of
// `new_h.sum()`, or transposed inputs), so the math always runs on the
// vectorised contiguous loop.
template <typename scalar_t>
const scalar_t* row_of(const Strided2d<scalar_t>& v, int64_t r, int64_t cols, std::vector<scalar_t>& buf) {
  const scalar_t* p = v.data + r * v.s0;
  if (v.s1 == 1 || cols <= 1) return p;
  buf.resize(static_cast<size_t>(cols));
  for (int64_t k = 0; k < cols; ++k) buf[k] = p[k * v.s1];
  return buf.data();
}

template <typename scalar_t>
void lltm_forward_run(const LltmForwardJob<scalar_t>& j) {
  torch::stable::parallel_for(0, j.B, lltm_row_grain(j.S), [&j](int64_t begin, int64_t end) {
    std::vector<scalar_t> gbuf, cbuf;
    for (int64_t r = begin; r < end; ++r) {
      lltm_forward_row(row_of(j.gates, r, 3 * j.S, gbuf), row_of(j.old_cell, r, j.S, cbuf), j.new_h + r * j.S,
                       j.new_cell + r * j.S, j.S);
    }
  });
}

template <bool HAS_H, bool HAS_C, typename scalar_t>
void lltm_backward_row(const scalar_t* __restrict dh, const scalar_t* __restrict dc, const scalar_t* __restrict g,
                       const scalar_t* __restrict nc, scalar_t* __restrict dg, scalar_t* __restrict dco, int64_t S) {
  using T = opmath_t<scalar_t>;
  for (int64_t j = 0; j < S; ++j) {
    const T gh = HAS_H ? static_cast<T>(dh[j]) : T(0);
    const T gc = HAS_C ? static_cast<T>(dc[j]) : T(0);
    const auto o = lltm_backward_elem<T>(gh, gc, static_cast<T>(g[j]), static_cast<T>(g[S + j]),
                                         static_cast<T>(g[2 * S + j]), static_cast<T>(nc[j]));
    dg[j] = static_cast<scalar_t>(o.d_g0);
    dg[S + j] = static_cast<scalar_t>(o.d_g1);
    dg[2 * S + j] = static_cast<scalar_t>(o.d_g2);
    dco[j] = static_cast<scalar_t>(o.d_old_cell);
  }
}

template <typename scalar_t>
void lltm_backward_run(const LltmBackwardJob<scalar_t>& j) {
  const bool has_h = j.grad_h.data != nullptr;
  const bool has_c = j.grad_cell.data != nullptr;
  torch::stable::parallel_for(0, j.B, lltm_row_grain(j.S), [&j, has_h, has_c](int64_t begin, int64_t end) {
    std::vector<scalar_t> hbuf, cbuf, gbuf, nbuf;
    for (int64_t r = begin; r < end; ++r) {
      const scalar_t* dh = has_h ? row_of(j.grad_h, r, j.S, hbuf) : nullptr;
      const scalar_t* dc = has_c ? row_of(j.grad_cell, r, j.S, cbuf) : nullptr;
      const scalar_t* g = row_of(j.gates, r, 3 * j.S, gbuf);
      const scalar_t* nc = row_of(j.new_cell, r, j.S, nbuf);
      scalar_t* dg = j.d_gates + r * 3 * j.S;
      scalar_t* dco = j.d_old_cell + r * j.S;
      if (has_h && has_c) {
        lltm_backward_row<true, true>(dh, dc, g, nc, dg, dco, j.S);
      } else if (has_h) {
        lltm_backward_row<true, false>(dh, dc, g, nc, dg, dco, j.S);
      } else if (has_c) {
        lltm_backward_row<false, true>(dh, dc, g, nc, dg, dco, j.S);
      } else {
        lltm_backward_row<false, false>(dh, dc, g, nc, dg, dco, j.S);
      }
    }
  });
}

}  // namespace FUSEDOPS_CPU_ISA
}  // namespace cpu
}  // namespace fusedops
