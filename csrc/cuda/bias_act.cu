// bias_act on CUDA: one memory-bound pass per call, 16-byte loads/stores when
// aligned, 32-bit index arithmetic when the tensor allows it (64-bit otherwise).
#include <optional>

#include "../bias_act_common.h"
#include "cuda_common.cuh"

namespace fusedops {
namespace {

using bias_act::ChannelMap;
using bias_act::Params;

// mode 0: forward (y from x); mode 1/2: gradient of that order (dx from dy, x).
template <int VEC, int MODE, typename index_t, typename scalar_t>
__global__ void bias_act_kernel(const scalar_t* __restrict__ x, const scalar_t* __restrict__ dy,
                                const scalar_t* __restrict__ b, scalar_t* __restrict__ out, index_t n,
                                index_t ch_stride, index_t ch_size, Params p) {
  using acc_t = opmath_t<scalar_t>;
  const index_t step = static_cast<index_t>(blockDim.x) * gridDim.x;
  const index_t packs = n / VEC;
  auto element = [&](index_t i, scalar_t xv, scalar_t gv) -> scalar_t {
    acc_t z = acc_t(xv);
    if (b != nullptr) z += acc_t(b[(i / ch_stride) % ch_size]);
    if constexpr (MODE == 0) {
      return scalar_t(bias_act::forward<acc_t>(z, p));
    } else {
      return scalar_t(bias_act::grad<acc_t>(acc_t(gv), z, p, MODE));
    }
  };
  for (index_t k = static_cast<index_t>(blockIdx.x) * blockDim.x + threadIdx.x; k < packs; k += step) {
    const auto xp = reinterpret_cast<const cuda::Pack<scalar_t, VEC>*>(x)[k];
    cuda::Pack<scalar_t, VEC> gp;
    if constexpr (MODE != 0) gp = reinterpret_cast<const cuda::Pack<scalar_t, VEC>*>(dy)[k];
    cuda::Pack<scalar_t, VEC> r;
#pragma unroll
    for (int j = 0; j < VEC; ++j) {
      r.v[j] = element(k * VEC + j, xp.v[j], MODE != 0 ? gp.v[j] : scalar_t(0));
    }
    reinterpret_cast<cuda::Pack<scalar_t, VEC>*>(out)[k] = r;
  }
  for (index_t i = packs * VEC + static_cast<index_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += step) {
    out[i] = element(i, x[i], MODE != 0 ? dy[i] : scalar_t(0));
  }
}

template <int MODE, typename scalar_t>
void launch(const scalar_t* x, const scalar_t* dy, const scalar_t* b, scalar_t* out, int64_t n, ChannelMap map,
            const Params& p, int32_t device) {
  constexpr int kThreads = 256;
  constexpr int kVec = 16 / sizeof(scalar_t);
  cudaStream_t stream = cuda::current_stream(device);
  const bool aligned = reinterpret_cast<uintptr_t>(x) % 16 == 0 && reinterpret_cast<uintptr_t>(out) % 16 == 0 &&
                       (dy == nullptr || reinterpret_cast<uintptr_t>(dy) % 16 == 0);
  const bool small = n < (int64_t(1) << 31) - 1;
  if (aligned && small) {
    bias_act_kernel<kVec, MODE, uint32_t><<<cuda::grid_for((n + kVec - 1) / kVec, kThreads, device), kThreads, 0,
                                            stream>>>(x, dy, b, out, static_cast<uint32_t>(n),
                                                      static_cast<uint32_t>(map.stride),
                                                      static_cast<uint32_t>(map.size), p);
  } else if (small) {
    bias_act_kernel<1, MODE, uint32_t><<<cuda::grid_for(n, kThreads, device), kThreads, 0, stream>>>(
        x, dy, b, out, static_cast<uint32_t>(n), static_cast<uint32_t>(map.stride), static_cast<uint32_t>(map.size),
        p);
  } else if (aligned) {
    bias_act_kernel<kVec, MODE, int64_t><<<cuda::grid_for((n + kVec - 1) / kVec, kThreads, device), kThreads, 0,
                                           stream>>>(x, dy, b, out, n, map.stride, map.size, p);
  } else {
    bias_act_kernel<1, MODE, int64_t><<<cuda::grid_for(n, kThreads, device), kThreads, 0, stream>>>(
        x, dy, b, out, n, map.stride, map.size, p);
  }
  FUSEDOPS_CUDA_CHECK(cudaGetLastError());
}

template <typename scalar_t>
void launch_mode(int mode, const Tensor& in, const Tensor* g, const std::optional<Tensor>& bias, Tensor& out,
                 ChannelMap map, const Params& p, int32_t device) {
  const auto* x = static_cast<const scalar_t*>(in.const_data_ptr());
  const auto* dy = g ? static_cast<const scalar_t*>(g->const_data_ptr()) : nullptr;
  const auto* b = bias ? static_cast<const scalar_t*>(bias->const_data_ptr()) : nullptr;
  auto* o = static_cast<scalar_t*>(out.mutable_data_ptr());
  const int64_t n = in.numel();
  if (mode == 0) launch<0>(x, dy, b, o, n, map, p, device);
  if (mode == 1) launch<1>(x, dy, b, o, n, map, p, device);
  if (mode == 2) launch<2>(x, dy, b, o, n, map, p, device);
}

void check_device(const Tensor& x, const std::optional<Tensor>& b, const char* op) {
  cuda::check_cuda_tensor(x, op, "x");
  if (b.has_value()) {
    FUSEDOPS_CHECK(b->is_cuda() && b->get_device_index() == x.get_device_index(), op,
                   ": b must be on the device of x");
  }
}

Tensor run(int mode, const Tensor* dy, const Tensor& x, const std::optional<Tensor>& b, int64_t dim, int64_t act,
           double alpha, double gain, double clamp) {
  const int32_t device = x.get_device_index();
  torch::stable::accelerator::DeviceGuard guard(device);
  Tensor in = dense_or_contiguous(x);
  std::optional<Tensor> g;
  if (dy != nullptr) g = bias_act::like_layout(*dy, in);
  Tensor out = torch::stable::empty_like(in);
  if (in.numel() == 0) return out;
  const ChannelMap map = bias_act::channel_map(in, b, dim);
  const Params p{act, alpha, gain, clamp};
  std::optional<Tensor> bias = b.has_value() ? std::optional<Tensor>(torch::stable::contiguous(*b)) : std::nullopt;
  const Tensor* gp = g.has_value() ? &*g : nullptr;
  THO_DISPATCH_V2(
      in.scalar_type(), "bias_act_cuda",
      AT_WRAP([&] { launch_mode<scalar_t>(mode, in, gp, bias, out, map, p, device); }), AT_FLOATING_TYPES,
      ScalarType::Half, ScalarType::BFloat16);
  return out;
}

Tensor bias_act_cuda(Tensor x, std::optional<Tensor> b, int64_t dim, int64_t act, double alpha, double gain,
                     double clamp) {
  bias_act::check_args(x, b, dim, act, clamp, "bias_act");
  check_device(x, b, "bias_act");
  return run(0, nullptr, x, b, dim, act, alpha, gain, clamp);
}

Tensor bias_act_grad_cuda(Tensor dy, Tensor x, std::optional<Tensor> b, int64_t dim, int64_t act, double alpha,
                          double gain, double clamp, int64_t order) {
  bias_act::check_args(x, b, dim, act, clamp, "bias_act_grad");
  check_device(x, b, "bias_act_grad");
  FUSEDOPS_CHECK(order == 1 || order == 2, "bias_act_grad: order must be 1 or 2, got ", order);
  FUSEDOPS_CHECK(dy.is_cuda() && dy.get_device_index() == x.get_device_index(),
                 "bias_act_grad: dy must be on the device of x");
  FUSEDOPS_CHECK(dy.scalar_type() == x.scalar_type(), "bias_act_grad: dy must have the dtype of x");
  return run(static_cast<int>(order), &dy, x, b, dim, act, alpha, gain, clamp);
}

}  // namespace
}  // namespace fusedops

STABLE_TORCH_LIBRARY_IMPL(fusedops, CUDA, m) {
  m.impl("bias_act", TORCH_BOX(&fusedops::bias_act_cuda));
  m.impl("bias_act_grad", TORCH_BOX(&fusedops::bias_act_grad_cuda));
}
