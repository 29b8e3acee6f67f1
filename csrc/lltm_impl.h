// LLTM cell: the pointwise math shared by the CPU and CUDA kernels.
//
// The matrix product (gate_weights = addmm(bias, cat([old_h, input], 1), W^T))
// stays in PyTorch; the kernels take gate_weights (B, 3*S), whose three column
// blocks are the pre-activations of the input gate, the output gate and the
// candidate cell:
//
//   input_gate  = sigmoid(g0)      output_gate = sigmoid(g1)
//   candidate   = elu(g2)          (alpha = 1)
//   new_cell    = old_cell + candidate * input_gate
//   new_h       = tanh(new_cell) * output_gate
//
// The backward recomputes the activations from gate_weights and new_cell, so
// the forward saves nothing beyond its inputs and outputs.
//
// Every tensor is addressed as a strided 2-D view (row, column) with 64-bit
// offsets, so non-contiguous inputs need no copy; outputs are contiguous.
#pragma once

#include <array>
#include <cmath>
#include <cstdint>
#include <optional>

#include <torch/csrc/inductor/aoti_torch/c/shim.h>

#include "common.h"

#if defined(__CUDACC__) || defined(__HIPCC__)
#define FUSEDOPS_HD __host__ __device__ __forceinline__
#else
#define FUSEDOPS_HD inline
#endif

namespace fusedops {
namespace lltm {

FUSEDOPS_HD float exp_(float x) { return expf(x); }
FUSEDOPS_HD double exp_(double x) { return exp(x); }
FUSEDOPS_HD float expm1_(float x) { return expm1f(x); }
FUSEDOPS_HD double expm1_(double x) { return expm1(x); }
FUSEDOPS_HD float tanh_(float x) { return tanhf(x); }
FUSEDOPS_HD double tanh_(double x) { return tanh(x); }

template <typename T>
FUSEDOPS_HD T sigmoid(T x) {
  return T(1) / (T(1) + exp_(-x));
}

// elu with alpha = 1 (expm1 keeps small negative inputs accurate).
template <typename T>
FUSEDOPS_HD T elu(T x) {
  return x > T(0) ? x : expm1_(x);
}

// A read-only strided 2-D view: element (r, c) at data[r * s0 + c * s1].
template <typename T>
struct View2d {
  const T* data;
  int64_t s0;
  int64_t s1;
  FUSEDOPS_HD T operator()(int64_t r, int64_t c) const { return data[r * s0 + c * s1]; }
};

template <typename T>
struct ForwardOut {
  T new_h;
  T new_cell;
};

// Forward pointwise step in the arithmetic type T (float for half/bf16).
template <typename T>
FUSEDOPS_HD ForwardOut<T> forward(T g0, T g1, T g2, T old_cell) {
  const T input_gate = sigmoid(g0);
  const T output_gate = sigmoid(g1);
  const T candidate = elu(g2);
  const T new_cell = old_cell + candidate * input_gate;
  return {tanh_(new_cell) * output_gate, new_cell};
}

template <typename T>
struct BackwardOut {
  T d_g0;
  T d_g1;
  T d_g2;
  T d_old_cell;
};

// Backward pointwise step: grad_h / grad_cell are the incoming gradients of
// new_h / new_cell (0 where absent); new_cell is the forward's output.
template <typename T>
FUSEDOPS_HD BackwardOut<T> backward(T grad_h, T grad_cell, T g0, T g1, T g2, T new_cell) {
  const T input_gate = sigmoid(g0);
  const T output_gate = sigmoid(g1);
  const T t = tanh_(new_cell);
  const T d_new_cell = grad_h * output_gate * (T(1) - t * t) + grad_cell;
  const T d_output_gate = grad_h * t;
  const T d_input_gate = d_new_cell * elu(g2);
  const T d_candidate = d_new_cell * input_gate;
  BackwardOut<T> out;
  out.d_g0 = d_input_gate * input_gate * (T(1) - input_gate);
  out.d_g1 = d_output_gate * output_gate * (T(1) - output_gate);
  out.d_g2 = g2 > T(0) ? d_candidate : d_candidate * exp_(g2);
  out.d_old_cell = d_new_cell;
  return out;
}

// ---- host-side helpers -----------------------------------------------------

// A contiguous (rows, cols) tensor with the dtype and device of `like`, straight
// from the C shim's empty_strided (no boxed dispatcher round trip: these ops are
// launch-bound at small batches).
inline Tensor empty_2d(const Tensor& like, int64_t rows, int64_t cols) {
  int32_t dtype = 0;
  int32_t device_type = 0;
  TORCH_ERROR_CODE_CHECK(aoti_torch_get_dtype(like.get(), &dtype));
  TORCH_ERROR_CODE_CHECK(aoti_torch_get_device_type(like.get(), &device_type));
  const int64_t sizes[2] = {rows, cols};
  const int64_t strides[2] = {cols, 1};
  AtenTensorHandle out = nullptr;
  TORCH_ERROR_CODE_CHECK(
      aoti_torch_empty_strided(2, sizes, strides, dtype, device_type, like.get_device_index(), &out));
  return Tensor(out);
}

// ---- host-side argument checks (the last line of defence for direct
// torch.ops calls; the Python wrapper validates first) ----------------------

inline bool same_device(const Tensor& a, const Tensor& b) {
  return a.is_cuda() == b.is_cuda() && a.is_cpu() == b.is_cpu() &&
         a.get_device_index() == b.get_device_index();
}

inline void check_2d(const Tensor& t, const char* op, const char* name, const Tensor& like) {
  FUSEDOPS_CHECK(t.dim() == 2, op, ": ", name, " must be 2-D, got ", t.dim(), "-D");
  FUSEDOPS_CHECK(is_floating(t.scalar_type()), op, ": ", name, " must be a floating-point tensor, got ",
                 dtype_name(t.scalar_type()));
  FUSEDOPS_CHECK(t.scalar_type() == like.scalar_type(), op, ": ", name, " must have the dtype of gate_weights (",
                 dtype_name(like.scalar_type()), "), got ", dtype_name(t.scalar_type()));
  FUSEDOPS_CHECK(same_device(t, like), op, ": ", name, " must be on the device of gate_weights");
}

// gate_weights (B, 3*S) and a (B, S) state tensor; returns {B, S}.
inline std::array<int64_t, 2> check_cell_args(const Tensor& gate_weights, const Tensor& cell, const char* op,
                                              const char* cell_name) {
  check_2d(gate_weights, op, "gate_weights", gate_weights);
  check_2d(cell, op, cell_name, gate_weights);
  const int64_t B = cell.sizes()[0];
  const int64_t S = cell.sizes()[1];
  FUSEDOPS_CHECK(gate_weights.sizes()[0] == B && gate_weights.sizes()[1] == 3 * S, op,
                 ": gate_weights must have shape (B, 3*S) = (", B, ", ", 3 * S, ") for ", cell_name,
                 " of shape (", B, ", ", S, "), got (", gate_weights.sizes()[0], ", ", gate_weights.sizes()[1],
                 ")");
  return {B, S};
}

inline void check_grad(const std::optional<Tensor>& grad, const Tensor& gate_weights, const char* op,
                       const char* name, int64_t B, int64_t S) {
  if (!grad.has_value()) return;
  check_2d(*grad, op, name, gate_weights);
  FUSEDOPS_CHECK(grad->sizes()[0] == B && grad->sizes()[1] == S, op, ": ", name, " must have shape (", B, ", ",
                 S, "), got (", grad->sizes()[0], ", ", grad->sizes()[1], ")");
}

}  // namespace lltm
}  // namespace fusedops
