// round_ste on the CPU: round half to even (like torch.round); the gradient is
// the identity (registered from Python).
#include <cmath>
#include <type_traits>

#include "../common.h"

namespace fusedops {
namespace {

// Round half to even without calling libm (std::nearbyint is a call per
// element and does not vectorise at -O3 with baseline SSE2): adding and
// subtracting 2^mantissa_bits makes the FPU round in the default
// round-to-nearest-even mode. Values that large are already integers.
template <typename T>
inline T round_half_even(T x) {
  constexpr T big = std::is_same_v<T, double> ? T(4503599627370496.0) : T(8388608.0f);
  const T ax = std::fabs(x);
  const T r = (ax + big) - big;
  return ax < big ? std::copysign(r, x) : x;
}

Tensor round_ste_cpu(Tensor x) {
  FUSEDOPS_CHECK(x.is_cpu(), "round_ste: x must be a CPU tensor for this kernel");
  FUSEDOPS_CHECK(is_floating(x.scalar_type()),
                 "round_ste: x must be a floating-point tensor, got ", dtype_name(x.scalar_type()));
  Tensor in = dense_or_contiguous(x);
  Tensor out = torch::stable::empty_like(in);
  const int64_t n = in.numel();
  if (n == 0) return out;
  THO_DISPATCH_V2(
      in.scalar_type(), "round_ste_cpu", AT_WRAP([&] {
        const auto* src = static_cast<const scalar_t*>(in.const_data_ptr());
        auto* dst = static_cast<scalar_t*>(out.mutable_data_ptr());
        torch::stable::parallel_for(0, n, 1 << 16, [&](int64_t begin, int64_t end) {
          for (int64_t i = begin; i < end; ++i) {
            dst[i] = static_cast<scalar_t>(round_half_even(static_cast<opmath_t<scalar_t>>(src[i])));
          }
        });
      }),
      AT_FLOATING_TYPES, ScalarType::Half, ScalarType::BFloat16);
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
