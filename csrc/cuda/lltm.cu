// LLTM cell on CUDA: one fused kernel for the pointwise forward and one for the
// pointwise backward (the matrix product stays in PyTorch). The math lives in
// ../lltm_impl.h, shared with the CPU kernels; half and bfloat16 are computed
// in float.
//
// Layout: a 2-D launch, threadIdx.x/blockIdx.x over the S state columns
// (coalesced across a warp for row-major inputs) and threadIdx.y/blockIdx.y
// over the B rows, grid-striding over rows when B is large. Inputs are read
// through their strides (no contiguous() copies); outputs are contiguous. All
// offsets are 64-bit.
#include <climits>

#include "../lltm_impl.h"
#include "cuda_common.cuh"

namespace fusedops {
namespace {

using lltm::View2d;

template <typename T>
View2d<T> view2d(const Tensor& t) {
  return {static_cast<const T*>(t.const_data_ptr()), t.strides()[0], t.strides()[1]};
}

template <typename scalar_t>
__global__ void lltm_cell_forward_kernel(const View2d<scalar_t> g, const View2d<scalar_t> c,
                                         scalar_t* __restrict__ h_out, scalar_t* __restrict__ c_out, int64_t B,
                                         int64_t S) {
  using T = opmath_t<scalar_t>;
  const int64_t j = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (j >= S) return;
  const int64_t row_stride = static_cast<int64_t>(gridDim.y) * blockDim.y;
  for (int64_t r = static_cast<int64_t>(blockIdx.y) * blockDim.y + threadIdx.y; r < B; r += row_stride) {
    const auto o = lltm::forward<T>(static_cast<T>(g(r, j)), static_cast<T>(g(r, S + j)),
                                    static_cast<T>(g(r, 2 * S + j)), static_cast<T>(c(r, j)));
    h_out[r * S + j] = static_cast<scalar_t>(o.new_h);
    c_out[r * S + j] = static_cast<scalar_t>(o.new_cell);
  }
}

// dh / dc have a null data pointer when the gradient is absent (treated as 0).
template <typename scalar_t>
__global__ void lltm_cell_backward_kernel(const View2d<scalar_t> dh, const View2d<scalar_t> dc,
                                          const View2d<scalar_t> g, const View2d<scalar_t> nc,
                                          scalar_t* __restrict__ dg_out, scalar_t* __restrict__ dc_out, int64_t B,
                                          int64_t S) {
  using T = opmath_t<scalar_t>;
  const int64_t j = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (j >= S) return;
  const bool has_h = dh.data != nullptr;
  const bool has_c = dc.data != nullptr;
  const int64_t row_stride = static_cast<int64_t>(gridDim.y) * blockDim.y;
  for (int64_t r = static_cast<int64_t>(blockIdx.y) * blockDim.y + threadIdx.y; r < B; r += row_stride) {
    const T gh = has_h ? static_cast<T>(dh(r, j)) : T(0);
    const T gc = has_c ? static_cast<T>(dc(r, j)) : T(0);
    const auto o = lltm::backward<T>(gh, gc, static_cast<T>(g(r, j)), static_cast<T>(g(r, S + j)),
                                     static_cast<T>(g(r, 2 * S + j)), static_cast<T>(nc(r, j)));
    scalar_t* dg_row = dg_out + r * 3 * S;
    dg_row[j] = static_cast<scalar_t>(o.d_g0);
    dg_row[S + j] = static_cast<scalar_t>(o.d_g1);
    dg_row[2 * S + j] = static_cast<scalar_t>(o.d_g2);
    dc_out[r * S + j] = static_cast<scalar_t>(o.d_old_cell);
  }
}

struct Launch {
  dim3 grid;
  dim3 block;
};

// 256 threads a block: x over columns (a multiple of 32, at most 256), y over
// rows; the row grid is capped at ~16 blocks per SM (grid-stride beyond).
Launch launch_for(int64_t B, int64_t S, int32_t device) {
  constexpr int64_t kThreads = 256;
  const int64_t tx = std::min<int64_t>(kThreads, (S + 31) / 32 * 32);
  const int64_t ty = kThreads / tx;
  const int64_t gx = (S + tx - 1) / tx;
  FUSEDOPS_CHECK(gx <= INT_MAX, "lltm: state size ", S, " is too large");
  const int64_t row_blocks = (B + ty - 1) / ty;
  const int64_t cap = std::min<int64_t>(
      65535, std::max<int64_t>(1, static_cast<int64_t>(cuda::multiprocessor_count(device)) * 16 / gx));
  const int64_t gy = std::max<int64_t>(1, std::min(row_blocks, cap));
  return {dim3(static_cast<unsigned>(gx), static_cast<unsigned>(gy)),
          dim3(static_cast<unsigned>(tx), static_cast<unsigned>(ty))};
}

template <typename scalar_t>
void launch_forward(const Launch& l, cudaStream_t stream, const Tensor& gate_weights, const Tensor& old_cell,
                    Tensor& new_h, Tensor& new_cell, int64_t B, int64_t S) {
  lltm_cell_forward_kernel<scalar_t><<<l.grid, l.block, 0, stream>>>(
      view2d<scalar_t>(gate_weights), view2d<scalar_t>(old_cell), static_cast<scalar_t*>(new_h.mutable_data_ptr()),
      static_cast<scalar_t*>(new_cell.mutable_data_ptr()), B, S);
  FUSEDOPS_CUDA_CHECK(cudaGetLastError());
}

template <typename scalar_t>
void launch_backward(const Launch& l, cudaStream_t stream, const std::optional<Tensor>& grad_h,
                     const std::optional<Tensor>& grad_cell, const Tensor& gate_weights, const Tensor& new_cell,
                     Tensor& d_gates, Tensor& d_old_cell, int64_t B, int64_t S) {
  View2d<scalar_t> dh{nullptr, 0, 0};
  View2d<scalar_t> dc{nullptr, 0, 0};
  if (grad_h.has_value()) dh = view2d<scalar_t>(*grad_h);
  if (grad_cell.has_value()) dc = view2d<scalar_t>(*grad_cell);
  lltm_cell_backward_kernel<scalar_t><<<l.grid, l.block, 0, stream>>>(
      dh, dc, view2d<scalar_t>(gate_weights), view2d<scalar_t>(new_cell),
      static_cast<scalar_t*>(d_gates.mutable_data_ptr()), static_cast<scalar_t*>(d_old_cell.mutable_data_ptr()), B,
      S);
  FUSEDOPS_CUDA_CHECK(cudaGetLastError());
}

std::tuple<Tensor, Tensor> lltm_cell_cuda(Tensor gate_weights, Tensor old_cell) {
  cuda::check_cuda_tensor(gate_weights, "lltm_cell", "gate_weights");
  const auto dims = lltm::check_cell_args(gate_weights, old_cell, "lltm_cell", "old_cell");
  const int64_t B = dims[0];
  const int64_t S = dims[1];
  const int32_t device = gate_weights.get_device_index();
  cuda::DeviceGuardIfNeeded guard(device);
  Tensor new_h = lltm::empty_2d(old_cell, B, S);
  Tensor new_cell = lltm::empty_2d(old_cell, B, S);
  if (B == 0 || S == 0) return {new_h, new_cell};
  const Launch l = launch_for(B, S, device);
  cudaStream_t stream = cuda::current_stream(device);
  THO_DISPATCH_V2(
      gate_weights.scalar_type(), "lltm_cell_cuda",
      AT_WRAP([&] { launch_forward<scalar_t>(l, stream, gate_weights, old_cell, new_h, new_cell, B, S); }),
      AT_FLOATING_TYPES, ScalarType::Half, ScalarType::BFloat16);
  return {new_h, new_cell};
}

std::tuple<Tensor, Tensor> lltm_cell_backward_cuda(std::optional<Tensor> grad_h, std::optional<Tensor> grad_cell,
                                                   Tensor gate_weights, Tensor new_cell) {
  cuda::check_cuda_tensor(gate_weights, "lltm_cell_backward", "gate_weights");
  const auto dims = lltm::check_cell_args(gate_weights, new_cell, "lltm_cell_backward", "new_cell");
  const int64_t B = dims[0];
  const int64_t S = dims[1];
  lltm::check_grad(grad_h, gate_weights, "lltm_cell_backward", "grad_h", B, S);
  lltm::check_grad(grad_cell, gate_weights, "lltm_cell_backward", "grad_cell", B, S);
  const int32_t device = gate_weights.get_device_index();
  cuda::DeviceGuardIfNeeded guard(device);
  Tensor d_gates = lltm::empty_2d(gate_weights, B, 3 * S);
  Tensor d_old_cell = lltm::empty_2d(new_cell, B, S);
  if (B == 0 || S == 0) return {d_gates, d_old_cell};
  const Launch l = launch_for(B, S, device);
  cudaStream_t stream = cuda::current_stream(device);
  THO_DISPATCH_V2(
      gate_weights.scalar_type(), "lltm_cell_backward_cuda", AT_WRAP([&] {
        launch_backward<scalar_t>(l, stream, grad_h, grad_cell, gate_weights, new_cell, d_gates, d_old_cell, B, S);
      }),
      AT_FLOATING_TYPES, ScalarType::Half, ScalarType::BFloat16);
  return {d_gates, d_old_cell};
}

}  // namespace
}  // namespace fusedops

STABLE_TORCH_LIBRARY_IMPL(fusedops, CUDA, m) {
  m.impl("lltm_cell", TORCH_BOX(&fusedops::lltm_cell_cuda));
  m.impl("lltm_cell_backward", TORCH_BOX(&fusedops::lltm_cell_backward_cuda));
}
