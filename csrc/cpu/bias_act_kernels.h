// bias_act CPU kernels (see bias_act.cpp), compiled once per instruction set
// (isa.h): everything below the job description is in cpu::FUSEDOPS_CPU_ISA.
//
// Speed comes from three things (the scalar version with a per-element switch
// and a per-element channel index was 10-30x slower than eager PyTorch):
// * the activation and the order of the derivative are template parameters,
//   so the per-element code is straight-line arithmetic;
// * the tensor is walked in contiguous segments whose bias is either one
//   constant (the channel dimension is not the innermost one, e.g. NCHW) or a
//   contiguous row (it is, e.g. [N, C] or channels_last), and each segment is a
//   plain loop over __restrict pointers with branch-free selects, which the
//   compiler vectorises;
// * exp/tanh/sigmoid/softplus in float come from vec_math.h (vectorisable
//   polynomials instead of libm calls).
// Work is split across torch's intra-op threads (torch::stable::parallel_for,
// i.e. at::parallel_for, which respects torch.set_num_threads()).
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>
#include <vector>

#include "../bias_act_common.h"
#include "vec_math.h"

namespace fusedops {
namespace cpu {

// One call's worth of work on dense (flat) arrays.
template <typename scalar_t>
struct BiasActJob {
  using acc_t = opmath_t<scalar_t>;
  const scalar_t* x;
  const scalar_t* dy;  // nullptr for the forward
  const scalar_t* b;   // nullptr without bias
  scalar_t* out;
  int64_t n;
  bias_act::ChannelMap map;
  acc_t alpha, gain, clamp;
};

template <typename scalar_t>
void bias_act_run_avx2(const BiasActJob<scalar_t>& j, int order, int64_t act);  // avx2.cpp
template <typename scalar_t>
void bias_act_run_avx512(const BiasActJob<scalar_t>& j, int order, int64_t act);  // avx512.cpp

namespace FUSEDOPS_CPU_ISA {

// Elements per parallel task: large enough that a task outweighs the cost of
// handing it to a thread (a few microseconds), small enough to balance.
constexpr int64_t kGrain = int64_t{1} << 15;
// A channel stride below this walks a repeated bias row instead of runs of a
// constant bias (a run that short would leave the vector loop mostly idle).
constexpr int64_t kMinRun = 16;

// f (ORDER 0), f' (1) or f'' (2) of activation ACT at z; codes as in bias_act_impl.h.
template <int64_t ACT, int ORDER, typename T>
FUSEDOPS_CPU_INLINE T act_eval(T z, T alpha) {
  using M = Math<T>;
  constexpr T kLambda = T(bias_act::kSeluLambda);
  constexpr T kLambdaAlpha = T(bias_act::kSeluLambda * bias_act::kSeluAlpha);
  if constexpr (ACT == bias_act::kLinear) {
    if constexpr (ORDER == 0) return z;
    return ORDER == 1 ? T(1) : T(0);
  } else if constexpr (ACT == bias_act::kRelu) {
    if constexpr (ORDER == 0) return sel(z < T(0), T(0), z);  // NaN passes, as in torch.relu
    if constexpr (ORDER == 1) return sel(z > T(0), T(1), T(0));
    return T(0);
  } else if constexpr (ACT == bias_act::kLrelu) {
    if constexpr (ORDER == 0) return sel(z > T(0), z, z * alpha);
    if constexpr (ORDER == 1) return sel(z > T(0), T(1), alpha);
    return T(0);
  } else if constexpr (ACT == bias_act::kTanh) {
    const T t = M::tanh(z);
    if constexpr (ORDER == 0) return t;
    if constexpr (ORDER == 1) return T(1) - t * t;
    return T(-2) * t * (T(1) - t * t);
  } else if constexpr (ACT == bias_act::kSigmoid) {
    const T s = M::sigmoid(z);
    if constexpr (ORDER == 0) return s;
    if constexpr (ORDER == 1) return s * (T(1) - s);
    return s * (T(1) - s) * (T(1) - T(2) * s);
  } else if constexpr (ACT == bias_act::kElu) {
    if constexpr (ORDER == 0) return sel(z > T(0), z, alpha * M::expm1(z));
    const T e = alpha * M::exp(z);
    if constexpr (ORDER == 1) return sel(z > T(0), T(1), e);
    return sel(z > T(0), T(0), e);
  } else if constexpr (ACT == bias_act::kSelu) {
    if constexpr (ORDER == 0) return sel(z > T(0), kLambda * z, kLambdaAlpha * M::expm1(z));
    const T e = kLambdaAlpha * M::exp(z);
    if constexpr (ORDER == 1) return sel(z > T(0), kLambda, e);
    return sel(z > T(0), T(0), e);
  } else if constexpr (ACT == bias_act::kSoftplus) {
    if constexpr (ORDER == 0) return M::softplus(z);
    const T s = M::sigmoid(z);
    if constexpr (ORDER == 1) return s;
    return s * (T(1) - s);
  } else {  // swish
    const T s = M::sigmoid(z);
    if constexpr (ORDER == 0) return z * s;
    if constexpr (ORDER == 1) return s * (T(1) + z * (T(1) - s));
    return s * (T(1) - s) * (T(2) + z * (T(1) - T(2) * s));
  }
}

// One contiguous segment: out[k] for k < len, with the bias either a row
// (brow[k]) or one constant. ORDER 0 is the forward, 1 and 2 the gradients
// applied to dy. `clamp` is +inf when there is no clamp: the comparisons then
// never fire and the loop has no extra branch.
template <int64_t ACT, int ORDER, bool ROW, typename scalar_t, typename acc_t>
void run_segment(const scalar_t* __restrict x, const scalar_t* __restrict dy, const acc_t* __restrict brow,
                 acc_t bconst, scalar_t* __restrict out, int64_t len, acc_t alpha, acc_t gain, acc_t clamp) {
  for (int64_t k = 0; k < len; ++k) {
    const acc_t z = static_cast<acc_t>(x[k]) + (ROW ? brow[k] : bconst);
    const acc_t y = act_eval<ACT, 0>(z, alpha) * gain;
    if constexpr (ORDER == 0) {
      const acc_t hi = sel(y > clamp, clamp, y);
      out[k] = static_cast<scalar_t>(sel(hi < -clamp, -clamp, hi));
    } else {
      // Zero where the forward output was clamped; the bounds themselves pass (like torch.clamp).
      const acc_t g = static_cast<acc_t>(dy[k]) * gain * act_eval<ACT, ORDER>(z, alpha);
      out[k] = static_cast<scalar_t>(sel((y > clamp) | (y < -clamp), acc_t(0), g));
    }
  }
}

template <int64_t ACT, int ORDER, typename scalar_t>
void run_job(const BiasActJob<scalar_t>& j) {
  using acc_t = opmath_t<scalar_t>;
  const scalar_t* dy = j.dy;
  auto at = [dy](int64_t i) { return dy == nullptr ? nullptr : dy + i; };
  if (j.b == nullptr) {
    torch::stable::parallel_for(0, j.n, kGrain, [&](int64_t begin, int64_t end) {
      run_segment<ACT, ORDER, false>(j.x + begin, at(begin), static_cast<const acc_t*>(nullptr), acc_t(0),
                                     j.out + begin, end - begin, j.alpha, j.gain, j.clamp);
    });
    return;
  }
  const int64_t s = j.map.stride;
  const int64_t C = j.map.size;
  if (s >= kMinRun) {
    // Runs of s elements share one channel: [r*s, (r+1)*s) has channel r % C.
    torch::stable::parallel_for(0, j.n, kGrain, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end;) {
        const int64_t r = i / s;
        const int64_t stop = std::min((r + 1) * s, end);
        run_segment<ACT, ORDER, false>(j.x + i, at(i), static_cast<const acc_t*>(nullptr),
                                       static_cast<acc_t>(j.b[r % C]), j.out + i, stop - i, j.alpha, j.gain,
                                       j.clamp);
        i = stop;
      }
    });
    return;
  }
  // The bias pattern repeats every C*s elements: expand it once into a row.
  const int64_t period = C * s;
  std::vector<acc_t> row(static_cast<size_t>(period));
  for (int64_t k = 0; k < period; ++k) row[k] = static_cast<acc_t>(j.b[k / s]);
  const acc_t* brow = row.data();
  torch::stable::parallel_for(0, j.n, kGrain, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end;) {
      const int64_t off = i % period;
      const int64_t stop = std::min(i + (period - off), end);
      run_segment<ACT, ORDER, true>(j.x + i, at(i), brow + off, acc_t(0), j.out + i, stop - i, j.alpha, j.gain,
                                    j.clamp);
      i = stop;
    }
  });
}

template <int ORDER, typename scalar_t>
void run_act(int64_t act, const BiasActJob<scalar_t>& j) {
  switch (act) {
    case bias_act::kLinear: return run_job<bias_act::kLinear, ORDER>(j);
    case bias_act::kRelu: return run_job<bias_act::kRelu, ORDER>(j);
    case bias_act::kLrelu: return run_job<bias_act::kLrelu, ORDER>(j);
    case bias_act::kTanh: return run_job<bias_act::kTanh, ORDER>(j);
    case bias_act::kSigmoid: return run_job<bias_act::kSigmoid, ORDER>(j);
    case bias_act::kElu: return run_job<bias_act::kElu, ORDER>(j);
    case bias_act::kSelu: return run_job<bias_act::kSelu, ORDER>(j);
    case bias_act::kSoftplus: return run_job<bias_act::kSoftplus, ORDER>(j);
    default: return run_job<bias_act::kSwish, ORDER>(j);
  }
}

// The entry point: forward (order 0) or gradient of order 1 or 2.
template <typename scalar_t>
void bias_act_run(const BiasActJob<scalar_t>& j, int order, int64_t act) {
  if (order == 0) run_act<0>(act, j);
  if (order == 1) run_act<1>(act, j);
  if (order == 2) run_act<2>(act, j);
}

}  // namespace FUSEDOPS_CPU_ISA
}  // namespace cpu
}  // namespace fusedops
