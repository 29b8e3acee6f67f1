// The eager fast path's kernel entry points: raw pointers of tensors that
// fast_launch.cpp (fusedops._C_cuda's round_ste and bias_act) has read, checked
// and allocated, launched on torch's current stream of `device`.
//
// Why a path beside the dispatcher: at 2^20 elements an H100 runs the kernel in
// under 4 us, and a call through torch.ops (the schema parse of the Python
// binding, the stable ABI's boxing) costs the host more than that. Calls under
// autograd, torch.compile, functorch, a mode, the profiler or the JIT tracer
// still go through the registered ops. No C++ exception crosses this boundary:
// an error is returned as a message.
#pragma once

#include <cstdint>

namespace fusedops {
namespace fast {

// The dtype codes: the order of CUDA_DTYPES in package/fusedops/_fast.py.
enum DType : int { kFloat = 0, kDouble = 1, kHalf = 2, kBFloat16 = 3 };

// nullptr on success, else a message valid until this thread's next call.
using Error = const char*;

Error round_ste(const void* in, void* out, int64_t n, int dtype, int device) noexcept;

// "cuLaunchKernel" or "cudaLaunchKernel": how the elementwise kernels are launched (launch.cuh).
const char* launch_api() noexcept;

// x and out contiguous with n elements; b (nullptr for none) contiguous with
// ch_size elements, b[(i / ch_stride) % ch_size] added to element i (a
// ch_stride below 1, that of a dimension of size 1, counts as 1).
Error bias_act(const void* x, const void* b, void* out, int64_t n, int64_t ch_stride, int64_t ch_size, int dtype,
               int64_t act, double alpha, double gain, double clamp, int device) noexcept;

}  // namespace fast
}  // namespace fusedops
