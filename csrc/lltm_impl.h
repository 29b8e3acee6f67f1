// LLTM pointwise math shared by the CPU and CUDA kernels (seed 002: fusing this
// work into one kernel each way is where the speed-up comes from).
//
// gates = [g_in | g_out | g_cand] (B x 3S, pre-activation), per element (b, s):
//   i = sigmoid(g_in), o = sigmoid(g_out), c = elu(g_cand)
//   new_cell = old_cell + c * i, new_h = tanh(new_cell) * o
#pragma once

#include <cmath>
#include <cstdint>

#if defined(__CUDACC__)
#define FUSEDOPS_HD __host__ __device__ __forceinline__
#else
#define FUSEDOPS_HD inline
#endif

namespace fusedops {
namespace lltm {

template <typename T>
FUSEDOPS_HD T sigmoid(T x) {
  return T(1) / (T(1) + exp(-x));
}

template <typename T>
FUSEDOPS_HD T elu(T x) {
  return x > T(0) ? x : exp(x) - T(1);
}

template <typename T>
FUSEDOPS_HD T d_elu(T x) {
  return x > T(0) ? T(1) : exp(x);
}

// One element of the forward pass. acc_t is the arithmetic type.
template <typename acc_t>
FUSEDOPS_HD void forward(acc_t g_in, acc_t g_out, acc_t g_cand, acc_t old_cell, acc_t* new_h, acc_t* new_cell) {
  const acc_t i = sigmoid(g_in);
  const acc_t o = sigmoid(g_out);
  const acc_t c = elu(g_cand);
  const acc_t cell = old_cell + c * i;
  *new_cell = cell;
  *new_h = tanh(cell) * o;
}

// One element of the backward pass: recomputes the activations from the saved
// pre-activation gates and the new cell (cheaper than saving four more tensors).
template <typename acc_t>
FUSEDOPS_HD void backward(acc_t grad_h, acc_t grad_cell, acc_t g_in, acc_t g_out, acc_t g_cand, acc_t new_cell,
                          acc_t* d_in, acc_t* d_out, acc_t* d_cand, acc_t* d_old_cell) {
  const acc_t i = sigmoid(g_in);
  const acc_t o = sigmoid(g_out);
  const acc_t c = elu(g_cand);
  const acc_t t = tanh(new_cell);
  const acc_t d_cell = grad_cell + grad_h * o * (acc_t(1) - t * t);
  *d_old_cell = d_cell;
  *d_out = grad_h * t * o * (acc_t(1) - o);
  *d_in = d_cell * c * i * (acc_t(1) - i);
  *d_cand = d_cell * i * d_elu(g_cand);
}

}  // namespace lltm
}  // namespace fusedops
