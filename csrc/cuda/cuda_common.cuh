// CUDA helpers: the current torch stream, error checks, device guard and a
// vectorised, 64-bit-indexed elementwise launcher.
#pragma once

#include <cuda_runtime.h>
#include <torch/csrc/inductor/aoti_torch/c/shim.h>
#include <torch/csrc/stable/accelerator.h>

#include "../common.h"

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

inline int multiprocessor_count(int32_t device_index) {
  int count = 0;
  FUSEDOPS_CUDA_CHECK(cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, device_index));
  return count;
}

// Grid for a grid-stride loop over `work` items: enough blocks to fill the GPU
// a few times over, never more than the work needs.
inline unsigned int grid_for(int64_t work, int threads, int32_t device_index) {
  const int64_t needed = (work + threads - 1) / threads;
  const int64_t cap = static_cast<int64_t>(multiprocessor_count(device_index)) * 16;
  return static_cast<unsigned int>(std::max<int64_t>(1, std::min(needed, cap)));
}

template <typename T, int N>
struct alignas(sizeof(T) * N) Pack {
  T v[N];
};

// out[i] = f(in[i]) over a flat array, 16-byte loads and stores when aligned.
template <int VEC, typename T, typename F>
__global__ void unary_kernel(const T* __restrict__ in, T* __restrict__ out, int64_t n, F f) {
  const int64_t stride = static_cast<int64_t>(blockDim.x) * gridDim.x;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t packs = n / VEC;
  const auto* in_p = reinterpret_cast<const Pack<T, VEC>*>(in);
  auto* out_p = reinterpret_cast<Pack<T, VEC>*>(out);
  for (int64_t i = first; i < packs; i += stride) {
    const Pack<T, VEC> a = in_p[i];
    Pack<T, VEC> r;
#pragma unroll
    for (int k = 0; k < VEC; ++k) r.v[k] = f(a.v[k]);
    out_p[i] = r;
  }
  for (int64_t i = packs * VEC + first; i < n; i += stride) out[i] = f(in[i]);
}

template <typename T, typename F>
void launch_unary(const T* in, T* out, int64_t n, F f, int32_t device_index) {
  if (n == 0) return;
  constexpr int kThreads = 256;
  constexpr int kVec = 16 / sizeof(T);
  cudaStream_t stream = current_stream(device_index);
  const bool aligned = reinterpret_cast<uintptr_t>(in) % 16 == 0 && reinterpret_cast<uintptr_t>(out) % 16 == 0;
  if (aligned) {
    unary_kernel<kVec><<<grid_for((n + kVec - 1) / kVec, kThreads, device_index), kThreads, 0, stream>>>(in, out, n, f);
  } else {
    unary_kernel<1><<<grid_for(n, kThreads, device_index), kThreads, 0, stream>>>(in, out, n, f);
  }
  FUSEDOPS_CUDA_CHECK(cudaGetLastError());
}

inline void check_cuda_tensor(const Tensor& t, const char* op, const char* arg) {
  FUSEDOPS_CHECK(t.is_cuda(), op, ": ", arg, " must be a CUDA tensor for this kernel");
}

}  // namespace cuda
}  // namespace fusedops
