// Argument handling shared by the CPU and CUDA entry points of bias_act.
#pragma once

#include <optional>

#include "bias_act_impl.h"
#include "common.h"

namespace fusedops {
namespace bias_act {

// Where the bias index of a flat element comes from: for a dense tensor the
// coordinate along `dim` of storage offset o is (o / stride) % size.
struct ChannelMap {
  int64_t stride;
  int64_t size;
};

inline void check_args(const Tensor& x, const std::optional<Tensor>& b, int64_t dim, int64_t act, double clamp,
                             const char* op) {
  FUSEDOPS_CHECK(is_floating(x.scalar_type()), op, ": x must be a floating-point tensor, got ",
                 dtype_name(x.scalar_type()));
  FUSEDOPS_CHECK(act >= 0 && act < kNumActs, op, ": unknown activation code ", act);
  FUSEDOPS_CHECK(!(clamp < 0.0) || clamp == -1.0, op, ": clamp must be >= 0 (or -1 for none), got ", clamp);
  if (b.has_value()) {
    const Tensor& bias = *b;
    FUSEDOPS_CHECK(x.dim() > 0, op, ": x must have at least one dimension when b is given");
    FUSEDOPS_CHECK(dim >= 0 && dim < x.dim(), op, ": dim ", dim, " is out of range for x with ", x.dim(), " dims");
    FUSEDOPS_CHECK(bias.dim() == 1 && bias.size(0) == x.size(dim), op, ": b must be 1-D with x.shape[dim] = ",
                   x.size(dim), " elements");
    FUSEDOPS_CHECK(bias.scalar_type() == x.scalar_type(), op, ": b must have the dtype of x");
    FUSEDOPS_CHECK(bias.is_cuda() == x.is_cuda() && bias.get_device_index() == x.get_device_index(), op,
                   ": b must be on the device of x");
  }
}

inline ChannelMap channel_map(const Tensor& dense, const std::optional<Tensor>& b, int64_t dim) {
  if (!b.has_value()) return {1, 1};
  return {std::max<int64_t>(dense.stride(dim), 1), dense.size(dim)};
}

// dy laid out like x (same strides), so both can be walked as flat arrays.
inline Tensor like_layout(const Tensor& dy, const Tensor& ref) {
  if (dy.dim() == ref.dim()) {
    bool same = true;
    for (int64_t d = 0; d < ref.dim() && same; ++d) {
      same = dy.size(d) == ref.size(d) && (ref.size(d) < 2 || dy.stride(d) == ref.stride(d));
    }
    if (same) return dy;
  }
  Tensor out = torch::stable::empty_like(ref);
  torch::stable::copy_(out, dy);
  return out;
}

}  // namespace bias_act
}  // namespace fusedops
