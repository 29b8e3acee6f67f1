// LLTM on CUDA: one fused kernel for the pointwise forward and one for the
// pointwise backward (lltm_cell, lltm_cell_backward: the math lives in
// ../lltm_impl.h, shared with the CPU kernels; half and bfloat16 are computed
// in float), and the whole training step's CUDA work in two calls
// (_lltm_step, _lltm_step_backward: the concatenation, the matrix products
// through torch's own CUDA addmm/mm, the cell kernels, the bias gradient),
// which package/fusedops/_lltm.py uses in eager mode. Why two calls: at the
// tutorial's size (B=16) a step is bound by the host, and each op called from
// Python costs it more than the kernel takes; at B=1024 the GEMMs are 85% of
// the step, and the two backward GEMMs can run side by side.
//
// Layout: a 2-D launch, threadIdx.x/blockIdx.x over the S state columns
// (coalesced across a warp for row-major inputs) and threadIdx.y/blockIdx.y
// over the B rows, grid-striding over rows when B is large. Inputs are read
// through their strides (no contiguous() copies); outputs are contiguous. All
// offsets are 64-bit.
#include <torch/csrc/inductor/aoti_torch/generated/c_shim_cuda.h>
#include <torch/csrc/stable/c/shim.h>

#include <climits>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "../lltm_impl.h"
#include "cuda_common.cuh"

namespace fusedops {
namespace {

using lltm::View2d;

template <typename T>
View2d<T> view2d(const Tensor& t) {
  return {static_cast<const T*>(t.const_data_ptr()), t.strides()[0], t.strides()[1]};
}

template <typename scalar_t>
__global__ void lltm_cell_forward_kernel(const View2d<scalar_t> g, const View2d<scalar_t> c,
                                         scalar_t* __restrict__ h_out, scalar_t* __restrict__ c_out, int64_t B,
                                         int64_t S) {
  using T = opmath_t<scalar_t>;
  const int64_t j = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (j >= S) return;
  const int64_t row_stride = static_cast<int64_t>(gridDim.y) * blockDim.y;
  for (int64_t r = static_cast<int64_t>(blockIdx.y) * blockDim.y + threadIdx.y; r < B; r += row_stride) {
    const auto o = lltm::forward<T>(static_cast<T>(g(r, j)), static_cast<T>(g(r, S + j)),
                                    static_cast<T>(g(r, 2 * S + j)), static_cast<T>(c(r, j)));
    h_out[r * S + j] = static_cast<scalar_t>(o.new_h);
    c_out[r * S + j] = static_cast<scalar_t>(o.new_cell);
  }
}

// dh / dc have a null data pointer when the gradient is absent (treated as 0).
template <typename scalar_t>
__global__ void lltm_cell_backward_kernel(const View2d<scalar_t> dh, const View2d<scalar_t> dc,
                                          const View2d<scalar_t> g, const View2d<scalar_t> nc,
                                          scalar_t* __restrict__ dg_out, scalar_t* __restrict__ dc_out, int64_t B,
                                          int64_t S) {
  using T = opmath_t<scalar_t>;
  const int64_t j = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (j >= S) return;
  const bool has_h = dh.data != nullptr;
  const bool has_c = dc.data != nullptr;
  const int64_t row_stride = static_cast<int64_t>(gridDim.y) * blockDim.y;
  for (int64_t r = static_cast<int64_t>(blockIdx.y) * blockDim.y + threadIdx.y; r < B; r += row_stride) {
    const T gh = has_h ? static_cast<T>(dh(r, j)) : T(0);
    const T gc = has_c ? static_cast<T>(dc(r, j)) : T(0);
    const auto o = lltm::backward<T>(gh, gc, static_cast<T>(g(r, j)), static_cast<T>(g(r, S + j)),
                                     static_cast<T>(g(r, 2 * S + j)), static_cast<T>(nc(r, j)));
    scalar_t* dg_row = dg_out + r * 3 * S;
    dg_row[j] = static_cast<scalar_t>(o.d_g0);
    dg_row[S + j] = static_cast<scalar_t>(o.d_g1);
    dg_row[2 * S + j] = static_cast<scalar_t>(o.d_g2);
    dc_out[r * S + j] = static_cast<scalar_t>(o.d_old_cell);
  }
}

// X = cat([old_h, input], 1): the (B, S + F) operand of the matrix product,
// contiguous, read through the inputs' strides (torch.cat's result, bit for bit:
// a copy).
template <typename scalar_t>
__global__ void lltm_concat_kernel(const View2d<scalar_t> h, const View2d<scalar_t> x, scalar_t* __restrict__ out,
                                   int64_t B, int64_t S, int64_t F) {
  const int64_t j = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t W = S + F;
  if (j >= W) return;
  const int64_t row_stride = static_cast<int64_t>(gridDim.y) * blockDim.y;
  for (int64_t r = static_cast<int64_t>(blockIdx.y) * blockDim.y + threadIdx.y; r < B; r += row_stride) {
    out[r * W + j] = j < S ? h(r, j) : x(r, j - S);
  }
}

struct Launch {
  dim3 grid;
  dim3 block;
};

// 256 threads a block: x over columns (a multiple of 32, at most 256), y over
// rows; the row grid is capped at ~16 blocks per SM (grid-stride beyond).
Launch launch_for(int64_t B, int64_t S, int32_t device) {
  constexpr int64_t kThreads = 256;
  const int64_t tx = std::min<int64_t>(kThreads, (S + 31) / 32 * 32);
  const int64_t ty = kThreads / tx;
  const int64_t gx = (S + tx - 1) / tx;
  FUSEDOPS_CHECK(gx <= INT_MAX, "lltm: state size ", S, " is too large");
  const int64_t row_blocks = (B + ty - 1) / ty;
  const int64_t cap = std::min<int64_t>(
      65535, std::max<int64_t>(1, static_cast<int64_t>(cuda::multiprocessor_count(device)) * 16 / gx));
  const int64_t gy = std::max<int64_t>(1, std::min(row_blocks, cap));
  return {dim3(static_cast<unsigned>(gx), static_cast<unsigned>(gy)),
          dim3(static_cast<unsigned>(tx), static_cast<unsigned>(ty))};
}

template <typename scalar_t>
void launch_forward(const Launch& l, cudaStream_t stream, const Tensor& gate_weights, const Tensor& old_cell,
                    Tensor& new_h, Tensor& new_cell, int64_t B, int64_t S) {
  lltm_cell_forward_kernel<scalar_t><<<l.grid, l.block, 0, stream>>>(
      view2d<scalar_t>(gate_weights), view2d<scalar_t>(old_cell), static_cast<scalar_t*>(new_h.mutable_data_ptr()),
      static_cast<scalar_t*>(new_cell.mutable_data_ptr()), B, S);
  FUSEDOPS_CUDA_CHECK(cudaGetLastError());
}

template <typename scalar_t>
void launch_backward(const Launch& l, cudaStream_t stream, const std::optional<Tensor>& grad_h,
                     const std::optional<Tensor>& grad_cell, const Tensor& gate_weights, const Tensor& new_cell,
                     Tensor& d_gates, Tensor& d_old_cell, int64_t B, int64_t S) {
  View2d<scalar_t> dh{nullptr, 0, 0};
  View2d<scalar_t> dc{nullptr, 0, 0};
  if (grad_h.has_value()) dh = view2d<scalar_t>(*grad_h);
  if (grad_cell.has_value()) dc = view2d<scalar_t>(*grad_cell);
  lltm_cell_backward_kernel<scalar_t><<<l.grid, l.block, 0, stream>>>(
      dh, dc, view2d<scalar_t>(gate_weights), view2d<scalar_t>(new_cell),
      static_cast<scalar_t*>(d_gates.mutable_data_ptr()), static_cast<scalar_t*>(d_old_cell.mutable_data_ptr()), B,
      S);
  FUSEDOPS_CUDA_CHECK(cudaGetLastError());
}

std::tuple<Tensor, Tensor> lltm_cell_cuda(Tensor gate_weights, Tensor old_cell) {
  cuda::check_cuda_tensor(gate_weights, "lltm_cell", "gate_weights");
  const auto dims = lltm::check_cell_args(gate_weights, old_cell, "lltm_cell", "old_cell");
  const int64_t B = dims[0];
  const int64_t S = dims[1];
  const int32_t device = gate_weights.get_device_index();
  cuda::DeviceGuardIfNeeded guard(device);
  Tensor new_h = lltm::empty_2d(old_cell, B, S);
  Tensor new_cell = lltm::empty_2d(old_cell, B, S);
  if (B == 0 || S == 0) return {new_h, new_cell};
  const Launch l = launch_for(B, S, device);
  cudaStream_t stream = cuda::current_stream(device);
  THO_DISPATCH_V2(
      gate_weights.scalar_type(), "lltm_cell_cuda",
      AT_WRAP([&] { launch_forward<scalar_t>(l, stream, gate_weights, old_cell, new_h, new_cell, B, S); }),
      AT_FLOATING_TYPES, ScalarType::Half, ScalarType::BFloat16);
  return {new_h, new_cell};
}

std::tuple<Tensor, Tensor> lltm_cell_backward_cuda(std::optional<Tensor> grad_h, std::optional<Tensor> grad_cell,
                                                   Tensor gate_weights, Tensor new_cell) {
  cuda::check_cuda_tensor(gate_weights, "lltm_cell_backward", "gate_weights");
  const auto dims = lltm::check_cell_args(gate_weights, new_cell, "lltm_cell_backward", "new_cell");
  const int64_t B = dims[0];
  const int64_t S = dims[1];
  lltm::check_grad(grad_h, gate_weights, "lltm_cell_backward", "grad_h", B, S);
  lltm::check_grad(grad_cell, gate_weights, "lltm_cell_backward", "grad_cell", B, S);
  const int32_t device = gate_weights.get_device_index();
  cuda::DeviceGuardIfNeeded guard(device);
  Tensor d_gates = lltm::empty_2d(gate_weights, B, 3 * S);
  Tensor d_old_cell = lltm::empty_2d(new_cell, B, S);
  if (B == 0 || S == 0) return {d_gates, d_old_cell};
  const Launch l = launch_for(B, S, device);
  cudaStream_t stream = cuda::current_stream(device);
  THO_DISPATCH_V2(
      gate_weights.scalar_type(), "lltm_cell_backward_cuda", AT_WRAP([&] {
        launch_backward<scalar_t>(l, stream, grad_h, grad_cell, gate_weights, new_cell, d_gates, d_old_cell, B, S);
      }),
      AT_FLOATING_TYPES, ScalarType::Half, ScalarType::BFloat16);
  return {d_gates, d_old_cell};
}


// ---- the training step's CUDA work in two calls (_lltm_step, _lltm_step_backward) ----------------------------------

// The step's backward cell with the bias gradient's first half: besides d_gates and d_old_cell, each block writes
// the sums of its rows' d_gates per column (rows in a fixed order, then the block's row lanes in a fixed order) into
// partials[blockIdx.y][3S]; lltm_bias_sums adds those in order. Deterministic, and no allocation in the launches (the
// ATen reduction that d_gates.sum(0) ran allocates, which a captured CUDA graph cannot have).
template <typename scalar_t>
__global__ void __launch_bounds__(256)
    lltm_step_backward_kernel(const View2d<scalar_t> dh, const View2d<scalar_t> dc, const View2d<scalar_t> g,
                              const View2d<scalar_t> nc, scalar_t* __restrict__ dg_out, scalar_t* __restrict__ dc_out,
                              opmath_t<scalar_t>* __restrict__ partials, int64_t B, int64_t S) {
  using T = opmath_t<scalar_t>;
  __shared__ T sums[3][256];
  const int64_t j = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const bool active = j < S;
  const bool has_h = dh.data != nullptr;
  const bool has_c = dc.data != nullptr;
  T acc0 = T(0), acc1 = T(0), acc2 = T(0);
  const int64_t row_stride = static_cast<int64_t>(gridDim.y) * blockDim.y;
  for (int64_t r = static_cast<int64_t>(blockIdx.y) * blockDim.y + threadIdx.y; active && r < B; r += row_stride) {
    const T gh = has_h ? static_cast<T>(dh(r, j)) : T(0);
    const T gc = has_c ? static_cast<T>(dc(r, j)) : T(0);
    const auto o = lltm::backward<T>(gh, gc, static_cast<T>(g(r, j)), static_cast<T>(g(r, S + j)),
                                     static_cast<T>(g(r, 2 * S + j)), static_cast<T>(nc(r, j)));
    const scalar_t d0 = static_cast<scalar_t>(o.d_g0), d1 = static_cast<scalar_t>(o.d_g1),
                   d2 = static_cast<scalar_t>(o.d_g2);
    scalar_t* dg_row = dg_out + r * 3 * S;
    dg_row[j] = d0;
    dg_row[S + j] = d1;
    dg_row[2 * S + j] = d2;
    dc_out[r * S + j] = static_cast<scalar_t>(o.d_old_cell);
    // The bias gradient sums d_gates as stored (rounded to scalar_t), as d_gates.sum(0) did.
    acc0 += static_cast<T>(d0);
    acc1 += static_cast<T>(d1);
    acc2 += static_cast<T>(d2);
  }
  if (partials == nullptr) return;  // uniform across the grid: no bias gradient asked for
  const unsigned lane = threadIdx.y * blockDim.x + threadIdx.x;
  sums[0][lane] = acc0;
  sums[1][lane] = acc1;
  sums[2][lane] = acc2;
  __syncthreads();
  if (threadIdx.y == 0 && active) {
    T s0 = T(0), s1 = T(0), s2 = T(0);
    for (unsigned y = 0; y < blockDim.y; ++y) {
      const unsigned l = y * blockDim.x + threadIdx.x;
      s0 += sums[0][l];
      s1 += sums[1][l];
      s2 += sums[2][l];
    }
    T* row = partials + static_cast<int64_t>(blockIdx.y) * 3 * S;
    row[j] = s0;
    row[S + j] = s1;
    row[2 * S + j] = s2;
  }
}

// d_bias[c] = the sum over the row blocks of partials[k][c], k in order.
template <typename scalar_t>
__global__ void lltm_bias_sums(const opmath_t<scalar_t>* __restrict__ partials, scalar_t* __restrict__ d_bias,
                               int64_t blocks, int64_t n) {
  using T = opmath_t<scalar_t>;
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; c < n; c += step) {
    T s = T(0);
    for (int64_t k = 0; k < blocks; ++k) s += partials[k * n + c];
    d_bias[c] = static_cast<scalar_t>(s);
  }
}

// A view of t with other sizes and strides (same storage, same offset) straight from the C shim: torch::stable's
// transpose and reshape go through the boxed dispatcher, by name, on every call.
Tensor restride(const Tensor& t, std::initializer_list<int64_t> sizes, std::initializer_list<int64_t> strides) {
  AtenTensorHandle out = nullptr;
  TORCH_ERROR_CODE_CHECK(aoti_torch__reinterpret_tensor(t.get(), static_cast<int64_t>(sizes.size()), sizes.begin(),
                                                        strides.begin(), /*offset_increment=*/0, &out));
  return Tensor(out);
}

Tensor transposed(const Tensor& t) {
  return restride(t, {t.sizes()[1], t.sizes()[0]}, {t.strides()[1], t.strides()[0]});
}

// A contiguous tensor of the step's accumulation type (float for half and bfloat16) on t's device.
Tensor empty_opmath(const Tensor& t, int64_t rows, int64_t cols) {
  const int32_t dtype = t.scalar_type() == ScalarType::Double ? aoti_torch_dtype_float64() : aoti_torch_dtype_float32();
  int32_t device_type = 0;
  TORCH_ERROR_CODE_CHECK(aoti_torch_get_device_type(t.get(), &device_type));
  const int64_t sizes[2] = {rows, cols};
  const int64_t strides[2] = {cols, 1};
  AtenTensorHandle out = nullptr;
  TORCH_ERROR_CODE_CHECK(aoti_torch_empty_strided(2, sizes, strides, dtype, device_type, t.get_device_index(), &out));
  return Tensor(out);
}

// The matrix products call torch's own CUDA kernels (at::cuda::addmm_out / mm_out through the C shim, no
// dispatcher): the same cuBLAS calls, with the same results, as torch.addmm and Tensor.mm from Python.
void addmm_out(Tensor& out, const Tensor& bias, const Tensor& a, const Tensor& b) {
  TORCH_ERROR_CODE_CHECK(aoti_torch_cuda_addmm_out(out.get(), bias.get(), a.get(), b.get(), 1.0, 1.0));
}

void mm_out(Tensor& out, const Tensor& a, const Tensor& b) {
  TORCH_ERROR_CODE_CHECK(aoti_torch_cuda_mm_out(out.get(), a.get(), b.get()));
}

// torch's current stream of `device` set to `stream` for the guard's life (ATen's GEMMs launch on the current one).
class CurrentStream {
 public:
  CurrentStream(cudaStream_t stream, int32_t device) {
    TORCH_ERROR_CODE_CHECK(aoti_torch_create_cuda_stream_guard(stream, device, &guard_));
  }
  ~CurrentStream() { aoti_torch_delete_cuda_stream_guard(guard_); }
  CurrentStream(const CurrentStream&) = delete;
  CurrentStream& operator=(const CurrentStream&) = delete;

 private:
  CUDAStreamGuardHandle guard_ = nullptr;
};

int env_switch(const char* name) {  // -1 unset (automatic), 0 off, 1 on
  const char* v = std::getenv(name);
  if (v == nullptr) return -1;
  return std::strcmp(v, "0") == 0 ? 0 : (std::strcmp(v, "1") == 0 ? 1 : -1);
}

// ---- CUDA graphs of a step's launches ------------------------------------------------------------------------------
//
// At the tutorial's size (B=16) a step is bound by the host: each cuBLAS call costs the host tens of microseconds
// (its heuristics, handle and workspace set-up), the kernels a few. A step's launches are therefore recorded once as
// a CUDA graph and replayed, when the call is exactly one seen before: every tensor's data pointer, sizes and strides,
// the dtype, the device, the stream, the flags and the cuBLAS settings (blas_state, read in Python) are the key. The
// outputs are freshly allocated by torch's caching allocator on every call, as before; in a loop they land where the
// previous step's did, so the key repeats, and a replay writes them there. A key is captured on its second sight (a
// call seen once stays eager), at most kMaxGraphs per direction; nothing inside allocates (outputs, the bias partials
// and the views are made before); the layouts that would make ATen copy an operand, a stream that is itself being
// captured, and FUSEDOPS_LLTM_GRAPHS=0 run eagerly.
//
// The graphs are captured on a stream of this library's own (cuBLAS keeps a workspace per stream, which the
// captured GEMMs keep using), and the second stream of the backward's overlap is its own too; every call that uses
// either runs under one lock per device and after the previous such call (an event), so two graphs never share a
// workspace at the same time. The capturing call computes its outputs on the capture stream first (which also sets
// up that stream's cuBLAS workspaces outside the capture), then records the graph.

constexpr size_t kMaxGraphs = 64;
constexpr size_t kMaxSeen = 1024;

struct Key {
  std::vector<int64_t> v;
  size_t hash = 0;
  bool operator==(const Key& o) const { return hash == o.hash && v == o.v; }
};

struct KeyHash {
  size_t operator()(const Key& k) const { return k.hash; }
};

class KeyBuilder {
 public:
  KeyBuilder& add(int64_t x) {
    key_.v.push_back(x);
    return *this;
  }
  KeyBuilder& add(const Tensor& t) {
    add(reinterpret_cast<int64_t>(t.const_data_ptr())).add(t.dim());
    for (int64_t d = 0; d < t.dim(); ++d) add(t.sizes()[d]).add(t.strides()[d]);
    return *this;
  }
  KeyBuilder& add(const std::optional<Tensor>& t) { return t.has_value() ? add(1).add(*t) : add(0); }
  Key done() {
    size_t h = 1469598103934665603ull;
    for (int64_t x : key_.v) h = (h ^ static_cast<size_t>(x)) * 1099511628211ull;
    key_.hash = h;
    return std::move(key_);
  }

 private:
  Key key_;
};

struct Graphs {
  std::unordered_map<Key, cudaGraphExec_t, KeyHash> execs;
  std::unordered_set<Key, KeyHash> seen;
  int64_t captured = 0;
  int64_t replayed = 0;
};

// Per device: the lock, the streams and events of the graph and overlap paths, and each direction's graphs.
struct DeviceState {
  std::mutex mutex;
  cudaStream_t capture = nullptr;
  cudaStream_t side = nullptr;
  cudaEvent_t last = nullptr;  // the end of the previous call that used `capture` or `side`
  cudaEvent_t fork = nullptr;
  cudaEvent_t join = nullptr;
  Graphs graphs[2];  // forward, backward
};

constexpr int kMaxDevices = 64;

// Created on first use and never destroyed (streams, events and graphs live as long as the process: destroying them
// at exit can come after the CUDA runtime has shut down).
DeviceState& device_state(int32_t device) {
  static std::mutex mutex;
  static DeviceState* states[kMaxDevices] = {};
  FUSEDOPS_CHECK(device >= 0 && device < kMaxDevices, "_lltm_step: device index ", device);
  std::lock_guard<std::mutex> lock(mutex);
  if (states[device] == nullptr) {
    auto* st = new DeviceState;
    FUSEDOPS_CUDA_CHECK(cudaStreamCreateWithFlags(&st->capture, cudaStreamNonBlocking));
    FUSEDOPS_CUDA_CHECK(cudaStreamCreateWithFlags(&st->side, cudaStreamNonBlocking));
    for (cudaEvent_t* e : {&st->last, &st->fork, &st->join}) {
      FUSEDOPS_CUDA_CHECK(cudaEventCreateWithFlags(e, cudaEventDisableTiming));
    }
    FUSEDOPS_CUDA_CHECK(cudaEventRecord(st->last, st->capture));
    states[device] = st;
  }
  return *states[device];
}

bool stream_is_capturing(cudaStream_t stream) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  FUSEDOPS_CUDA_CHECK(cudaStreamIsCapturing(stream, &status));
  return status != cudaStreamCaptureStatusNone;
}

// Runs launches(s), which issues a call's work on stream s (torch's current stream is s meanwhile), for a call on
// `stream`: as a graph when the key is known, else eagerly (and, on the key's second sight, records the graph).
// `uses_side`: launches(s) forks to the device's side stream.
template <typename Launches>
void run_step(int direction, const Key* key, int32_t device, cudaStream_t stream, bool uses_side,
              Launches&& launches) {
  static const bool graphs_on = env_switch("FUSEDOPS_LLTM_GRAPHS") != 0;
  const bool graphable = key != nullptr && graphs_on && !stream_is_capturing(stream);
  if (!graphable && !uses_side) {
    launches(stream);
    return;
  }
  DeviceState& st = device_state(device);
  std::lock_guard<std::mutex> lock(st.mutex);
  FUSEDOPS_CUDA_CHECK(cudaStreamWaitEvent(stream, st.last, 0));
  Graphs& g = st.graphs[direction];
  auto known = graphable ? g.execs.find(*key) : g.execs.end();
  if (known != g.execs.end() && known->second == nullptr) {  // its capture failed
    launches(stream);
  } else if (known != g.execs.end()) {
    FUSEDOPS_CUDA_CHECK(cudaGraphLaunch(known->second, stream));
    ++g.replayed;
  } else if (graphable && g.execs.size() < kMaxGraphs && g.seen.count(*key) != 0) {
    // This call's outputs, computed on the capture stream.
    FUSEDOPS_CUDA_CHECK(cudaEventRecord(st.fork, stream));
    FUSEDOPS_CUDA_CHECK(cudaStreamWaitEvent(st.capture, st.fork, 0));
    {
      CurrentStream on(st.capture, device);
      launches(st.capture);
    }
    FUSEDOPS_CUDA_CHECK(cudaEventRecord(st.join, st.capture));
    FUSEDOPS_CUDA_CHECK(cudaStreamWaitEvent(stream, st.join, 0));
    // The same launches, recorded.
    // The same launches, recorded. A capture that fails (an API call the capture does not allow) leaves this key
    // eager for good: the outputs are already computed.
    cudaGraph_t graph = nullptr;
    cudaGraphExec_t exec = nullptr;
    FUSEDOPS_CUDA_CHECK(cudaStreamBeginCapture(st.capture, cudaStreamCaptureModeThreadLocal));
    bool recorded = true;
    try {
      CurrentStream on(st.capture, device);
      launches(st.capture);
    } catch (const std::exception&) {
      recorded = false;
    }
    const cudaError_t ended = cudaStreamEndCapture(st.capture, &graph);
    if (recorded && ended == cudaSuccess && graph != nullptr) recorded = cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess;
    if (graph != nullptr) cudaGraphDestroy(graph);
    if (!recorded) {
      (void)cudaGetLastError();  // not sticky: the failed capture's error is not the next call's
      exec = nullptr;
    }
    g.execs.emplace(*key, exec);
    g.seen.erase(*key);
    g.captured += recorded;
  } else {
    if (graphable && g.execs.size() < kMaxGraphs) {
      if (g.seen.size() >= kMaxSeen) g.seen.clear();
      g.seen.insert(*key);
    }
    launches(stream);
  }
  FUSEDOPS_CUDA_CHECK(cudaEventRecord(st.last, stream));
}

// Operand layouts ATen's GEMMs take as they are (no copy, hence no allocation inside a graph's launches).
bool gemm_ready(const Tensor& t) {
  return t.dim() == 2 && ((t.strides()[1] == 1 && t.strides()[0] >= std::max<int64_t>(1, t.sizes()[1])) ||
                          (t.strides()[0] == 1 && t.strides()[1] >= std::max<int64_t>(1, t.sizes()[0])));
}

template <typename scalar_t>
void launch_concat(const Launch& l, cudaStream_t stream, const Tensor& old_h, const Tensor& input, Tensor& X,
                   int64_t B, int64_t S, int64_t F) {
  View2d<scalar_t> x{nullptr, 0, 0};
  if (F > 0) x = view2d<scalar_t>(input);
  lltm_concat_kernel<scalar_t><<<l.grid, l.block, 0, stream>>>(view2d<scalar_t>(old_h), x,
                                                               static_cast<scalar_t*>(X.mutable_data_ptr()), B, S, F);
  FUSEDOPS_CUDA_CHECK(cudaGetLastError());
}

void check_step_args(const Tensor& input, const Tensor& weights, const Tensor& bias, const Tensor& old_h,
                     const Tensor& old_cell) {
  cuda::check_cuda_tensor(old_h, "_lltm_step", "old_h");
  lltm::check_2d(old_h, "_lltm_step", "old_h", old_h);
  lltm::check_2d(input, "_lltm_step", "input", old_h);
  lltm::check_2d(weights, "_lltm_step", "weights", old_h);
  lltm::check_2d(old_cell, "_lltm_step", "old_cell", old_h);
  FUSEDOPS_CHECK(bias.scalar_type() == old_h.scalar_type() && lltm::same_device(bias, old_h),
                 "_lltm_step: bias must have the dtype and device of old_h");
  const int64_t B = old_h.sizes()[0], S = old_h.sizes()[1], F = input.sizes()[1];
  FUSEDOPS_CHECK(input.sizes()[0] == B && old_cell.sizes()[0] == B && old_cell.sizes()[1] == S &&
                     weights.sizes()[0] == 3 * S && weights.sizes()[1] == S + F,
                 "_lltm_step: the shapes of input (B, F), weights (3S, S+F), old_h and old_cell (B, S) do not fit");
  FUSEDOPS_CHECK(bias.numel() == 3 * S && (bias.dim() == 1 || (bias.dim() == 2 && bias.sizes()[0] == 1)),
                 "_lltm_step: bias must have shape (3S,) or (1, 3S)");
}

// Forward: X = cat([old_h, input], 1), gates = addmm(bias, X, weights.t()), the cell. Returns
// (new_h, new_cell, X, gates); the backward takes X and gates back. blas_state: see "CUDA graphs" above (-1: no graph).
std::tuple<Tensor, Tensor, Tensor, Tensor> lltm_step_cuda(Tensor input, Tensor weights, Tensor bias, Tensor old_h,
                                                          Tensor old_cell, int64_t blas_state) {
  check_step_args(input, weights, bias, old_h, old_cell);
  const int64_t B = old_h.sizes()[0], S = old_h.sizes()[1], F = input.sizes()[1];
  const int32_t device = old_h.get_device_index();
  cuda::DeviceGuardIfNeeded guard(device);
  Tensor X = lltm::empty_2d(old_h, B, S + F);
  Tensor gates = lltm::empty_2d(old_h, B, 3 * S);
  Tensor new_h = lltm::empty_2d(old_h, B, S);
  Tensor new_cell = lltm::empty_2d(old_h, B, S);
  if (B == 0) return {new_h, new_cell, X, gates};
  // The bias as 1-D (a view, as bias.reshape(-1) gives): addmm can then use cuBLASLt's bias epilogue.
  const Tensor bias_1d = restride(bias, {3 * S}, {bias.strides()[bias.dim() - 1]});
  const Tensor weights_t = transposed(weights);
  cudaStream_t stream = cuda::current_stream(device);
  std::optional<Key> key;
  if (blas_state >= 0 && gemm_ready(weights) && bias_1d.strides()[0] == 1) {
    key = KeyBuilder().add(blas_state).add(reinterpret_cast<int64_t>(stream)).add(static_cast<int64_t>(old_h.scalar_type()))
              .add(input).add(weights).add(bias).add(old_h).add(old_cell).add(X).add(gates).add(new_h).add(new_cell)
              .done();
  }
  const Launch concat = S + F > 0 ? launch_for(B, S + F, device) : Launch{};
  const Launch cell = S > 0 ? launch_for(B, S, device) : Launch{};
  run_step(0, key ? &*key : nullptr, device, stream, false, [&](cudaStream_t s) {
    THO_DISPATCH_V2(
        old_h.scalar_type(), "_lltm_step", AT_WRAP([&] {
          if (S + F > 0) launch_concat<scalar_t>(concat, s, old_h, input, X, B, S, F);
          addmm_out(gates, bias_1d, X, weights_t);
          if (S > 0) launch_forward<scalar_t>(cell, s, gates, old_cell, new_h, new_cell, B, S);
        }),
        AT_FLOATING_TYPES, ScalarType::Half, ScalarType::BFloat16);
  });
  return {new_h, new_cell, X, gates};
}

// The backward's launches on stream s; st (the overlap's side stream and events) is null without the overlap.
struct BackwardLaunch {
  const std::optional<Tensor>& grad_h;
  const std::optional<Tensor>& grad_cell;
  const Tensor& gates;
  const Tensor& new_cell;
  const Tensor& X;
  const Tensor& weights;
  Tensor& d_gates;
  Tensor& d_old_cell;
  Tensor& d_X;
  Tensor& d_weights;
  Tensor& d_bias;
  Tensor& partials;
  const Launch& cell;
  int64_t B, S;
  bool need_x, need_weights, need_bias;
  DeviceState* st;
  int32_t device;
};

template <typename scalar_t>
void launch_step_backward(const BackwardLaunch& b, cudaStream_t s) {
  using acc_t = opmath_t<scalar_t>;
  View2d<scalar_t> dh{nullptr, 0, 0};
  View2d<scalar_t> dc{nullptr, 0, 0};
  if (b.grad_h.has_value()) dh = view2d<scalar_t>(*b.grad_h);
  if (b.grad_cell.has_value()) dc = view2d<scalar_t>(*b.grad_cell);
  acc_t* part = b.need_bias ? static_cast<acc_t*>(b.partials.mutable_data_ptr()) : nullptr;
  lltm_step_backward_kernel<scalar_t><<<b.cell.grid, b.cell.block, 0, s>>>(
      dh, dc, view2d<scalar_t>(b.gates), view2d<scalar_t>(b.new_cell),
      static_cast<scalar_t*>(b.d_gates.mutable_data_ptr()), static_cast<scalar_t*>(b.d_old_cell.mutable_data_ptr()),
      part, b.B, b.S);
  FUSEDOPS_CUDA_CHECK(cudaGetLastError());
  if (b.st != nullptr) {
    FUSEDOPS_CUDA_CHECK(cudaEventRecord(b.st->fork, s));
    FUSEDOPS_CUDA_CHECK(cudaStreamWaitEvent(b.st->side, b.st->fork, 0));
    {
      CurrentStream on_side(b.st->side, b.device);
      mm_out(b.d_weights, transposed(b.d_gates), b.X);
    }
    FUSEDOPS_CUDA_CHECK(cudaEventRecord(b.st->join, b.st->side));
  } else if (b.need_weights) {
    mm_out(b.d_weights, transposed(b.d_gates), b.X);
  }
  if (b.need_x) mm_out(b.d_X, b.d_gates, b.weights);
  if (b.need_bias) {
    const int64_t n = 3 * b.S;
    const unsigned blocks = static_cast<unsigned>(std::min<int64_t>((n + 255) / 256, 1024));
    lltm_bias_sums<scalar_t><<<blocks, 256, 0, s>>>(part, static_cast<scalar_t*>(b.d_bias.mutable_data_ptr()),
                                                    static_cast<int64_t>(b.cell.grid.y), n);
    FUSEDOPS_CUDA_CHECK(cudaGetLastError());
  }
  if (b.st != nullptr) FUSEDOPS_CUDA_CHECK(cudaStreamWaitEvent(s, b.st->join, 0));
}


// The weights' gradient on a second stream beside the input's at large sizes: two GEMMs side by side fill the GPU
// better than one after the other. FUSEDOPS_LLTM_OVERLAP=0 turns it off, =1 uses it at every size (the tests'
// switch); by default from kOverlapFlops (2 * B * (S+F) * 3S).
constexpr double kOverlapFlops = 4e9;

// Backward: the cell's backward with the bias gradient (lltm_step_backward_kernel, lltm_bias_sums), then
// d_X = d_gates @ weights (the caller splits it into d_old_h and d_input) and d_weights = d_gates.t() @ X, each only
// when asked for (an empty tensor stands for one not asked for). Returns (d_X, d_weights, d_bias, d_old_cell);
// d_bias has shape (1, 3S) when bias_2d.
std::tuple<Tensor, Tensor, Tensor, Tensor> lltm_step_backward_cuda(std::optional<Tensor> grad_h,
                                                                   std::optional<Tensor> grad_cell, Tensor X,
                                                                   Tensor weights, Tensor gates, Tensor new_cell,
                                                                   bool need_x, bool need_weights, bool need_bias,
                                                                   bool bias_2d, int64_t blas_state) {
  cuda::check_cuda_tensor(gates, "_lltm_step_backward", "gates");
  const auto dims = lltm::check_cell_args(gates, new_cell, "_lltm_step_backward", "new_cell");
  const int64_t B = dims[0], S = dims[1];
  lltm::check_grad(grad_h, gates, "_lltm_step_backward", "grad_h", B, S);
  lltm::check_grad(grad_cell, gates, "_lltm_step_backward", "grad_cell", B, S);
  lltm::check_2d(X, "_lltm_step_backward", "X", gates);
  lltm::check_2d(weights, "_lltm_step_backward", "weights", gates);
  const int64_t W = X.sizes()[1];
  FUSEDOPS_CHECK(X.sizes()[0] == B && weights.sizes()[0] == 3 * S && weights.sizes()[1] == W,
                 "_lltm_step_backward: X (B, S+F) and weights (3S, S+F) do not fit gates (B, 3S)");
  const int32_t device = gates.get_device_index();
  cuda::DeviceGuardIfNeeded guard(device);
  Tensor d_gates = lltm::empty_2d(gates, B, 3 * S);
  Tensor d_old_cell = lltm::empty_2d(new_cell, B, S);
  Tensor d_X = lltm::empty_2d(gates, need_x ? B : 0, need_x ? W : 0);
  Tensor d_weights = lltm::empty_2d(gates, need_weights ? 3 * S : 0, need_weights ? W : 0);
  Tensor d_bias = lltm::empty_2d(gates, need_bias ? 1 : 0, need_bias ? 3 * S : 0);
  if (need_bias && !bias_2d) d_bias = restride(d_bias, {3 * S}, {1});
  Launch cell = B > 0 && S > 0 ? launch_for(B, S, device) : Launch{};
  if (need_bias) {
    // At least kBiasRows rows a thread: lltm_bias_sums adds one partial row per row block, serially per column (at
    // B=1024 S=1024, 528 row blocks made it 62 us of a 740 us step; 128 blocks of 8 rows each keep the cell's pass
    // at the same speed).
    constexpr int64_t kBiasRows = 8;
    const int64_t rows_per_block = static_cast<int64_t>(cell.block.y) * kBiasRows;
    cell.grid.y = static_cast<unsigned>(
        std::max<int64_t>(1, std::min<int64_t>(cell.grid.y, (B + rows_per_block - 1) / rows_per_block)));
  }
  const int64_t row_blocks = static_cast<int64_t>(cell.grid.y);
  Tensor partials = empty_opmath(gates, need_bias && B > 0 && S > 0 ? row_blocks : 0, 3 * S);
  if (need_bias && (B == 0 || S == 0)) {
    TORCH_ERROR_CODE_CHECK(aoti_torch_zero_(d_bias.get()));
  }
  if (B == 0 || S == 0) {  // d_X and d_weights are zero: the products of empty operands, as mm gives
    if (need_x) mm_out(d_X, d_gates, weights);
    if (need_weights) mm_out(d_weights, transposed(d_gates), X);
    return {d_X, d_weights, d_bias, d_old_cell};
  }
  cudaStream_t stream = cuda::current_stream(device);
  const double flops = 2.0 * static_cast<double>(B) * static_cast<double>(W) * static_cast<double>(3 * S);
  static const int overlap_mode = env_switch("FUSEDOPS_LLTM_OVERLAP");
  const bool overlap =
      need_x && need_weights && (overlap_mode == 1 || (overlap_mode < 0 && flops >= kOverlapFlops));
  std::optional<Key> key;
  if (blas_state >= 0 && gemm_ready(weights) && gemm_ready(X)) {
    key = KeyBuilder().add(blas_state).add(reinterpret_cast<int64_t>(stream)).add(static_cast<int64_t>(gates.scalar_type()))
              .add(need_x).add(need_weights).add(need_bias).add(overlap).add(grad_h).add(grad_cell).add(X).add(weights)
              .add(gates).add(new_cell).add(d_gates).add(d_old_cell).add(d_X).add(d_weights).add(d_bias).add(partials)
              .done();
  }
  DeviceState* st = overlap ? &device_state(device) : nullptr;
  const BackwardLaunch b{grad_h, grad_cell, gates, new_cell, X, weights, d_gates, d_old_cell, d_X, d_weights, d_bias,
                         partials, cell, B, S, need_x, need_weights, need_bias, st, device};
  run_step(1, key ? &*key : nullptr, device, stream, overlap, [&](cudaStream_t s) {
    THO_DISPATCH_V2(gates.scalar_type(), "_lltm_step_backward", AT_WRAP([&] { launch_step_backward<scalar_t>(b, s); }),
                    AT_FLOATING_TYPES, ScalarType::Half, ScalarType::BFloat16);
  });
  return {d_X, d_weights, d_bias, d_old_cell};
}

// Counters of the graph cache (tests, benchmarks): which = 0/1 forward/backward graphs captured, 2/3 replays.
int64_t lltm_graph_stats(int64_t device, int64_t which) {
  FUSEDOPS_CHECK(which >= 0 && which < 4, "_lltm_graph_stats: which must be 0..3, got ", which);
  cuda::DeviceGuardIfNeeded guard(static_cast<int32_t>(device));  // a first call creates the device's streams
  DeviceState& st = device_state(static_cast<int32_t>(device));
  std::lock_guard<std::mutex> lock(st.mutex);
  const Graphs& g = st.graphs[which % 2];
  return which < 2 ? g.captured : g.replayed;
}

}  // namespace
}  // namespace fusedops

// CUDA only (the CPU step stays in Python): defined here, so the ops exist where this library loads.
STABLE_TORCH_LIBRARY_FRAGMENT(fusedops, m) {
  m.def(
      "_lltm_step(Tensor input, Tensor weights, Tensor bias, Tensor old_h, Tensor old_cell, int blas_state) "
      "-> (Tensor new_h, Tensor new_cell, Tensor X, Tensor gates)");
  m.def(
      "_lltm_step_backward(Tensor? grad_h, Tensor? grad_cell, Tensor X, Tensor weights, Tensor gates, "
      "Tensor new_cell, bool need_x, bool need_weights, bool need_bias, bool bias_2d, int blas_state) "
      "-> (Tensor d_X, Tensor d_weights, Tensor d_bias, Tensor d_old_cell)");
  m.def("_lltm_graph_stats(int device, int which) -> int");
}

STABLE_TORCH_LIBRARY_IMPL(fusedops, CUDA, m) {
  m.impl("_lltm_step", TORCH_BOX(&fusedops::lltm_step_cuda));
  m.impl("_lltm_step_backward", TORCH_BOX(&fusedops::lltm_step_backward_cuda));
  m.impl("lltm_cell", TORCH_BOX(&fusedops::lltm_cell_cuda));
  m.impl("lltm_cell_backward", TORCH_BOX(&fusedops::lltm_cell_backward_cuda));
}

// No tensor argument to dispatch on.
STABLE_TORCH_LIBRARY_IMPL(fusedops, CompositeExplicitAutograd, m) {
  m.impl("_lltm_graph_stats", TORCH_BOX(&fusedops::lltm_graph_stats));
}
