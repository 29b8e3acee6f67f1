// bias_act on CUDA: the forward and the gradients of order 1 and 2.
//
// Fast path (16-byte aligned tensors under 2^31 elements, i.e. nearly every
// call): kernels specialised on the activation and the derivative order, one
// block per tile of 16-byte packs with all of a thread's loads in flight before
// its math, the bias index found once per pack with a fast divider (a
// per-element integer division made the old kernel bound by its instructions,
// at 45-70% of the copy bandwidth), and float math through the fast intrinsics.
// Everything else (unaligned views, 2^31 elements and more, double, order 2)
// takes the generic kernel: one element at a time, 64-bit indices.
#include "bias_act_kernels.cuh"

namespace fusedops {
namespace bias_act_cuda {

using cuda::FastDiv;

// Where the bias of a pack comes from.
enum BiasKind : int { kNoBias, kPackChannel, kRowChannels, kElementChannel };

struct BiasIndex {
  int kind;
  FastDiv stride;  // elements per channel step
  FastDiv size;    // channels
};

// The bias of the VEC elements from `first` (a multiple of VEC).
template <int VEC, typename scalar_t, typename acc_t>
__device__ __forceinline__ void pack_bias(const scalar_t* __restrict__ b, const BiasIndex& bi, uint32_t first,
                                          acc_t (&out)[VEC]) {
  if (bi.kind == kNoBias) {
#pragma unroll
    for (int j = 0; j < VEC; ++j) out[j] = acc_t(0);
  } else if (bi.kind == kPackChannel) {  // the channel stride is a multiple of VEC
    const acc_t v = acc_t(b[bi.size.mod(bi.stride.div(first))]);
#pragma unroll
    for (int j = 0; j < VEC; ++j) out[j] = v;
  } else if (bi.kind == kRowChannels) {  // stride 1, channels a multiple of VEC: consecutive
    const uint32_t c0 = bi.size.mod(first);
#pragma unroll
    for (int j = 0; j < VEC; ++j) out[j] = acc_t(b[c0 + j]);
  } else {
#pragma unroll
    for (int j = 0; j < VEC; ++j) out[j] = acc_t(b[bi.size.mod(bi.stride.div(first + j))]);
  }
}

template <int64_t ACT, int ORDER, typename scalar_t>
__global__ void __launch_bounds__(kTileThreads)
    bias_act_fast(const scalar_t* __restrict__ x, const scalar_t* __restrict__ dy, const scalar_t* __restrict__ b,
                  scalar_t* __restrict__ out, uint32_t n, BiasIndex bi, Coeffs<opmath_t<scalar_t>> k) {
  using acc_t = opmath_t<scalar_t>;
  constexpr int VEC = 16 / sizeof(scalar_t);
  using P = cuda::Pack<scalar_t, VEC>;
  const uint32_t packs = n / VEC;
  const uint32_t base = blockIdx.x * (kTileThreads * kUnroll) + threadIdx.x;
  P xv[kUnroll], gv[kUnroll];
#pragma unroll
  for (int u = 0; u < kUnroll; ++u) {
    const uint32_t p = base + u * kTileThreads;
    if (p < packs) {
      xv[u] = cuda::load_once(reinterpret_cast<const P*>(x), p);
      if constexpr (ORDER != 0) gv[u] = cuda::load_once(reinterpret_cast<const P*>(dy), p);
    }
  }
#pragma unroll
  for (int u = 0; u < kUnroll; ++u) {
    const uint32_t p = base + u * kTileThreads;
    if (p < packs) {
      acc_t bv[VEC];
      pack_bias<VEC>(b, bi, p * VEC, bv);
      P r;
#pragma unroll
      for (int j = 0; j < VEC; ++j) {
        const acc_t g = ORDER != 0 ? acc_t(gv[u].v[j]) : acc_t(0);
        r.v[j] = scalar_t(apply<ACT, ORDER>(acc_t(xv[u].v[j]) + bv[j], g, k));
      }
      cuda::store_once(reinterpret_cast<P*>(out), p, r);
    }
  }
  const uint32_t rest = n - packs * VEC;
  if (blockIdx.x == gridDim.x - 1 && threadIdx.x < rest) {
    const uint32_t i = packs * VEC + threadIdx.x;
    acc_t bv[1];
    BiasIndex one = bi;
    if (one.kind != kNoBias) one.kind = kElementChannel;
    pack_bias<1>(b, one, i, bv);
    const acc_t g = ORDER != 0 ? acc_t(dy[i]) : acc_t(0);
    out[i] = scalar_t(apply<ACT, ORDER>(acc_t(x[i]) + bv[0], g, k));
  }
}

// Any layout, size and dtype: an element at a time, 64-bit indices, the
// activation chosen per element (one kernel per order and dtype, not per
// activation: this path is rare, and its code would otherwise double the build).
template <int ORDER, typename scalar_t>
__global__ void __launch_bounds__(kThreads)
    bias_act_generic(const scalar_t* __restrict__ x, const scalar_t* __restrict__ dy, const scalar_t* __restrict__ b,
                     scalar_t* __restrict__ out, int64_t n, int64_t ch_stride, int64_t ch_size, int64_t act,
                     Coeffs<opmath_t<scalar_t>> k) {
  using acc_t = opmath_t<scalar_t>;
  const int64_t step = static_cast<int64_t>(blockDim.x) * gridDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += step) {
    const acc_t z = acc_t(x[i]) + (b != nullptr ? acc_t(b[(i / ch_stride) % ch_size]) : acc_t(0));
    const acc_t g = ORDER != 0 ? acc_t(dy[i]) : acc_t(0);
    acc_t r;
    switch (act) {
      case bias_act::kLinear: r = apply<bias_act::kLinear, ORDER>(z, g, k); break;
      case bias_act::kRelu: r = apply<bias_act::kRelu, ORDER>(z, g, k); break;
      case bias_act::kLrelu: r = apply<bias_act::kLrelu, ORDER>(z, g, k); break;
      case bias_act::kTanh: r = apply<bias_act::kTanh, ORDER>(z, g, k); break;
      case bias_act::kSigmoid: r = apply<bias_act::kSigmoid, ORDER>(z, g, k); break;
      case bias_act::kElu: r = apply<bias_act::kElu, ORDER>(z, g, k); break;
      case bias_act::kSelu: r = apply<bias_act::kSelu, ORDER>(z, g, k); break;
      case bias_act::kSoftplus: r = apply<bias_act::kSoftplus, ORDER>(z, g, k); break;
      default: r = apply<bias_act::kSwish, ORDER>(z, g, k); break;
    }
    out[i] = scalar_t(r);
  }
}

template <int ORDER, typename scalar_t>
void launch_generic(int64_t act, const Call<scalar_t>& c) {
  const auto grid = cuda::grid_for_tiles((c.n + kThreads - 1) / kThreads, c.device);
  bias_act_generic<ORDER><<<grid, kThreads, 0, c.stream>>>(c.x, c.dy, c.b, c.out, c.n, c.map.stride, c.map.size,
                                                            act, c.k);
  FUSEDOPS_CUDA_CHECK(cudaGetLastError());
}

template <int64_t ACT, int ORDER, typename scalar_t>
void launch_fast(const Call<scalar_t>& c) {
  constexpr int kVec = 16 / sizeof(scalar_t);
  BiasIndex bi{kNoBias, FastDiv(static_cast<uint32_t>(c.map.stride)), FastDiv(static_cast<uint32_t>(c.map.size))};
  if (c.b != nullptr) {
    bi.kind = c.map.stride % kVec == 0                        ? kPackChannel
              : (c.map.stride == 1 && c.map.size % kVec == 0) ? kRowChannels
                                                              : kElementChannel;
  }
  const int64_t tiles = (c.n / kVec + kTileThreads * kUnroll - 1) / (kTileThreads * kUnroll);
  const auto grid = static_cast<unsigned int>(std::max<int64_t>(1, tiles));
  cuda::launch<&bias_act_fast<ACT, ORDER, scalar_t>>(grid, kTileThreads, c.stream, c.device, c.x, c.dy, c.b, c.out,
                                                     static_cast<uint32_t>(c.n), bi, c.k);
}

template <typename scalar_t>
void launch_order(int order, int64_t act, const Call<scalar_t>& c) {
  if constexpr (kHasFastKernels<scalar_t>) {
    if (order < 2 && fast_path_ok(c)) {
      bias_act::with_act(act, [&](auto a) {
        constexpr int64_t ACT = decltype(a)::value;
        if (order == 0) launch_fast<ACT, 0>(c);
        if (order == 1) launch_fast<ACT, 1>(c);
      });
      return;
    }
  }
  if (order == 0) launch_generic<0>(act, c);
  if (order == 1) launch_generic<1>(act, c);
  if (order == 2) launch_generic<2>(act, c);
}

#define FUSEDOPS_INSTANTIATE(T) template void launch_order<T>(int, int64_t, const Call<T>&);
FUSEDOPS_INSTANTIATE(float)
FUSEDOPS_INSTANTIATE(double)
FUSEDOPS_INSTANTIATE(c10::Half)
FUSEDOPS_INSTANTIATE(c10::BFloat16)
#undef FUSEDOPS_INSTANTIATE

namespace {

Tensor run(int order, const Tensor* dy, const Tensor& x, const std::optional<Tensor>& b, int64_t dim, int64_t act,
           double alpha, double gain, double clamp) {
  const int32_t device = x.get_device_index();
  cuda::DeviceGuardIfNeeded guard(device);
  Tensor in = dense_or_contiguous(x);
  std::optional<Tensor> g;
  if (dy != nullptr) g = bias_act::like_layout(*dy, in);
  Tensor out = empty_like_dense(in);
  if (in.numel() == 0) return out;
  const ChannelMap map = bias_act::channel_map(in, b, dim);
  std::optional<Tensor> bias = b.has_value() ? std::optional<Tensor>(contiguous_if_needed(*b)) : std::nullopt;
  const Tensor* gp = g.has_value() ? &*g : nullptr;
  THO_DISPATCH_V2(
      in.scalar_type(), "bias_act_cuda", AT_WRAP([&] {
        launch_order<scalar_t>(order, act, make_call<scalar_t>(in, gp, bias, out, map, alpha, gain, clamp, device));
      }),
      AT_FLOATING_TYPES, ScalarType::Half, ScalarType::BFloat16);
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
  check_dy(dy, x, "bias_act_grad");
  return run(static_cast<int>(order), &dy, x, b, dim, act, alpha, gain, clamp);
}

}  // namespace
}  // namespace bias_act_cuda

fast::Error fast::bias_act(const void* x, const void* b, void* out, int64_t n, int64_t ch_stride, int64_t ch_size,
                           int dtype, int64_t act, double alpha, double gain, double clamp, int device) noexcept {
  return run_on_device(device, [&] {
    FUSEDOPS_CHECK(act >= 0 && act < bias_act::kNumActs, "bias_act: unknown activation code ", act);
    if (n == 0) return;
    FUSEDOPS_CHECK(ch_size >= 1, "bias_act: bad channel count ", ch_size);
    with_dtype(dtype, [&](auto tag) {
      using scalar_t = typename decltype(tag)::type;
      bias_act_cuda::Call<scalar_t> c;
      c.x = static_cast<const scalar_t*>(x);
      c.dy = nullptr;
      c.b = static_cast<const scalar_t*>(b);
      c.out = static_cast<scalar_t*>(out);
      c.n = n;
      c.map = {std::max<int64_t>(ch_stride, 1), ch_size};
      c.k = bias_act_cuda::coeffs<opmath_t<scalar_t>>(alpha, gain, clamp);
      c.device = device;
      c.stream = cuda::current_stream(device);
      bias_act_cuda::launch_order<scalar_t>(0, act, c);
    });
  });
}

}  // namespace fusedops

STABLE_TORCH_LIBRARY_IMPL(fusedops, CUDA, m) {
  m.impl("bias_act", TORCH_BOX(&fusedops::bias_act_cuda::bias_act_cuda));
  m.impl("bias_act_grad", TORCH_BOX(&fusedops::bias_act_cuda::bias_act_grad_cuda));
}
