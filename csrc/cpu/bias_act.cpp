// bias_act on the CPU: fused bias + activation + gain + clamp, and its first-
// and second-order gradient kernels.
#include <optional>
#include <type_traits>

#include "../bias_act_common.h"

namespace fusedops {
namespace {

using bias_act::ChannelMap;
using bias_act::Params;

// The activation becomes a compile-time constant so the per-element switch
// folds away, and the channel index is advanced incrementally instead of a
// 64-bit division per element; both made the CPU path several times slower.
template <typename F>
void with_act(int64_t act, F&& f) {
  switch (act) {
    case 0: f(std::integral_constant<int64_t, 0>{}); break;
    case 1: f(std::integral_constant<int64_t, 1>{}); break;
    case 2: f(std::integral_constant<int64_t, 2>{}); break;
    case 3: f(std::integral_constant<int64_t, 3>{}); break;
    case 4: f(std::integral_constant<int64_t, 4>{}); break;
    case 5: f(std::integral_constant<int64_t, 5>{}); break;
    case 6: f(std::integral_constant<int64_t, 6>{}); break;
    case 7: f(std::integral_constant<int64_t, 7>{}); break;
    default: f(std::integral_constant<int64_t, 8>{}); break;
  }
}

// Runs body(i, channel) over [begin, end) for a dense tensor whose bias index
// is (i / stride) % size.
template <typename B>
inline void for_each_channel(int64_t begin, int64_t end, const ChannelMap& map, B&& body) {
  int64_t r = begin % map.stride;
  int64_t c = (begin / map.stride) % map.size;
  for (int64_t i = begin; i < end; ++i) {
    body(i, c);
    if (++r == map.stride) {
      r = 0;
      if (++c == map.size) c = 0;
    }
  }
}

Tensor bias_act_cpu(Tensor x, std::optional<Tensor> b, int64_t dim, int64_t act, double alpha, double gain,
                    double clamp) {
  bias_act::check_args(x, b, dim, act, clamp, "bias_act");
  FUSEDOPS_CHECK(x.is_cpu(), "bias_act: x must be a CPU tensor for this kernel");
  Tensor in = dense_or_contiguous(x);
  Tensor out = torch::stable::empty_like(in);
  const int64_t n = in.numel();
  if (n == 0) return out;
  const ChannelMap map = bias_act::channel_map(in, b, dim);
  const Params p{act, alpha, gain, clamp};
  std::optional<Tensor> bias = b.has_value() ? std::optional<Tensor>(torch::stable::contiguous(*b)) : std::nullopt;
  THO_DISPATCH_V2(
      in.scalar_type(), "bias_act_cpu", AT_WRAP([&] {
        using acc_t = opmath_t<scalar_t>;
        const auto* src = static_cast<const scalar_t*>(in.const_data_ptr());
        const auto* bp = bias ? static_cast<const scalar_t*>(bias->const_data_ptr()) : nullptr;
        auto* dst = static_cast<scalar_t*>(out.mutable_data_ptr());
        with_act(p.act, [&](auto act_c) {
          torch::stable::parallel_for(0, n, 1 << 14, [&](int64_t begin, int64_t end) {
            for_each_channel(begin, end, map, [&](int64_t i, int64_t c) {
              // A local Params with a constant act: the switch folds once inlined.
              const Params pc{decltype(act_c)::value, p.alpha, p.gain, p.clamp};
              const acc_t z = acc_t(src[i]) + (bp ? acc_t(bp[c]) : acc_t(0));
              dst[i] = scalar_t(bias_act::forward<acc_t>(z, pc));
            });
          });
        });
      }),
      AT_FLOATING_TYPES, ScalarType::Half, ScalarType::BFloat16);
  return out;
}

Tensor bias_act_grad_cpu(Tensor dy, Tensor x, std::optional<Tensor> b, int64_t dim, int64_t act, double alpha,
                         double gain, double clamp, int64_t order) {
  bias_act::check_args(x, b, dim, act, clamp, "bias_act_grad");
  FUSEDOPS_CHECK(order == 1 || order == 2, "bias_act_grad: order must be 1 or 2, got ", order);
  FUSEDOPS_CHECK(x.is_cpu() && dy.is_cpu(), "bias_act_grad: tensors must be on the CPU for this kernel");
  FUSEDOPS_CHECK(dy.scalar_type() == x.scalar_type(), "bias_act_grad: dy must have the dtype of x");
  Tensor in = dense_or_contiguous(x);
  Tensor g = bias_act::like_layout(dy, in);
  Tensor out = torch::stable::empty_like(in);
  const int64_t n = in.numel();
  if (n == 0) return out;
  const ChannelMap map = bias_act::channel_map(in, b, dim);
  const Params p{act, alpha, gain, clamp};
  const int ord = static_cast<int>(order);
  std::optional<Tensor> bias = b.has_value() ? std::optional<Tensor>(torch::stable::contiguous(*b)) : std::nullopt;
  THO_DISPATCH_V2(
      in.scalar_type(), "bias_act_grad_cpu", AT_WRAP([&] {
        using acc_t = opmath_t<scalar_t>;
        const auto* xs = static_cast<const scalar_t*>(in.const_data_ptr());
        const auto* gs = static_cast<const scalar_t*>(g.const_data_ptr());
        const auto* bp = bias ? static_cast<const scalar_t*>(bias->const_data_ptr()) : nullptr;
        auto* dst = static_cast<scalar_t*>(out.mutable_data_ptr());
        with_act(p.act, [&](auto act_c) {
          torch::stable::parallel_for(0, n, 1 << 14, [&](int64_t begin, int64_t end) {
            for_each_channel(begin, end, map, [&](int64_t i, int64_t c) {
              const Params pc{decltype(act_c)::value, p.alpha, p.gain, p.clamp};
              const acc_t z = acc_t(xs[i]) + (bp ? acc_t(bp[c]) : acc_t(0));
              dst[i] = scalar_t(bias_act::grad<acc_t>(acc_t(gs[i]), z, pc, ord));
            });
          });
        });
      }),
      AT_FLOATING_TYPES, ScalarType::Half, ScalarType::BFloat16);
  return out;
}

}  // namespace
}  // namespace fusedops

STABLE_TORCH_LIBRARY_FRAGMENT(fusedops, m) {
  m.def("bias_act(Tensor x, Tensor? b, int dim, int act, float alpha, float gain, float clamp) -> Tensor");
  m.def(
      "bias_act_grad(Tensor dy, Tensor x, Tensor? b, int dim, int act, float alpha, float gain, float clamp, "
      "int order) -> Tensor");
}

STABLE_TORCH_LIBRARY_IMPL(fusedops, CPU, m) {
  m.impl("bias_act", TORCH_BOX(&fusedops::bias_act_cpu));
  m.impl("bias_act_grad", TORCH_BOX(&fusedops::bias_act_grad_cpu));
}
