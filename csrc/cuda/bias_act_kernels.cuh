// Shared by the bias_act CUDA files (bias_act.cu: forward and gradients;
// bias_act_backward.cu: the backward with the bias gradient): the math policy,
// one call's arguments, and the launcher of the elementwise kernels.
#pragma once

#include <limits>
#include <optional>
#include <type_traits>

#include "../bias_act_common.h"
#include "cuda_common.cuh"

namespace fusedops {
namespace bias_act_cuda {

using bias_act::ChannelMap;
using bias_act::Coeffs;
using cuda::kThreads;
using cuda::kTileThreads;
using cuda::kUnroll;

// Float math through the fast intrinsics (the original's --use_fast_math
// build did the same; within the tolerances the tests hold), double through libm.
template <typename T>
struct DevMath;

template <>
struct DevMath<float> {
  static __device__ __forceinline__ float exp(float x) { return __expf(x); }
  static __device__ __forceinline__ float expm1(float x) { return expm1f(x); }
  static __device__ __forceinline__ float tanh(float x) { return tanhf(x); }
  static __device__ __forceinline__ float sigmoid(float x) { return __fdividef(1.0f, 1.0f + __expf(-x)); }
  static __device__ __forceinline__ float softplus(float x) { return fmaxf(x, 0.0f) + log1pf(__expf(-fabsf(x))); }
};

template <>
struct DevMath<double> {
  static __device__ __forceinline__ double exp(double x) { return ::exp(x); }
  static __device__ __forceinline__ double expm1(double x) { return ::expm1(x); }
  static __device__ __forceinline__ double tanh(double x) { return ::tanh(x); }
  static __device__ __forceinline__ double sigmoid(double x) { return 1.0 / (1.0 + ::exp(-x)); }
  static __device__ __forceinline__ double softplus(double x) { return fmax(x, 0.0) + ::log1p(::exp(-fabs(x))); }
};

template <int64_t ACT, int ORDER, typename acc_t>
__device__ __forceinline__ acc_t apply(acc_t z, acc_t g, const Coeffs<acc_t>& k) {
  using M = DevMath<acc_t>;
  if constexpr (ORDER == 0) {
    return bias_act::forward<ACT, M>(z, k);
  } else {
    return bias_act::grad<ACT, ORDER, M>(g, z, k);
  }
}

template <typename scalar_t>
struct Call {
  const scalar_t* x;
  const scalar_t* dy;
  const scalar_t* b;
  scalar_t* out;
  int64_t n;
  ChannelMap map;
  Coeffs<opmath_t<scalar_t>> k;
  int32_t device;
  cudaStream_t stream;
};

template <typename scalar_t>
bool fast_path_ok(const Call<scalar_t>& c) {
  const auto aligned = [](const void* p) { return p == nullptr || reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  return aligned(c.x) && aligned(c.dy) && aligned(c.out) && c.n < (int64_t{1} << 31) - 1 &&
         c.map.stride * c.map.size < (int64_t{1} << 31);
}

// The op's (alpha, gain, clamp) in the kernels' math type; clamp < 0 is none.
template <typename acc_t>
Coeffs<acc_t> coeffs(double alpha, double gain, double clamp) {
  return {acc_t(alpha), acc_t(gain), clamp < 0.0 ? std::numeric_limits<acc_t>::infinity() : acc_t(clamp)};
}

template <typename scalar_t>
inline Call<scalar_t> make_call(const Tensor& in, const Tensor* g, const std::optional<Tensor>& bias, Tensor& out,
                         ChannelMap map, double alpha, double gain, double clamp, int32_t device) {
  using acc_t = opmath_t<scalar_t>;
  Call<scalar_t> c;
  c.x = static_cast<const scalar_t*>(in.const_data_ptr());
  c.dy = g ? static_cast<const scalar_t*>(g->const_data_ptr()) : nullptr;
  c.b = bias ? static_cast<const scalar_t*>(bias->const_data_ptr()) : nullptr;
  c.out = static_cast<scalar_t*>(out.mutable_data_ptr());
  c.n = in.numel();
  c.map = map;
  c.k = coeffs<acc_t>(alpha, gain, clamp);
  c.device = device;
  c.stream = cuda::current_stream(device);
  return c;
}

// The fast kernels exist for float, half and bfloat16 (double on a GPU is for
// checking, not speed) and orders 0 and 1 (order 2 is the double backward).
template <typename scalar_t>
constexpr bool kHasFastKernels = !std::is_same_v<scalar_t, double>;

// dx, y or the second-order gradient with the fast or the generic kernel
// (bias_act.cu, instantiated there for every dtype).
template <typename scalar_t>
void launch_order(int order, int64_t act, const Call<scalar_t>& c);

inline void check_device(const Tensor& x, const std::optional<Tensor>& b, const char* op) {
  cuda::check_cuda_tensor(x, op, "x");
  if (b.has_value()) {
    FUSEDOPS_CHECK(b->is_cuda() && b->get_device_index() == x.get_device_index(), op,
                   ": b must be on the device of x");
  }
}

inline void check_dy(const Tensor& dy, const Tensor& x, const char* op) {
  FUSEDOPS_CHECK(dy.is_cuda() && dy.get_device_index() == x.get_device_index(), op, ": dy must be on the device of x");
  FUSEDOPS_CHECK(dy.scalar_type() == x.scalar_type(), op, ": dy must have the dtype of x");
  FUSEDOPS_CHECK(dy.dim() == x.dim(), op, ": dy must have the shape of x");
  for (int64_t d = 0; d < x.dim(); ++d) FUSEDOPS_CHECK(dy.size(d) == x.size(d), op, ": dy must have the shape of x");
}

}  // namespace bias_act_cuda
}  // namespace fusedops
