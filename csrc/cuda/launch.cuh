// Kernel launches through the driver's cuLaunchKernel, with each kernel's
// function handle found once per device.
//
// Why: at 2^20 elements an elementwise call is bound by the host, and the
// runtime's launch (<<<>>> is cudaLaunchKernel) finds the kernel's function on
// every call. Measured on the H100 machine's host (a Python loop of single
// launches of a 2^20-float kernel): 6.04 us a call through cuLaunchKernel,
// 6.47-6.52 through <<<>>>. cuLaunchKernel is reached through the runtime's
// entry-point query, so the library does not link libcuda (the wheel still
// imports where no driver is installed); where the query fails, the runtime's
// cudaLaunchKernel launches the same parameters.
#pragma once

#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <tuple>
#include <type_traits>
#include <utility>

#include "../common.h"

namespace fusedops {
namespace cuda {
namespace launch_detail {

struct Driver {
  PFN_cuLaunchKernel_v4000 launch = nullptr;
  PFN_cuGetErrorName_v6000 error_name = nullptr;
};

template <typename F>
F entry_point(const char* symbol) {
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult status{};
#if CUDART_VERSION >= 12050
  const cudaError_t err = cudaGetDriverEntryPointByVersion(symbol, &fn, 12000, cudaEnableDefault, &status);
#else
  const cudaError_t err = cudaGetDriverEntryPoint(symbol, &fn, cudaEnableDefault, &status);
#endif
  if (err != cudaSuccess || status != cudaDriverEntryPointSuccess) {
    (void)cudaGetLastError();  // a failed query is not the caller's error
    return nullptr;
  }
  return reinterpret_cast<F>(fn);
}

// FUSEDOPS_RUNTIME_LAUNCH=1 launches through the runtime instead (read once per process): the fallback's test, and
// a switch to rule the driver path out when a launch misbehaves.
inline const Driver& driver() {
  static const Driver d = [] {
    const char* runtime = std::getenv("FUSEDOPS_RUNTIME_LAUNCH");
    if (runtime != nullptr && std::strcmp(runtime, "1") == 0) return Driver{};
    return Driver{entry_point<PFN_cuLaunchKernel_v4000>("cuLaunchKernel"),
                  entry_point<PFN_cuGetErrorName_v6000>("cuGetErrorName")};
  }();
  return d;
}

// The kernel's function in the current device's context (a CUfunction belongs to one context).
template <auto Kernel>
cudaFunction_t function_of(int device) {
  constexpr int kMaxDevices = 64;
  static std::atomic<cudaFunction_t> cache[kMaxDevices];
  const bool cached = device >= 0 && device < kMaxDevices;
  if (cached) {
    if (cudaFunction_t known = cache[device].load(std::memory_order_acquire)) return known;
  }
  cudaFunction_t fn = nullptr;
  const cudaError_t err = cudaGetFuncBySymbol(&fn, reinterpret_cast<const void*>(Kernel));
  if (err != cudaSuccess) {
    throw std::runtime_error(detail::concat("fusedops: CUDA error: cudaGetFuncBySymbol: ", cudaGetErrorString(err)));
  }
  if (cached) cache[device].store(fn, std::memory_order_release);
  return fn;
}

template <typename F>
struct ParamsOf;
template <typename... P>
struct ParamsOf<void (*)(P...)> {
  using type = std::tuple<std::decay_t<P>...>;
};

}  // namespace launch_detail

// Kernel<<<grid, block, 0, stream>>>(args...) on `device`, which must be the current device. Each argument is
// converted to the kernel's parameter type first, as <<<>>> does.
template <auto Kernel, typename... Args>
void launch(dim3 grid, dim3 block, cudaStream_t stream, int device, Args&&... args) {
  typename launch_detail::ParamsOf<decltype(Kernel)>::type values(std::forward<Args>(args)...);
  std::apply(
      [&](auto&... value) {
        void* params[] = {static_cast<void*>(&value)...};
        const launch_detail::Driver& d = launch_detail::driver();
        if (d.launch == nullptr) {
          const cudaError_t err = cudaLaunchKernel(reinterpret_cast<const void*>(Kernel), grid, block, params, 0, stream);
          if (err != cudaSuccess) {
            throw std::runtime_error(detail::concat("fusedops: CUDA error: ", cudaGetErrorString(err)));
          }
          return;
        }
        const CUresult r = d.launch(reinterpret_cast<CUfunction>(launch_detail::function_of<Kernel>(device)), grid.x,
                                    grid.y, grid.z, block.x, block.y, block.z, 0, reinterpret_cast<CUstream>(stream),
                                    params, nullptr);
        if (r != CUDA_SUCCESS) {
          const char* name = nullptr;
          if (d.error_name == nullptr || d.error_name(r, &name) != CUDA_SUCCESS || name == nullptr) name = "unknown";
          throw std::runtime_error(
              detail::concat("fusedops: CUDA error: cuLaunchKernel: ", name, " (", static_cast<int>(r), ")"));
        }
      },
      values);
}

}  // namespace cuda
}  // namespace fusedops
