// Helpers shared by the CPU and CUDA kernels. Only the LibTorch stable ABI is
// used (built with -DTORCH_STABLE_ONLY and TORCH_TARGET_VERSION = 2.10), so one
// binary loads into every torch >= 2.10.
#pragma once

#include <torch/csrc/stable/library.h>
#include <torch/csrc/stable/ops.h>
#include <torch/csrc/stable/tensor.h>
#include <torch/headeronly/core/Dispatch_v2.h>
#include <torch/headeronly/core/ScalarType.h>

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace fusedops {

using torch::headeronly::ScalarType;
using torch::stable::Tensor;

namespace detail {
template <typename... Args>
std::string concat(const Args&... args) {
  std::ostringstream out;
  ((out << args), ...);
  return out.str();
}
}  // namespace detail

// Errors surface in Python as RuntimeError with this message; the Python
// wrappers validate first and raise TypeError/ValueError, this is the last line
// of defence for direct torch.ops calls.
#define FUSEDOPS_CHECK(cond, ...)                                           \
  do {                                                                      \
    if (!(cond)) {                                                          \
      throw std::runtime_error(::fusedops::detail::concat("fusedops.", __VA_ARGS__)); \
    }                                                                       \
  } while (0)

// Arithmetic type: half and bfloat16 are computed in float, double in double.
template <typename T>
struct opmath {
  using type = float;
};
template <>
struct opmath<double> {
  using type = double;
};
template <typename T>
using opmath_t = typename opmath<T>::type;

inline const char* dtype_name(ScalarType t) { return torch::headeronly::toString(t); }

inline bool is_floating(ScalarType t) {
  return t == ScalarType::Float || t == ScalarType::Double || t == ScalarType::Half ||
         t == ScalarType::BFloat16;
}

// True when the elements occupy a dense block of memory with no overlap, in any
// order of dimensions (contiguous, channels_last, transposed-but-dense...). Such
// a tensor can be processed as a flat array, and empty_like() gives an output
// with the same strides, so the memory format follows the input.
inline bool is_non_overlapping_and_dense(const Tensor& t) {
  const int64_t dim = t.dim();
  auto sizes = t.sizes();
  auto strides = t.strides();
  std::vector<int64_t> order(dim);
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
    if (sizes[a] < 2) return false;
    if (sizes[b] < 2) return true;
    return strides[a] < strides[b];
  });
  int64_t expected = 1;
  for (int64_t i = 0; i < dim; ++i) {
    const int64_t d = order[i];
    if (sizes[d] < 2) continue;
    if (strides[d] != expected) return false;
    expected *= sizes[d];
  }
  return true;
}

// An input that can be read as a flat array: the tensor itself when it is
// dense, otherwise a contiguous copy.
inline Tensor dense_or_contiguous(const Tensor& t) {
  if (t.is_contiguous()) return t;  // the common case, in one call
  return is_non_overlapping_and_dense(t) ? t : torch::stable::contiguous(t);
}

// torch::stable::contiguous goes through the boxed dispatcher even when there
// is nothing to do; asking first saves that on every call with a contiguous input.
inline Tensor contiguous_if_needed(const Tensor& t) {
  return t.is_contiguous() ? t : torch::stable::contiguous(t);
}

// An uninitialised tensor with the sizes, strides, dtype and device of a dense
// tensor. torch::stable::empty_like goes through the boxed dispatcher, which
// looks the operator up by name on every call (several microseconds, a third of
// a small op's host time); the C shim's empty_strided calls the allocator's
// entry point directly.
inline Tensor empty_like_dense(const Tensor& t) {
  int32_t dtype = 0, device_type = 0, device_index = 0;
  TORCH_ERROR_CODE_CHECK(aoti_torch_get_dtype(t.get(), &dtype));
  TORCH_ERROR_CODE_CHECK(aoti_torch_get_device_type(t.get(), &device_type));
  TORCH_ERROR_CODE_CHECK(aoti_torch_get_device_index(t.get(), &device_index));
  AtenTensorHandle out = nullptr;
  TORCH_ERROR_CODE_CHECK(aoti_torch_empty_strided(t.dim(), t.sizes().data(), t.strides().data(), dtype,
                                                  device_type, device_index, &out));
  return Tensor(out);
}

}  // namespace fusedops
