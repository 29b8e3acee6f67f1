// LLTM cell on CUDA: one kernel for the forward pointwise work, one for the
// backward (the matrix product stays in PyTorch/cuBLAS).
#include <tuple>

#include "../lltm_impl.h"
#include "cuda_common.cuh"

namespace fusedops {
namespace {

template <typename scalar_t>
__global__ void lltm_forward_kernel(const scalar_t* __restrict__ gates, const scalar_t* __restrict__ old_cell,
                                    scalar_t* __restrict__ new_h, scalar_t* __restrict__ new_cell, int64_t batch,
                                    int64_t state) {
  using acc_t = opmath_t<scalar_t>;
  const int64_t n = batch * state;
  for (int64_t k = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; k < n;
       k += static_cast<int64_t>(blockDim.x) * gridDim.x) {
    const int64_t b = k / state, s = k - b * state;
    const scalar_t* g = gates + b * 3 * state;
    acc_t h, c;
    lltm::forward<acc_t>(acc_t(g[s]), acc_t(g[state + s]), acc_t(g[2 * state + s]), acc_t(old_cell[k]), &h, &c);
    new_h[k] = scalar_t(h);
    new_cell[k] = scalar_t(c);
  }
}

template <typename scalar_t>
__global__ void lltm_backward_kernel(const scalar_t* __restrict__ grad_h, const scalar_t* __restrict__ grad_cell,
                                     const scalar_t* __restrict__ gates, const scalar_t* __restrict__ new_cell,
                                     scalar_t* __restrict__ d_gates, scalar_t* __restrict__ d_old_cell, int64_t batch,
                                     int64_t state) {
  using acc_t = opmath_t<scalar_t>;
  const int64_t n = batch * state;
  for (int64_t k = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; k < n;
       k += static_cast<int64_t>(blockDim.x) * gridDim.x) {
    const int64_t b = k / state, s = k - b * state;
    const int64_t row = b * 3 * state;
    acc_t di, dout, dcand, dold;
    lltm::backward<acc_t>(acc_t(grad_h[k]), acc_t(grad_cell[k]), acc_t(gates[row + s]), acc_t(gates[row + state + s]),
                          acc_t(gates[row + 2 * state + s]), acc_t(new_cell[k]), &di, &dout, &dcand, &dold);
    d_gates[row + s] = scalar_t(di);
    d_gates[row + state + s] = scalar_t(dout);
    d_gates[row + 2 * state + s] = scalar_t(dcand);
    d_old_cell[k] = scalar_t(dold);
  }
}

// Launch helpers keep the <<<...>>> commas out of the dtype-dispatch macro.
template <typename scalar_t>
void launch_forward(unsigned int blocks, int threads, cudaStream_t stream, const Tensor& gates, const Tensor& cell,
                    Tensor& new_h, Tensor& new_cell, int64_t batch, int64_t state) {
  lltm_forward_kernel<scalar_t><<<blocks, threads, 0, stream>>>(
      static_cast<const scalar_t*>(gates.const_data_ptr()), static_cast<const scalar_t*>(cell.const_data_ptr()),
      static_cast<scalar_t*>(new_h.mutable_data_ptr()), static_cast<scalar_t*>(new_cell.mutable_data_ptr()), batch,
      state);
}

template <typename scalar_t>
void launch_backward(unsigned int blocks, int threads, cudaStream_t stream, const Tensor& gh, const Tensor& gc,
                     const Tensor& gates, const Tensor& cell, Tensor& d_gates, Tensor& d_old_cell, int64_t batch,
                     int64_t state) {
  lltm_backward_kernel<scalar_t><<<blocks, threads, 0, stream>>>(
      static_cast<const scalar_t*>(gh.const_data_ptr()), static_cast<const scalar_t*>(gc.const_data_ptr()),
      static_cast<const scalar_t*>(gates.const_data_ptr()), static_cast<const scalar_t*>(cell.const_data_ptr()),
      static_cast<scalar_t*>(d_gates.mutable_data_ptr()), static_cast<scalar_t*>(d_old_cell.mutable_data_ptr()), batch,
      state);
}

void check_args(const Tensor& gates, const Tensor& cell, const char* op) {
  FUSEDOPS_CHECK(gates.dim() == 2 && cell.dim() == 2, op, ": gate_weights and old_cell must be 2-D");
  FUSEDOPS_CHECK(gates.size(0) == cell.size(0) && gates.size(1) == 3 * cell.size(1), op,
                 ": gate_weights must be (batch, 3*state) for old_cell (batch, state)");
  FUSEDOPS_CHECK(gates.scalar_type() == cell.scalar_type(), op, ": gate_weights and old_cell dtypes differ");
  FUSEDOPS_CHECK(is_floating(gates.scalar_type()), op, ": tensors must be floating point");
  cuda::check_cuda_tensor(gates, op, "gate_weights");
  FUSEDOPS_CHECK(cell.is_cuda() && cell.get_device_index() == gates.get_device_index(), op,
                 ": all tensors must be on the same CUDA device");
}

constexpr int kThreads = 256;

std::tuple<Tensor, Tensor> lltm_cell_cuda(Tensor gate_weights, Tensor old_cell) {
  check_args(gate_weights, old_cell, "lltm_cell");
  const int32_t device = gate_weights.get_device_index();
  torch::stable::accelerator::DeviceGuard guard(device);
  Tensor gates = torch::stable::contiguous(gate_weights);
  Tensor cell = torch::stable::contiguous(old_cell);
  Tensor new_h = torch::stable::empty_like(cell);
  Tensor new_cell = torch::stable::empty_like(cell);
  const int64_t batch = cell.size(0), state = cell.size(1);
  if (batch * state == 0) return {new_h, new_cell};
  const unsigned int blocks = cuda::grid_for(batch * state, kThreads, device);
  cudaStream_t stream = cuda::current_stream(device);
  THO_DISPATCH_V2(
      gates.scalar_type(), "lltm_cell_cuda",
      AT_WRAP([&] { launch_forward<scalar_t>(blocks, kThreads, stream, gates, cell, new_h, new_cell, batch, state); }),
      AT_FLOATING_TYPES, ScalarType::Half, ScalarType::BFloat16);
  FUSEDOPS_CUDA_CHECK(cudaGetLastError());
  return {new_h, new_cell};
}

std::tuple<Tensor, Tensor> lltm_cell_backward_cuda(Tensor grad_h, Tensor grad_cell, Tensor gate_weights,
                                                   Tensor new_cell) {
  check_args(gate_weights, new_cell, "lltm_cell_backward");
  const int32_t device = gate_weights.get_device_index();
  torch::stable::accelerator::DeviceGuard guard(device);
  Tensor gh = torch::stable::contiguous(grad_h);
  Tensor gc = torch::stable::contiguous(grad_cell);
  Tensor gates = torch::stable::contiguous(gate_weights);
  Tensor cell = torch::stable::contiguous(new_cell);
  const int64_t batch = cell.size(0), state = cell.size(1);
  FUSEDOPS_CHECK(gh.numel() == batch * state && gc.numel() == batch * state,
                 "lltm_cell_backward: grad_h and grad_cell must be (batch, state)");
  FUSEDOPS_CHECK(gh.is_cuda() && gc.is_cuda() && gh.get_device_index() == device && gc.get_device_index() == device,
                 "lltm_cell_backward: all tensors must be on the same CUDA device");
  Tensor d_gates = torch::stable::empty_like(gates);
  Tensor d_old_cell = torch::stable::empty_like(cell);
  if (batch * state == 0) return {d_gates, d_old_cell};
  const unsigned int blocks = cuda::grid_for(batch * state, kThreads, device);
  cudaStream_t stream = cuda::current_stream(device);
  THO_DISPATCH_V2(
      gates.scalar_type(), "lltm_cell_backward_cuda", AT_WRAP([&] {
        launch_backward<scalar_t>(blocks, kThreads, stream, gh, gc, gates, cell, d_gates, d_old_cell, batch, state);
      }),
      AT_FLOATING_TYPES, ScalarType::Half, ScalarType::BFloat16);
  FUSEDOPS_CUDA_CHECK(cudaGetLastError());
  return {d_gates, d_old_cell};
}

}  // namespace
}  // namespace fusedops

STABLE_TORCH_LIBRARY_IMPL(fusedops, CUDA, m) {
  m.impl("lltm_cell", TORCH_BOX(&fusedops::lltm_cell_cuda));
  m.impl("lltm_cell_backward", TORCH_BOX(&fusedops::lltm_cell_backward_cuda));
}
