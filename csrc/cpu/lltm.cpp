// LLTM cell on the CPU: the fused pointwise forward and backward of the LLTM
// (the matrix product stays in PyTorch, see package/fusedops/_lltm.py). The
// kernels are in lltm_kernels.h (baseline here, AVX2 in avx2.cpp); argument
// checks and allocation are shared with CUDA (../lltm_impl.h). Inputs are read
// through their strides (no copies of whole tensors); outputs are contiguous.
#include "../lltm_impl.h"
#include "lltm_kernels.h"

namespace fusedops {
namespace {

template <typename T>
cpu::Strided2d<T> view2d(const Tensor& t) {
  return {static_cast<const T*>(t.const_data_ptr()), t.strides()[0], t.strides()[1]};
}

template <typename scalar_t>
void forward_impl(const Tensor& gate_weights, const Tensor& old_cell, Tensor& new_h, Tensor& new_cell, int64_t B,
                  int64_t S) {
  cpu::LltmForwardJob<scalar_t> j{view2d<scalar_t>(gate_weights), view2d<scalar_t>(old_cell),
                                  static_cast<scalar_t*>(new_h.mutable_data_ptr()),
                                  static_cast<scalar_t*>(new_cell.mutable_data_ptr()), B, S};
#if FUSEDOPS_HAVE_AVX2_KERNELS
  if (cpu::use_avx512()) return cpu::lltm_forward_run_avx512(j);
  if (cpu::use_avx2()) return cpu::lltm_forward_run_avx2(j);
#endif
  cpu::base::lltm_forward_run(j);
}

template <typename scalar_t>
void backward_impl(const std::optional<Tensor>& grad_h, const std::optional<Tensor>& grad_cell,
                   const Tensor& gate_weights, const Tensor& new_cell, Tensor& d_gates, Tensor& d_old_cell, int64_t B,
                   int64_t S) {
  const cpu::Strided2d<scalar_t> none{nullptr, 0, 0};
  cpu::LltmBackwardJob<scalar_t> j{grad_h ? view2d<scalar_t>(*grad_h) : none,
                                   grad_cell ? view2d<scalar_t>(*grad_cell) : none,
                                   view2d<scalar_t>(gate_weights),
                                   view2d<scalar_t>(new_cell),
                                   static_cast<scalar_t*>(d_gates.mutable_data_ptr()),
                                   static_cast<scalar_t*>(d_old_cell.mutable_data_ptr()),
                                   B,
                                   S};
#if FUSEDOPS_HAVE_AVX2_KERNELS
  if (cpu::use_avx512()) return cpu::lltm_backward_run_avx512(j);
  if (cpu::use_avx2()) return cpu::lltm_backward_run_avx2(j);
#endif
  cpu::base::lltm_backward_run(j);
}

std::tuple<Tensor, Tensor> lltm_cell_cpu(Tensor gate_weights, Tensor old_cell) {
  const auto dims = lltm::check_cell_args(gate_weights, old_cell, "lltm_cell", "old_cell");
  const int64_t B = dims[0];
  const int64_t S = dims[1];
  FUSEDOPS_CHECK(gate_weights.is_cpu(), "lltm_cell: gate_weights must be a CPU tensor for this kernel");
  Tensor new_h = lltm::empty_2d(old_cell, B, S);
  Tensor new_cell = lltm::empty_2d(old_cell, B, S);
  if (B == 0 || S == 0) return {new_h, new_cell};
  THO_DISPATCH_V2(
      gate_weights.scalar_type(), "lltm_cell_cpu",
      AT_WRAP([&] { forward_impl<scalar_t>(gate_weights, old_cell, new_h, new_cell, B, S); }), AT_FLOATING_TYPES,
      ScalarType::Half, ScalarType::BFloat16);
  return {new_h, new_cell};
}

std::tuple<Tensor, Tensor> lltm_cell_backward_cpu(std::optional<Tensor> grad_h, std::optional<Tensor> grad_cell,
                                                  Tensor gate_weights, Tensor new_cell) {
  const auto dims = lltm::check_cell_args(gate_weights, new_cell, "lltm_cell_backward", "new_cell");
  const int64_t B = dims[0];
  const int64_t S = dims[1];
  lltm::check_grad(grad_h, gate_weights, "lltm_cell_backward", "grad_h", B, S);
  lltm::check_grad(grad_cell, gate_weights, "lltm_cell_backward", "grad_cell", B, S);
  FUSEDOPS_CHECK(gate_weights.is_cpu(), "lltm_cell_backward: gate_weights must be a CPU tensor for this kernel");
  Tensor d_gates = lltm::empty_2d(gate_weights, B, 3 * S);
  Tensor d_old_cell = lltm::empty_2d(new_cell, B, S);
  if (B == 0 || S == 0) return {d_gates, d_old_cell};
  THO_DISPATCH_V2(
      gate_weights.scalar_type(), "lltm_cell_backward_cpu", AT_WRAP([&] {
        backward_impl<scalar_t>(grad_h, grad_cell, gate_weights, new_cell, d_gates, d_old_cell, B, S);
      }),
      AT_FLOATING_TYPES, ScalarType::Half, ScalarType::BFloat16);
  return {d_gates, d_old_cell};
}

}  // namespace
}  // namespace fusedops

STABLE_TORCH_LIBRARY_FRAGMENT(fusedops, m) {
  m.def("lltm_cell(Tensor gate_weights, Tensor old_cell) -> (Tensor new_h, Tensor new_cell)");
  m.def(
      "lltm_cell_backward(Tensor? grad_h, Tensor? grad_cell, Tensor gate_weights, Tensor new_cell) "
      "-> (Tensor d_gate_weights, Tensor d_old_cell)");
}

STABLE_TORCH_LIBRARY_IMPL(fusedops, CPU, m) {
  m.impl("lltm_cell", TORCH_BOX(&fusedops::lltm_cell_cpu));
  m.impl("lltm_cell_backward", TORCH_BOX(&fusedops::lltm_cell_backward_cpu));
}
