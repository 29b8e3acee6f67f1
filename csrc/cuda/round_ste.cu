// round_ste on CUDA: round half to even (rint, like torch.round), computed in
// float for half/bfloat16.
#include "cuda_common.cuh"

namespace fusedops {
namespace {

struct RoundHalfEven {
  template <typename T>
  __device__ __forceinline__ T operator()(T x) const {
    return static_cast<T>(rint(static_cast<opmath_t<T>>(x)));
  }
};

Tensor round_ste_cuda(Tensor x) {
  cuda::check_cuda_tensor(x, "round_ste", "x");
  FUSEDOPS_CHECK(is_floating(x.scalar_type()),
                 "round_ste: x must be a floating-point tensor, got ", dtype_name(x.scalar_type()));
  const int32_t device = x.get_device_index();
  cuda::DeviceGuardIfNeeded guard(device);
  Tensor in = dense_or_contiguous(x);
  Tensor out = empty_like_dense(in);
  const int64_t n = in.numel();
  THO_DISPATCH_V2(
      in.scalar_type(), "round_ste_cuda", AT_WRAP([&] {
        cuda::launch_unary(static_cast<const scalar_t*>(in.const_data_ptr()),
                           static_cast<scalar_t*>(out.mutable_data_ptr()), n, RoundHalfEven{}, device);
      }),
      AT_FLOATING_TYPES, ScalarType::Half, ScalarType::BFloat16);
  return out;
}

}  // namespace

fast::Error fast::round_ste(const void* in, void* out, int64_t n, int dtype, int device) noexcept {
  return run_on_device(device, [&] {
    with_dtype(dtype, [&](auto tag) {
      using scalar_t = typename decltype(tag)::type;
      cuda::launch_unary(static_cast<const scalar_t*>(in), static_cast<scalar_t*>(out), n, RoundHalfEven{}, device);
    });
  });
}

const char* fast::launch_api() noexcept {
  try {
    return cuda::launch_detail::driver().launch != nullptr ? "cuLaunchKernel" : "cudaLaunchKernel";
  } catch (...) {
    return "cudaLaunchKernel";
  }
}

}  // namespace fusedops

STABLE_TORCH_LIBRARY_IMPL(fusedops, CUDA, m) {
  m.impl("round_ste", TORCH_BOX(&fusedops::round_ste_cuda));
}
