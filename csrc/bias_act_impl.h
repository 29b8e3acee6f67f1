// bias_act math shared by the CPU and CUDA kernels: bias add along one
// dimension, activation, gain, optional clamp (StyleGAN2-ADA's bias_act).
//
// The gradient kernels need only x (and b): the activation is recomputed from
// z = x + b, and the clamp mask from gain * act(z). The CPU kernels have their
// own vectorisable copy of the formulas (cpu/bias_act_kernels.h); this one is
// the CUDA kernels'.
#pragma once

#include <cmath>
#include <cstdint>
#include <type_traits>

#if defined(__CUDACC__)
#define FUSEDOPS_HD __host__ __device__ __forceinline__
#else
#define FUSEDOPS_HD inline
#endif

namespace fusedops {
namespace bias_act {

// Activation codes: keep in step with ACTIVATIONS in package/fusedops/_bias_act.py.
enum Act : int64_t {
  kLinear = 0,
  kRelu = 1,
  kLrelu = 2,
  kTanh = 3,
  kSigmoid = 4,
  kElu = 5,
  kSelu = 6,
  kSoftplus = 7,
  kSwish = 8,
  kNumActs = 9,
};

constexpr double kSeluLambda = 1.0507009873554804934193349852946;
constexpr double kSeluAlpha = 1.6732632423543772848170429916717;

// f (ORDER 0), f' (1) or f'' (2) of activation ACT at z, with exp/expm1/tanh/
// sigmoid/softplus from the math policy M (the CUDA kernels pass fast float
// intrinsics, as the original's --use_fast_math build did, and libm for double).
// NaN passes through every activation, as in torch.
template <int64_t ACT, int ORDER, typename M, typename T>
FUSEDOPS_HD T act_eval(T z, T alpha) {
  constexpr T kLambda = T(kSeluLambda);
  constexpr T kLambdaAlpha = T(kSeluLambda * kSeluAlpha);
  if constexpr (ACT == kLinear) {
    if constexpr (ORDER == 0) return z;
    return ORDER == 1 ? T(1) : T(0);
  } else if constexpr (ACT == kRelu) {
    if constexpr (ORDER == 0) return z < T(0) ? T(0) : z;
    if constexpr (ORDER == 1) return z > T(0) ? T(1) : T(0);
    return T(0);
  } else if constexpr (ACT == kLrelu) {
    if constexpr (ORDER == 0) return z > T(0) ? z : z * alpha;
    if constexpr (ORDER == 1) return z > T(0) ? T(1) : alpha;
    return T(0);
  } else if constexpr (ACT == kTanh) {
    const T t = M::tanh(z);
    if constexpr (ORDER == 0) return t;
    if constexpr (ORDER == 1) return T(1) - t * t;
    return T(-2) * t * (T(1) - t * t);
  } else if constexpr (ACT == kSigmoid) {
    const T s = M::sigmoid(z);
    if constexpr (ORDER == 0) return s;
    if constexpr (ORDER == 1) return s * (T(1) - s);
    return s * (T(1) - s) * (T(1) - T(2) * s);
  } else if constexpr (ACT == kElu) {
    if constexpr (ORDER == 0) return z > T(0) ? z : alpha * M::expm1(z);
    const T e = alpha * M::exp(z);
    if constexpr (ORDER == 1) return z > T(0) ? T(1) : e;
    return z > T(0) ? T(0) : e;
  } else if constexpr (ACT == kSelu) {
    if constexpr (ORDER == 0) return z > T(0) ? kLambda * z : kLambdaAlpha * M::expm1(z);
    const T e = kLambdaAlpha * M::exp(z);
    if constexpr (ORDER == 1) return z > T(0) ? kLambda : e;
    return z > T(0) ? T(0) : e;
  } else if constexpr (ACT == kSoftplus) {
    if constexpr (ORDER == 0) return M::softplus(z);
    const T s = M::sigmoid(z);
    if constexpr (ORDER == 1) return s;
    return s * (T(1) - s);
  } else {  // swish
    const T s = M::sigmoid(z);
    if constexpr (ORDER == 0) return z * s;
    if constexpr (ORDER == 1) return s * (T(1) + z * (T(1) - s));
    return s * (T(1) - s) * (T(2) + z * (T(1) - T(2) * s));
  }
}

// The scalars of one call in the arithmetic type; clamp is +inf without a clamp,
// so the clamp's comparisons never fire and need no branch of their own.
template <typename T>
struct Coeffs {
  T alpha, gain, clamp;
};

// Forward: y = clamp(gain * f(z)); NaN passes.
template <int64_t ACT, typename M, typename T>
FUSEDOPS_HD T forward(T z, const Coeffs<T>& k) {
  const T y = act_eval<ACT, 0, M>(z, k.alpha) * k.gain;
  return y > k.clamp ? k.clamp : (y < -k.clamp ? -k.clamp : y);
}

// Gradient of order 1 or 2 applied to dy: dy * gain * f^(ORDER)(z), zero where
// the output was clamped (like torch.clamp, the bounds themselves pass).
template <int64_t ACT, int ORDER, typename M, typename T>
FUSEDOPS_HD T grad(T dy, T z, const Coeffs<T>& k) {
  const T y = act_eval<ACT, 0, M>(z, k.alpha) * k.gain;
  const T g = dy * k.gain * act_eval<ACT, ORDER, M>(z, k.alpha);
  return (y > k.clamp || y < -k.clamp) ? T(0) : g;
}

// Calls f(std::integral_constant<int64_t, ACT>{}) for the run-time activation code.
template <typename F>
inline void with_act(int64_t act, F&& f) {
  switch (act) {
    case kLinear: return f(std::integral_constant<int64_t, kLinear>{});
    case kRelu: return f(std::integral_constant<int64_t, kRelu>{});
    case kLrelu: return f(std::integral_constant<int64_t, kLrelu>{});
    case kTanh: return f(std::integral_constant<int64_t, kTanh>{});
    case kSigmoid: return f(std::integral_constant<int64_t, kSigmoid>{});
    case kElu: return f(std::integral_constant<int64_t, kElu>{});
    case kSelu: return f(std::integral_constant<int64_t, kSelu>{});
    case kSoftplus: return f(std::integral_constant<int64_t, kSoftplus>{});
    default: return f(std::integral_constant<int64_t, kSwish>{});
  }
}

}  // namespace bias_act
}  // namespace fusedops
