// bias_act on the CPU: fused bias + activation + gain + clamp, and its first-
// and second-order gradient kernels. The kernels are in bias_act_kernels.h
// (baseline here, AVX2 in avx2.cpp); this file checks arguments, allocates
// and dispatches.
#include <optional>
#include <tuple>
#include <vector>

#include "bias_act_kernels.h"

namespace fusedops {
namespace {

using bias_act::ChannelMap;

template <typename scalar_t>
void run_typed(int order, int64_t act, const Tensor& in, const Tensor* g, const std::optional<Tensor>& bias,
               Tensor& out, ChannelMap map, double alpha, double gain, double clamp) {
  using acc_t = opmath_t<scalar_t>;
  cpu::BiasActJob<scalar_t> j;
  j.x = static_cast<const scalar_t*>(in.const_data_ptr());
  j.dy = g ? static_cast<const scalar_t*>(g->const_data_ptr()) : nullptr;
  j.b = bias ? static_cast<const scalar_t*>(bias->const_data_ptr()) : nullptr;
  j.out = static_cast<scalar_t*>(out.mutable_data_ptr());
  j.n = in.numel();
  j.map = map;
  j.alpha = static_cast<acc_t>(alpha);
  j.gain = static_cast<acc_t>(gain);
  j.clamp = clamp < 0.0 ? std::numeric_limits<acc_t>::infinity() : static_cast<acc_t>(clamp);
#if FUSEDOPS_HAVE_AVX2_KERNELS
  if (cpu::use_avx512()) return cpu::bias_act_run_avx512(j, order, act);
  if (cpu::use_avx2()) return cpu::bias_act_run_avx2(j, order, act);
#endif
  cpu::base::bias_act_run(j, order, act);
}

Tensor run(int order, const Tensor* dy, const Tensor& x, const std::optional<Tensor>& b, int64_t dim, int64_t act,
           double alpha, double gain, double clamp) {
  Tensor in = dense_or_contiguous(x);
  std::optional<Tensor> g;
  if (dy != nullptr) g = bias_act::like_layout(*dy, in);
  Tensor out = empty_like_dense(in);
  if (in.numel() == 0) return out;
  const ChannelMap map = bias_act::channel_map(in, b, dim);
  std::optional<Tensor> bias = b.has_value() ? std::optional<Tensor>(contiguous_if_needed(*b)) : std::nullopt;
  THO_DISPATCH_V2(
      in.scalar_type(), "bias_act_cpu",
      AT_WRAP([&] { run_typed<scalar_t>(order, act, in, g ? &*g : nullptr, bias, out, map, alpha, gain, clamp); }),
      AT_FLOATING_TYPES, ScalarType::Half, ScalarType::BFloat16);
  return out;
}

Tensor bias_act_cpu(Tensor x, std::optional<Tensor> b, int64_t dim, int64_t act, double alpha, double gain,
                    double clamp) {
  bias_act::check_args(x, b, dim, act, clamp, "bias_act");
  FUSEDOPS_CHECK(x.is_cpu(), "bias_act: x must be a CPU tensor for this kernel");
  return run(0, nullptr, x, b, dim, act, alpha, gain, clamp);
}

Tensor bias_act_grad_cpu(Tensor dy, Tensor x, std::optional<Tensor> b, int64_t dim, int64_t act, double alpha,
                         double gain, double clamp, int64_t order) {
  bias_act::check_args(x, b, dim, act, clamp, "bias_act_grad");
  FUSEDOPS_CHECK(order == 1 || order == 2, "bias_act_grad: order must be 1 or 2, got ", order);
  FUSEDOPS_CHECK(x.is_cpu() && dy.is_cpu(), "bias_act_grad: tensors must be on the CPU for this kernel");
  FUSEDOPS_CHECK(dy.scalar_type() == x.scalar_type(), "bias_act_grad: dy must have the dtype of x");
  FUSEDOPS_CHECK(dy.dim() == x.dim(), "bias_act_grad: dy must have the shape of x");
  for (int64_t d = 0; d < x.dim(); ++d) {
    FUSEDOPS_CHECK(dy.size(d) == x.size(d), "bias_act_grad: dy must have the shape of x");
  }
  return run(static_cast<int>(order), &dy, x, b, dim, act, alpha, gain, clamp);
}

// The backward of bias_act in one call: dx, and db reduced from it.
std::tuple<Tensor, Tensor> bias_act_grad_db_cpu(Tensor dy, Tensor x, Tensor b, int64_t dim, int64_t act,
                                                double alpha, double gain, double clamp) {
  Tensor dx = bias_act_grad_cpu(dy, x, std::optional<Tensor>(b), dim, act, alpha, gain, clamp, 1);
  std::vector<int64_t> dims;
  for (int64_t d = 0; d < x.dim(); ++d) {
    if (d != dim) dims.push_back(d);
  }
  return std::make_tuple(dx, torch::stable::sum(dx, torch::headeronly::IntHeaderOnlyArrayRef(dims)));
}

}  // namespace
}  // namespace fusedops

STABLE_TORCH_LIBRARY_FRAGMENT(fusedops, m) {
  m.def("bias_act(Tensor x, Tensor? b, int dim, int act, float alpha, float gain, float clamp) -> Tensor");
  m.def(
      "bias_act_grad(Tensor dy, Tensor x, Tensor? b, int dim, int act, float alpha, float gain, float clamp, "
      "int order) -> Tensor");
  m.def(
      "bias_act_grad_db(Tensor dy, Tensor x, Tensor b, int dim, int act, float alpha, float gain, float clamp) "
      "-> (Tensor, Tensor)");
}

STABLE_TORCH_LIBRARY_IMPL(fusedops, CPU, m) {
  m.impl("bias_act", TORCH_BOX(&fusedops::bias_act_cpu));
  m.impl("bias_act_grad", TORCH_BOX(&fusedops::bias_act_grad_cpu));
  m.impl("bias_act_grad_db", TORCH_BOX(&fusedops::bias_act_grad_db_cpu));
}
