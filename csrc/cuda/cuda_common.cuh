// CUDA helpers: the current torch stream, error checks, a cached SM count, a
// fast divider, and a vectorised elementwise launcher that reaches the copy
// bandwidth.
#pragma once

#include <cuda_runtime.h>
#include <torch/csrc/inductor/aoti_torch/c/shim.h>
#include <torch/csrc/stable/accelerator.h>

#include <atomic>
#include <cstring>
#include <optional>
#include <string>

#include "../common.h"
#include "fast_launch.h"
#include "launch.cuh"

namespace fusedops {
namespace cuda {

#define FUSEDOPS_CUDA_CHECK(expr)                                                             \
  do {                                                                                        \
    const cudaError_t fusedops_err = (expr);                                                  \
    if (fusedops_err != cudaSuccess) {                                                        \
      throw std::runtime_error(::fusedops::detail::concat(                                    \
          "fusedops: CUDA error: ", cudaGetErrorString(fusedops_err), " (", __FILE__, ":",   \
          __LINE__, ")"));                                                                    \
    }                                                                                         \
  } while (0)

// Kernels run on torch's current stream of the input's device, so they order
// correctly with the caller's other work and can be captured in CUDA graphs.
inline cudaStream_t current_stream(int32_t device_index) {
  void* stream = nullptr;
  TORCH_ERROR_CODE_CHECK(aoti_torch_get_current_cuda_stream(device_index, &stream));
  return static_cast<cudaStream_t>(stream);
}

// Asked of the driver once per device: a launch is a few microseconds, and a
// query on every one of them showed up in small ops' host time.
inline int multiprocessor_count(int32_t device_index) {
  constexpr int kMaxDevices = 64;
  static std::atomic<int> cache[kMaxDevices];
  const bool cached = device_index >= 0 && device_index < kMaxDevices;
  if (cached) {
    const int known = cache[device_index].load(std::memory_order_relaxed);
    if (known > 0) return known;
  }
  int count = 0;
  FUSEDOPS_CUDA_CHECK(cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, device_index));
  if (cached) cache[device_index].store(count, std::memory_order_relaxed);
  return count;
}

// Threads per block and 16-byte packs per thread of the elementwise kernels: a
// thread issues both loads before its first store. Measured on an H100 against
// cudaMemcpy (2^24 and 2^26 floats): one block per tile of kThreads * kUnroll
// packs reaches the copy's bandwidth (99.7-100%); a grid-stride loop over a grid
// capped at a few blocks per SM stayed at 97-98%; more packs per thread only add
// unrolled code (the build time of every kernel instance) and no bandwidth.
constexpr int kThreads = 256;
constexpr int kUnroll = 2;

// Threads per block of the tiled elementwise kernels (round_ste, bias_act's forward and order-1 gradient): tiles
// of 128 threads x 2 packs (1024 floats), the shape of torch.compile's Triton kernels for these ops (XBLOCK 1024, 4
// warps). Measured on an H200 with a bias + lrelu kernel against cudaMemcpy (docs/fusedops.md): 256
// threads x 2 packs took 102.0% of the copy's time at 2^26 floats, 128 x 2 100.1% (98.6% at 2^24, 97.9% at 2^20);
// more packs per thread, plain or L2-hinted loads and persistent grids were no better.
constexpr int kTileThreads = 128;

// Blocks for `tiles` tiles: one each (the loops still stride, for grids over
// the hardware's limit).
inline unsigned int grid_for_tiles(int64_t tiles, int32_t /*device_index*/) {
  constexpr int64_t kMaxBlocks = (int64_t{1} << 31) - 1;
  return static_cast<unsigned int>(std::max<int64_t>(1, std::min(tiles, kMaxBlocks)));
}

// n / d and n % d for n, d < 2^31 with a divisor fixed per launch: a multiply-
// high, an add and a shift instead of a division's ~20 instructions (Granlund &
// Montgomery, "Division by invariant integers using multiplication"; torch's
// IntDivider does the same, but it is not in the stable ABI's headers).
struct FastDiv {
  uint32_t d = 1, magic = 1, shift = 0;
  FastDiv() = default;
  explicit FastDiv(uint32_t divisor) : d(divisor) {
    while ((uint32_t{1} << shift) < d) ++shift;
    const uint64_t one = 1;
    magic = static_cast<uint32_t>(((one << 32) * ((one << shift) - d)) / d + 1);
  }
  __device__ __forceinline__ uint32_t div(uint32_t n) const { return (__umulhi(n, magic) + n) >> shift; }
  __device__ __forceinline__ uint32_t mod(uint32_t n) const { return n - div(n) * d; }
};

template <typename T, int N>
struct alignas(sizeof(T) * N) Pack {
  T v[N];
};

// Loads and stores of data a kernel touches once, as 16-byte accesses with the
// cache-streaming hint (evict first: lines stay in L2 unless it is under
// pressure): at 2^24 floats and more, plain accesses left the kernels 2% under
// torch.compile's, which match a device-to-device copy.
template <typename P>
__device__ __forceinline__ P load_once(const P* base, int64_t i) {
  if constexpr (sizeof(P) == 16) {
    const int4 v = __ldcs(reinterpret_cast<const int4*>(base) + i);
    P r;
    memcpy(&r, &v, sizeof(P));
    return r;
  } else {
    return base[i];
  }
}

template <typename P>
__device__ __forceinline__ void store_once(P* base, int64_t i, const P& v) {
  if constexpr (sizeof(P) == 16) {
    int4 t;
    memcpy(&t, &v, sizeof(P));
    __stcs(reinterpret_cast<int4*>(base) + i, t);
  } else {
    base[i] = v;
  }
}

// out[i] = f(in[i]) over a flat array: tiles of kThreads * kUnroll packs of VEC
// elements (VEC = 1 when the pointers are not 16-byte aligned).
template <int VEC, typename T, typename F>
__global__ void __launch_bounds__(kTileThreads) unary_kernel(const T* __restrict__ in, T* __restrict__ out, int64_t n,
                                                             F f) {
  using P = Pack<T, VEC>;
  const int64_t packs = n / VEC;
  const int64_t tile = int64_t{kTileThreads} * kUnroll;
  for (int64_t base = static_cast<int64_t>(blockIdx.x) * tile + threadIdx.x; base < packs;
       base += static_cast<int64_t>(gridDim.x) * tile) {
    P a[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t p = base + u * kTileThreads;
      if (p < packs) a[u] = load_once(reinterpret_cast<const P*>(in), p);
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t p = base + u * kTileThreads;
      if (p < packs) {
        P r;
#pragma unroll
        for (int k = 0; k < VEC; ++k) r.v[k] = f(a[u].v[k]);
        store_once(reinterpret_cast<P*>(out), p, r);
      }
    }
  }
  const int64_t rest = n - packs * VEC;
  if (blockIdx.x == 0 && threadIdx.x < rest) {
    const int64_t i = packs * VEC + threadIdx.x;
    out[i] = f(in[i]);
  }
}

template <typename T, typename F>
void launch_unary(const T* in, T* out, int64_t n, F f, int32_t device_index) {
  if (n == 0) return;
  constexpr int kVec = 16 / sizeof(T);
  cudaStream_t stream = current_stream(device_index);
  const bool aligned = reinterpret_cast<uintptr_t>(in) % 16 == 0 && reinterpret_cast<uintptr_t>(out) % 16 == 0;
  const int vec = aligned ? kVec : 1;
  const int64_t tiles = (n / vec + int64_t{kTileThreads} * kUnroll - 1) / (int64_t{kTileThreads} * kUnroll);
  const unsigned int grid = grid_for_tiles(tiles, device_index);
  if (aligned) {
    launch<&unary_kernel<kVec, T, F>>(grid, kTileThreads, stream, device_index, in, out, n, f);
  } else {
    launch<&unary_kernel<1, T, F>>(grid, kTileThreads, stream, device_index, in, out, n, f);
  }
}

// torch's device guard, constructed only when the tensor's device is not the
// current one: the guard is a heap object made through the C shim with driver
// calls of its own, on every op call otherwise.
class DeviceGuardIfNeeded {
 public:
  explicit DeviceGuardIfNeeded(int32_t device) {
    int current = -1;
    if (cudaGetDevice(&current) != cudaSuccess || current != device) guard_.emplace(device);
  }

 private:
  std::optional<torch::stable::accelerator::DeviceGuard> guard_;
};

inline void check_cuda_tensor(const Tensor& t, const char* op, const char* arg) {
  FUSEDOPS_CHECK(t.is_cuda(), op, ": ", arg, " must be a CUDA tensor for this kernel");
}

}  // namespace cuda

namespace fast {

// Runs f with `device` current (set and restored only when it is not, as
// DeviceGuardIfNeeded) and returns an exception's message instead of throwing
// it: the fast path's entry points are called from C.
template <typename F>
Error run_on_device(int device, F&& f) noexcept {
  static thread_local std::string message;
  try {
    int current = -1;
    FUSEDOPS_CUDA_CHECK(cudaGetDevice(&current));
    if (current == device) {
      f();
    } else {
      FUSEDOPS_CUDA_CHECK(cudaSetDevice(device));
      struct Restore {
        int device;
        ~Restore() { cudaSetDevice(device); }
      } restore{current};
      f();
    }
    return nullptr;
  } catch (const std::exception& e) {
    message = e.what();
  } catch (...) {
    message = "fusedops: unknown error";
  }
  return message.c_str();
}

template <typename T>
struct Tag {
  using type = T;
};

// f(Tag<scalar_t>{}) for a dtype code of fast_launch.h.
template <typename F>
void with_dtype(int dtype, F&& f) {
  switch (dtype) {
    case kFloat: f(Tag<float>{}); break;
    case kDouble: f(Tag<double>{}); break;
    case kHalf: f(Tag<c10::Half>{}); break;
    case kBFloat16: f(Tag<c10::BFloat16>{}); break;
    default: throw std::invalid_argument(detail::concat("fusedops: unknown dtype code ", dtype));
  }
}

}  // namespace fast
}  // namespace fusedops
