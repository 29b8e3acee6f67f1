// round_ste on the CPU: round half to even (like torch.round); the gradient is
// the identity (registered from Python). Kernel in round_ste_kernels.h.
#include "round_ste_kernels.h"

namespace fusedops {
namespace {

template <typename scalar_t>
void run_typed(const Tensor& in, Tensor& out) {
  const auto* src = static_cast<const scalar_t*>(in.const_data_ptr());
  auto* dst = static_cast<scalar_t*>(out.mutable_data_ptr());
#if FUSEDOPS_HAVE_AVX2_KERNELS
  if (cpu::use_avx512()) return cpu::round_ste_run_avx512(src, dst, in.numel());
  if (cpu::use_avx2()) return cpu::round_ste_run_avx2(src, dst, in.numel());
#endif
  cpu::base::round_ste_run(src, dst, in.numel());
}

Tensor round_ste_cpu(Tensor x) {
  FUSEDOPS_CHECK(x.is_cpu(), "round_ste: x must be a CPU tensor for this kernel");
  FUSEDOPS_CHECK(is_floating(x.scalar_type()),
                 "round_ste: x must be a floating-point tensor, got ", dtype_name(x.scalar_type()));
  Tensor in = dense_or_contiguous(x);
  Tensor out = empty_like_dense(in);
  if (in.numel() == 0) return out;
  THO_DISPATCH_V2(
      in.scalar_type(), "round_ste_cpu", AT_WRAP([&] { run_typed<scalar_t>(in, out); }), AT_FLOATING_TYPES,
      ScalarType::Half, ScalarType::BFloat16);
  return out;
}

}  // namespace
}  // namespace fusedops

STABLE_TORCH_LIBRARY_FRAGMENT(fusedops, m) {
  m.def("round_ste(Tensor x) -> Tensor");
}

STABLE_TORCH_LIBRARY_IMPL(fusedops, CPU, m) {
  m.impl("round_ste", TORCH_BOX(&fusedops::round_ste_cpu));
}
