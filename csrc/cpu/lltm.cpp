// LLTM cell on the CPU: the fused pointwise forward and backward of the LLTM
// (the matrix product stays in PyTorch, see package/fusedops/_lltm.py). The
// math lives in ../lltm_impl.h, shared with the CUDA kernels. Inputs are read
// through their strides (no copies); outputs are contiguous.
#include "../lltm_impl.h"

namespace fusedops {
namespace {

using lltm::View2d;

template <typename T>
View2d<T> view2d(const Tensor& t) {
  return {static_cast<const T*>(t.const_data_ptr()), t.strides()[0], t.strides()[1]};
}

// Rows per parallel_for task: about 2k elements (~100 us of scalar exp/tanh).
inline int64_t row_grain(int64_t S) { return std::max<int64_t>(1, (int64_t{1} << 11) / std::max<int64_t>(S, 1)); }

template <typename scalar_t>
void forward_impl(const Tensor& gate_weights, const Tensor& old_cell, Tensor& new_h, Tensor& new_cell, int64_t B,
                  int64_t S) {
  using T = opmath_t<scalar_t>;
  const auto g = view2d<scalar_t>(gate_weights);
  const auto c = view2d<scalar_t>(old_cell);
  auto* h_out = static_cast<scalar_t*>(new_h.mutable_data_ptr());
  auto* c_out = static_cast<scalar_t*>(new_cell.mutable_data_ptr());
  torch::stable::parallel_for(0, B, row_grain(S), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      for (int64_t j = 0; j < S; ++j) {
        const auto o = lltm::forward<T>(static_cast<T>(g(r, j)), static_cast<T>(g(r, S + j)),
                                        static_cast<T>(g(r, 2 * S + j)), static_cast<T>(c(r, j)));
        h_out[r * S + j] = static_cast<scalar_t>(o.new_h);
        c_out[r * S + j] = static_cast<scalar_t>(o.new_cell);
      }
    }
  });
}

template <typename scalar_t>
void backward_impl(const std::optional<Tensor>& grad_h, const std::optional<Tensor>& grad_cell,
                   const Tensor& gate_weights, const Tensor& new_cell, Tensor& d_gates, Tensor& d_old_cell, int64_t B,
                   int64_t S) {
  using T = opmath_t<scalar_t>;
  const auto g = view2d<scalar_t>(gate_weights);
  const auto nc = view2d<scalar_t>(new_cell);
  const bool has_h = grad_h.has_value();
  const bool has_c = grad_cell.has_value();
  View2d<scalar_t> dh{nullptr, 0, 0};
  View2d<scalar_t> dc{nullptr, 0, 0};
  if (has_h) dh = view2d<scalar_t>(*grad_h);
  if (has_c) dc = view2d<scalar_t>(*grad_cell);
  auto* dg_out = static_cast<scalar_t*>(d_gates.mutable_data_ptr());
  auto* dc_out = static_cast<scalar_t*>(d_old_cell.mutable_data_ptr());
  torch::stable::parallel_for(0, B, row_grain(S), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      scalar_t* dg_row = dg_out + r * 3 * S;
      for (int64_t j = 0; j < S; ++j) {
        const T gh = has_h ? static_cast<T>(dh(r, j)) : T(0);
        const T gc = has_c ? static_cast<T>(dc(r, j)) : T(0);
        const auto o = lltm::backward<T>(gh, gc, static_cast<T>(g(r, j)), static_cast<T>(g(r, S + j)),
                                         static_cast<T>(g(r, 2 * S + j)), static_cast<T>(nc(r, j)));
        dg_row[j] = static_cast<scalar_t>(o.d_g0);
        dg_row[S + j] = static_cast<scalar_t>(o.d_g1);
        dg_row[2 * S + j] = static_cast<scalar_t>(o.d_g2);
        dc_out[r * S + j] = static_cast<scalar_t>(o.d_old_cell);
      }
    }
  });
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
