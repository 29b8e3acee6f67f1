// LLTM cell on the CPU: one fused pass for the forward pointwise work and one
// for the backward; the matrix product stays in PyTorch (Python side).
#include <tuple>

#include "../common.h"
#include "../lltm_impl.h"

namespace fusedops {
namespace {

void check_cell_args(const Tensor& gates, const Tensor& cell, const char* op) {
  FUSEDOPS_CHECK(gates.dim() == 2, op, ": gate_weights must be 2-D (batch, 3*state), got ", gates.dim(), "-D");
  FUSEDOPS_CHECK(cell.dim() == 2, op, ": old_cell must be 2-D (batch, state), got ", cell.dim(), "-D");
  FUSEDOPS_CHECK(gates.size(0) == cell.size(0) && gates.size(1) == 3 * cell.size(1), op,
                 ": gate_weights must be (batch, 3*state) for old_cell (batch, state)");
  FUSEDOPS_CHECK(gates.scalar_type() == cell.scalar_type(), op, ": gate_weights and old_cell dtypes differ");
  FUSEDOPS_CHECK(is_floating(gates.scalar_type()), op, ": tensors must be floating point, got ",
                 dtype_name(gates.scalar_type()));
}

std::tuple<Tensor, Tensor> lltm_cell_cpu(Tensor gate_weights, Tensor old_cell) {
  check_cell_args(gate_weights, old_cell, "lltm_cell");
  FUSEDOPS_CHECK(gate_weights.is_cpu() && old_cell.is_cpu(), "lltm_cell: tensors must be on the CPU");
  Tensor gates = torch::stable::contiguous(gate_weights);
  Tensor cell = torch::stable::contiguous(old_cell);
  Tensor new_h = torch::stable::empty_like(cell);
  Tensor new_cell = torch::stable::empty_like(cell);
  const int64_t batch = cell.size(0), state = cell.size(1);
  if (batch * state == 0) return {new_h, new_cell};
  THO_DISPATCH_V2(
      gates.scalar_type(), "lltm_cell_cpu", AT_WRAP([&] {
        using acc_t = opmath_t<scalar_t>;
        const auto* g = static_cast<const scalar_t*>(gates.const_data_ptr());
        const auto* c = static_cast<const scalar_t*>(cell.const_data_ptr());
        auto* h_out = static_cast<scalar_t*>(new_h.mutable_data_ptr());
        auto* c_out = static_cast<scalar_t*>(new_cell.mutable_data_ptr());
        torch::stable::parallel_for(0, batch, std::max<int64_t>(1, 32768 / state), [&](int64_t b0, int64_t b1) {
          for (int64_t b = b0; b < b1; ++b) {
            const scalar_t* gr = g + b * 3 * state;
            for (int64_t s = 0; s < state; ++s) {
              acc_t h, nc;
              lltm::forward<acc_t>(acc_t(gr[s]), acc_t(gr[state + s]), acc_t(gr[2 * state + s]),
                                   acc_t(c[b * state + s]), &h, &nc);
              h_out[b * state + s] = scalar_t(h);
              c_out[b * state + s] = scalar_t(nc);
            }
          }
        });
      }),
      AT_FLOATING_TYPES, ScalarType::Half, ScalarType::BFloat16);
  return {new_h, new_cell};
}

std::tuple<Tensor, Tensor> lltm_cell_backward_cpu(Tensor grad_h, Tensor grad_cell, Tensor gate_weights,
                                                  Tensor new_cell) {
  check_cell_args(gate_weights, new_cell, "lltm_cell_backward");
  Tensor gh = torch::stable::contiguous(grad_h);
  Tensor gc = torch::stable::contiguous(grad_cell);
  Tensor gates = torch::stable::contiguous(gate_weights);
  Tensor cell = torch::stable::contiguous(new_cell);
  Tensor d_gates = torch::stable::empty_like(gates);
  Tensor d_old_cell = torch::stable::empty_like(cell);
  const int64_t batch = cell.size(0), state = cell.size(1);
  FUSEDOPS_CHECK(gh.numel() == batch * state && gc.numel() == batch * state,
                 "lltm_cell_backward: grad_h and grad_cell must be (batch, state)");
  if (batch * state == 0) return {d_gates, d_old_cell};
  THO_DISPATCH_V2(
      gates.scalar_type(), "lltm_cell_backward_cpu", AT_WRAP([&] {
        using acc_t = opmath_t<scalar_t>;
        const auto* g = static_cast<const scalar_t*>(gates.const_data_ptr());
        const auto* nc = static_cast<const scalar_t*>(cell.const_data_ptr());
        const auto* dh = static_cast<const scalar_t*>(gh.const_data_ptr());
        const auto* dc = static_cast<const scalar_t*>(gc.const_data_ptr());
        auto* dg = static_cast<scalar_t*>(d_gates.mutable_data_ptr());
        auto* doc = static_cast<scalar_t*>(d_old_cell.mutable_data_ptr());
        torch::stable::parallel_for(0, batch, std::max<int64_t>(1, 32768 / state), [&](int64_t b0, int64_t b1) {
          for (int64_t b = b0; b < b1; ++b) {
            const int64_t gr = b * 3 * state;
            for (int64_t s = 0; s < state; ++s) {
              const int64_t k = b * state + s;
              acc_t di, dout, dcand, dold;
              lltm::backward<acc_t>(acc_t(dh[k]), acc_t(dc[k]), acc_t(g[gr + s]), acc_t(g[gr + state + s]),
                                    acc_t(g[gr + 2 * state + s]), acc_t(nc[k]), &di, &dout, &dcand, &dold);
              dg[gr + s] = scalar_t(di);
              dg[gr + state + s] = scalar_t(dout);
              dg[gr + 2 * state + s] = scalar_t(dcand);
              doc[k] = scalar_t(dold);
            }
          }
        });
      }),
      AT_FLOATING_TYPES, ScalarType::Half, ScalarType::BFloat16);
  return {d_gates, d_old_cell};
}

}  // namespace
}  // namespace fusedops

STABLE_TORCH_LIBRARY_FRAGMENT(fusedops, m) {
  m.def("lltm_cell(Tensor gate_weights, Tensor old_cell) -> (Tensor new_h, Tensor new_cell)");
  m.def(
      "lltm_cell_backward(Tensor grad_h, Tensor grad_cell, Tensor gate_weights, Tensor new_cell) "
      "-> (Tensor d_gate_weights, Tensor d_old_cell)");
}

STABLE_TORCH_LIBRARY_IMPL(fusedops, CPU, m) {
  m.impl("lltm_cell", TORCH_BOX(&fusedops::lltm_cell_cpu));
  m.impl("lltm_cell_backward", TORCH_BOX(&fusedops::lltm_cell_backward_cpu));
}
