// bias_act math shared by the CPU and CUDA kernels: bias add along one
// dimension, activation, gain, optional clamp (StyleGAN2-ADA's bias_act).
//
// The gradient kernels need only x (and b): the activation is recomputed from
// z = x + b, and the clamp mask from gain * act(z).
#pragma once

#include <cmath>
#include <cstdint>

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

template <typename T>
FUSEDOPS_HD T sigmoid(T z) {
  return T(1) / (T(1) + exp(-z));
}

// f(z), f'(z) or f''(z) for order 0, 1, 2.
template <typename T>
FUSEDOPS_HD T activation(int64_t act, int order, T z, T alpha) {
  switch (act) {
    case kLinear:
      return order == 0 ? z : (order == 1 ? T(1) : T(0));
    case kRelu:
      return order == 0 ? (z > T(0) ? z : T(0)) : (order == 1 ? (z > T(0) ? T(1) : T(0)) : T(0));
    case kLrelu:
      return order == 0 ? (z > T(0) ? z : alpha * z) : (order == 1 ? (z > T(0) ? T(1) : alpha) : T(0));
    case kTanh: {
      const T t = tanh(z);
      return order == 0 ? t : (order == 1 ? T(1) - t * t : T(-2) * t * (T(1) - t * t));
    }
    case kSigmoid: {
      const T s = sigmoid(z);
      return order == 0 ? s : (order == 1 ? s * (T(1) - s) : s * (T(1) - s) * (T(1) - T(2) * s));
    }
    case kElu: {
      if (z > T(0)) return order == 0 ? z : (order == 1 ? T(1) : T(0));
      const T e = exp(z);
      return order == 0 ? alpha * (e - T(1)) : alpha * e;
    }
    case kSelu: {
      const T l = T(kSeluLambda), a = T(kSeluAlpha);
      if (z > T(0)) return order == 0 ? l * z : (order == 1 ? l : T(0));
      const T e = exp(z);
      return order == 0 ? l * a * (e - T(1)) : l * a * e;
    }
    case kSoftplus: {
      if (order == 0) return z > T(20) ? z : log1p(exp(z));
      const T s = sigmoid(z);
      return order == 1 ? s : s * (T(1) - s);
    }
    case kSwish: {
      const T s = sigmoid(z);
      if (order == 0) return z * s;
      if (order == 1) return s * (T(1) + z * (T(1) - s));
      return s * (T(1) - s) * (T(2) + z * (T(1) - T(2) * s));
    }
    default:
      return T(0);
  }
}

struct Params {
  int64_t act;
  double alpha;
  double gain;
  double clamp;  // < 0: no clamp
};

// Forward: y = clamp(gain * f(z)).
template <typename T>
FUSEDOPS_HD T forward(T z, const Params& p) {
  T y = activation<T>(p.act, 0, z, T(p.alpha)) * T(p.gain);
  if (p.clamp >= 0.0) {
    const T c = T(p.clamp);
    y = y > c ? c : (y < -c ? -c : y);
  }
  return y;
}

// Gradient of order 1 or 2 applied to dy: dy * gain * f^(order)(z), zero where
// the output was clamped (like torch.clamp, the bounds themselves pass).
template <typename T>
FUSEDOPS_HD T grad(T dy, T z, const Params& p, int order) {
  if (p.clamp >= 0.0) {
    const T pre = activation<T>(p.act, 0, z, T(p.alpha)) * T(p.gain);
    const T c = T(p.clamp);
    if (pre > c || pre < -c) return T(0);
  }
  return dy * T(p.gain) * activation<T>(p.act, order, z, T(p.alpha));
}

}  // namespace bias_act
}  // namespace fusedops
