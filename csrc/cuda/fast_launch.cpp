// The Python module of the CUDA library: fusedops._C_cuda.round_ste(x) and
// bias_act(x, b, dim, act, alpha, gain, clamp, impl) are the eager fast path
// (see fast_launch.h for why it exists). Each reads the tensors' attributes,
// decides whether the call is one it takes, allocates the output with
// torch.empty_like and launches the kernel, all in one C call; it returns the
// output, or None for every call it does not take (the Python op then runs its
// general path, which checks everything and raises). It was Python code that
// passed raw pointers down: the same reads in C cost the host about a third
// less, and at 2^20 elements the host's time is the call's time.
//
// The limited C API (abi3) and no torch Python API: the torch objects it needs
// (the tensor types, empty_like, the dtypes, the mode and tracer checks) and
// the activation table are handed over once by configure()
// (package/fusedops/_fast.py), so the rules stay written in Python.
#include <Python.h>

#include <cstdint>

#include "fast_launch.h"

namespace {

constexpr int kMaxChecks = 8;
constexpr int kMaxActs = 16;
constexpr int kNumDtypes = 4;

struct Activation {
  PyObject* name;     // interned
  int64_t code;       // the kernel's code
  bool takes_alpha;   // lrelu's slope; the kernel's alpha of the others is fixed
  double alpha;       // the kernel's alpha for alpha=None (and always, where !takes_alpha)
  double gain;        // the default gain
};

// What configure() was given; strong references, held for the life of the process.
struct Config {
  bool ready = false;
  PyObject* tensor_types[2] = {nullptr, nullptr};
  PyObject* empty_like = nullptr;
  PyObject* grad_enabled = nullptr;
  PyObject* not_plain[kMaxChecks] = {};  // each returns something true while the op must be seen
  int num_not_plain = 0;
  PyObject* dtypes[kNumDtypes] = {};  // in the order of fast::DType
  Activation acts[kMaxActs] = {};
  int num_acts = 0;
};
Config config;

struct Names {
  PyObject *is_cuda, *is_contiguous, *dtype, *get_device, *requires_grad, *data_ptr, *shape, *cuda;
};
Names names;

// A failed read of a tensor (a sparse tensor has no is_contiguous) only means the call is not one for the fast path:
// the error is cleared and the general path runs, and says what is wrong. A BaseException that is not an Exception
// (KeyboardInterrupt) is kept: -1.
int not_taken_or_error() {
  if (PyErr_Occurred() != nullptr && !PyErr_ExceptionMatches(PyExc_Exception)) return -1;
  PyErr_Clear();
  return 0;
}

PyObject* none_or_error(int r) {
  if (r < 0) return nullptr;
  Py_RETURN_NONE;
}

PyObject* not_taken() { return none_or_error(not_taken_or_error()); }

int attribute_is_true(PyObject* object, PyObject* name) {
  PyObject* value = PyObject_GetAttr(object, name);
  if (value == nullptr) return not_taken_or_error();
  const int result = value == Py_True;
  Py_DECREF(value);
  return result;
}

int method_is_true(PyObject* object, PyObject* name) {
  PyObject* value = PyObject_CallMethodObjArgs(object, name, nullptr);
  if (value == nullptr) return not_taken_or_error();
  const int result = value == Py_True;
  Py_DECREF(value);
  return result;
}

int method_long(PyObject* object, PyObject* name, long long* out) {
  PyObject* value = PyObject_CallMethodObjArgs(object, name, nullptr);
  if (value == nullptr) return not_taken_or_error();
  *out = PyLong_AsLongLong(value);
  Py_DECREF(value);
  if (*out == -1 && PyErr_Occurred()) return not_taken_or_error();
  return 1;
}

int data_ptr(PyObject* tensor, void** out) {
  PyObject* value = PyObject_CallMethodObjArgs(tensor, names.data_ptr, nullptr);
  if (value == nullptr) return not_taken_or_error();
  *out = PyLong_AsVoidPtr(value);
  Py_DECREF(value);
  if (PyErr_Occurred()) return not_taken_or_error();
  return 1;
}

struct Input {
  long long device = -1;
  int dtype = -1;
};

// 1 for a plain tensor (or parameter) that is contiguous on a CUDA device with a floating dtype, with its device
// index and dtype code.
int cuda_input(PyObject* x, Input* in) {
  PyObject* type = reinterpret_cast<PyObject*>(Py_TYPE(x));
  if (type != config.tensor_types[0] && type != config.tensor_types[1]) return 0;
  int r = attribute_is_true(x, names.is_cuda);
  if (r <= 0) return r;
  if ((r = method_is_true(x, names.is_contiguous)) <= 0) return r;
  PyObject* dtype = PyObject_GetAttr(x, names.dtype);
  if (dtype == nullptr) return not_taken_or_error();
  Py_DECREF(dtype);  // dtypes are module-level singletons: config.dtypes holds them
  for (int i = 0; i < kNumDtypes; ++i) {
    if (dtype == config.dtypes[i]) in->dtype = i;
  }
  if (in->dtype < 0) return 0;
  return method_long(x, names.get_device, &in->device);
}

// 1 when neither x nor b (nullptr for none) needs autograd, and nothing (a transform, a mode, the profiler, the JIT
// tracer) has to see the op.
int plain_call(PyObject* x, PyObject* b) {
  int needs_grad = attribute_is_true(x, names.requires_grad);
  if (needs_grad < 0) return -1;
  if (needs_grad == 0 && b != nullptr && (needs_grad = attribute_is_true(b, names.requires_grad)) < 0) return -1;
  PyObject* checks[kMaxChecks + 1];
  int count = 0;
  if (needs_grad) checks[count++] = config.grad_enabled;
  for (int i = 0; i < config.num_not_plain; ++i) checks[count++] = config.not_plain[i];
  for (int i = 0; i < count; ++i) {
    PyObject* value = PyObject_CallNoArgs(checks[i]);
    if (value == nullptr) return -1;
    const int truth = PyObject_IsTrue(value);
    Py_DECREF(value);
    if (truth != 0) return truth < 0 ? -1 : 0;
  }
  return 1;
}

// The product of the sizes of shape[from:], or -1 where one is not a non-negative int.
long long product(PyObject* shape, Py_ssize_t from) {
  long long n = 1;
  const Py_ssize_t nd = PyTuple_Size(shape);
  for (Py_ssize_t d = from; d < nd; ++d) {
    const long long size = PyLong_AsLongLong(PyTuple_GetItem(shape, d));
    if (size < 0) return -1;
    n *= size;
  }
  return n;
}

PyObject* shape_of(PyObject* tensor) {
  PyObject* shape = PyObject_GetAttr(tensor, names.shape);
  if (shape != nullptr && !PyTuple_Check(shape)) Py_CLEAR(shape);
  return shape;
}

// out = empty_like(x), launched into by `launch`; the launch's error as a RuntimeError.
template <typename Launch>
PyObject* allocate_and_launch(PyObject* x, PyObject* b, Launch&& launch) {
  PyObject* out = PyObject_CallFunctionObjArgs(config.empty_like, x, nullptr);
  if (out == nullptr) return nullptr;
  void *px = nullptr, *pb = nullptr, *po = nullptr;
  if (data_ptr(x, &px) <= 0 || (b != nullptr && data_ptr(b, &pb) <= 0) || data_ptr(out, &po) <= 0) {
    Py_DECREF(out);
    if (!PyErr_Occurred()) PyErr_SetString(PyExc_RuntimeError, "fusedops: a tensor's data_ptr() failed");
    return nullptr;
  }
  const fusedops::fast::Error error = launch(px, pb, po);
  if (error != nullptr) {
    Py_DECREF(out);
    PyErr_SetString(PyExc_RuntimeError, error);
    return nullptr;
  }
  return out;
}

bool require_config() {
  if (config.ready) return true;
  PyErr_SetString(PyExc_RuntimeError, "fusedops._C_cuda: configure() has not been called");
  return false;
}

// round_ste(x) -> the rounded tensor, or None.
PyObject* round_ste(PyObject*, PyObject* x) {
  if (!require_config()) return nullptr;
  Input in;
  int r = cuda_input(x, &in);
  if (r > 0) r = plain_call(x, nullptr);
  if (r <= 0) return none_or_error(r);
  PyObject* shape = shape_of(x);
  if (shape == nullptr) return not_taken();
  const long long n = product(shape, 0);
  Py_DECREF(shape);
  if (n < 0) return not_taken();
  return allocate_and_launch(x, nullptr, [&](void* px, void*, void* po) {
    return fusedops::fast::round_ste(px, po, n, in.dtype, static_cast<int>(in.device));
  });
}

const Activation* find_activation(PyObject* act) {
  for (int i = 0; i < config.num_acts; ++i) {
    if (config.acts[i].name == act) return &config.acts[i];
  }
  if (!PyUnicode_Check(act)) return nullptr;
  for (int i = 0; i < config.num_acts; ++i) {
    if (PyUnicode_Compare(act, config.acts[i].name) == 0) return &config.acts[i];
  }
  return nullptr;
}

// An int or float (not a bool, not a subclass: the general path converts those) or None (`fallback`).
bool number_or_none(PyObject* value, double fallback, double* out) {
  if (value == Py_None) {
    *out = fallback;
    return true;
  }
  if (PyFloat_CheckExact(value)) {
    *out = PyFloat_AsDouble(value);
    return true;
  }
  if (!PyLong_CheckExact(value)) return false;
  *out = PyLong_AsDouble(value);
  if (*out == -1.0 && PyErr_Occurred()) {  // an int beyond a double: the general path raises
    PyErr_Clear();
    return false;
  }
  return true;
}

// The channel stride and size of b along dim of a contiguous x, or false where dim or b's shape do not fit.
bool channel_map(PyObject* x_shape, PyObject* b, PyObject* dim_object, long long* stride, long long* size) {
  if (!PyLong_CheckExact(dim_object)) return false;
  const long long dim = PyLong_AsLongLong(dim_object);
  const Py_ssize_t nd = PyTuple_Size(x_shape);
  if (PyErr_Occurred() != nullptr || dim < -nd || dim >= nd) return false;
  PyObject* b_shape = shape_of(b);
  if (b_shape == nullptr) return false;
  const Py_ssize_t d = static_cast<Py_ssize_t>(dim < 0 ? dim + nd : dim);
  *size = PyLong_AsLongLong(PyTuple_GetItem(x_shape, d));
  *stride = product(x_shape, d + 1);
  const bool fits = PyTuple_Size(b_shape) == 1 && PyLong_AsLongLong(PyTuple_GetItem(b_shape, 0)) == *size;
  Py_DECREF(b_shape);
  return fits && *stride >= 0 && PyErr_Occurred() == nullptr;
}

// bias_act(x, b, dim, act, alpha, gain, clamp, impl) -> the output, or None.
PyObject* bias_act(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs != 8) {
    PyErr_Format(PyExc_TypeError, "fusedops._C_cuda.bias_act takes 8 arguments, got %zd", nargs);
    return nullptr;
  }
  if (!require_config()) return nullptr;
  PyObject* x = args[0];
  PyObject* b = args[1] == Py_None ? nullptr : args[1];
  PyObject* impl = args[7];
  if (impl != names.cuda && (!PyUnicode_Check(impl) || PyUnicode_Compare(impl, names.cuda) != 0)) Py_RETURN_NONE;
  const Activation* act = find_activation(args[3]);
  double alpha = 0, gain = 0, clamp = 0;
  if (act == nullptr || !number_or_none(args[4], act->alpha, &alpha) || !number_or_none(args[5], act->gain, &gain) ||
      !number_or_none(args[6], -1.0, &clamp) || (args[6] != Py_None && !(clamp >= 0))) {
    Py_RETURN_NONE;
  }
  if (!act->takes_alpha) alpha = act->alpha;
  Input in, bias;
  int r = cuda_input(x, &in);
  if (r > 0 && b != nullptr) {
    r = cuda_input(b, &bias);
    if (r > 0 && (bias.device != in.device || bias.dtype != in.dtype)) r = 0;
  }
  if (r > 0) r = plain_call(x, b);
  if (r <= 0) return none_or_error(r);
  PyObject* x_shape = shape_of(x);
  if (x_shape == nullptr) return not_taken();
  const long long n = product(x_shape, 0);
  long long ch_stride = 1, ch_size = 1;
  const bool fits = n >= 0 && (b == nullptr || channel_map(x_shape, b, args[2], &ch_stride, &ch_size));
  Py_DECREF(x_shape);
  if (!fits) return not_taken();
  return allocate_and_launch(x, b, [&](void* px, void* pb, void* po) {
    return fusedops::fast::bias_act(px, pb, po, n, ch_stride, ch_size, in.dtype, act->code, alpha, gain, clamp,
                                    static_cast<int>(in.device));
  });
}

// Strong references to every item of `items`, which must be a tuple of at most `limit`; -1 on error.
int hold_items(PyObject* items, PyObject** into, int limit, const char* what) {
  if (!PyTuple_Check(items) || PyTuple_Size(items) > limit) {
    PyErr_Format(PyExc_TypeError, "fusedops._C_cuda.configure: %s must be a tuple of at most %d", what, limit);
    return -1;
  }
  const int count = static_cast<int>(PyTuple_Size(items));
  for (int i = 0; i < count; ++i) {
    into[i] = PyTuple_GetItem(items, i);
    Py_INCREF(into[i]);
  }
  return count;
}

// configure(tensor_types, empty_like, grad_enabled, not_plain, dtypes, activations); activations: a tuple of
// (name, code, takes_alpha, alpha, gain). Once per process: later calls are ignored (the objects do not change).
PyObject* configure(PyObject*, PyObject* args) {
  if (config.ready) Py_RETURN_NONE;
  PyObject *types, *empty_like, *grad_enabled, *not_plain, *dtypes, *acts;
  if (!PyArg_ParseTuple(args, "O!OOO!O!O!:configure", &PyTuple_Type, &types, &empty_like, &grad_enabled,
                        &PyTuple_Type, &not_plain, &PyTuple_Type, &dtypes, &PyTuple_Type, &acts)) {
    return nullptr;
  }
  if (PyTuple_Size(types) != 2 || PyTuple_Size(dtypes) != kNumDtypes || PyTuple_Size(acts) > kMaxActs) {
    PyErr_SetString(PyExc_ValueError, "fusedops._C_cuda.configure: 2 tensor types, 4 dtypes, at most 16 activations");
    return nullptr;
  }
  Activation parsed[kMaxActs];
  const int num_acts = static_cast<int>(PyTuple_Size(acts));
  for (int i = 0; i < num_acts; ++i) {
    PyObject* name;
    long long code;
    int takes_alpha;
    Activation& a = parsed[i];
    if (!PyArg_ParseTuple(PyTuple_GetItem(acts, i), "ULpdd", &name, &code, &takes_alpha, &a.alpha, &a.gain)) {
      for (int j = 0; j < i; ++j) Py_DECREF(parsed[j].name);
      return nullptr;
    }
    Py_INCREF(name);
    PyUnicode_InternInPlace(&name);
    a.name = name;
    a.code = code;
    a.takes_alpha = takes_alpha != 0;
  }
  hold_items(types, config.tensor_types, 2, "tensor_types");
  hold_items(dtypes, config.dtypes, kNumDtypes, "dtypes");
  if ((config.num_not_plain = hold_items(not_plain, config.not_plain, kMaxChecks, "not_plain")) < 0) return nullptr;
  Py_INCREF(empty_like);
  Py_INCREF(grad_enabled);
  config.empty_like = empty_like;
  config.grad_enabled = grad_enabled;
  for (int i = 0; i < num_acts; ++i) config.acts[i] = parsed[i];
  config.num_acts = num_acts;
  config.ready = true;
  Py_RETURN_NONE;
}

PyObject* launch_api(PyObject*, PyObject*) { return PyUnicode_FromString(fusedops::fast::launch_api()); }

PyMethodDef methods[] = {
    {"configure", configure, METH_VARARGS,
     "configure(tensor_types, empty_like, grad_enabled, not_plain, dtypes, activations): once, before any call"},
    {"launch_api", launch_api, METH_NOARGS, "launch_api() -> 'cuLaunchKernel' or 'cudaLaunchKernel'"},
    {"round_ste", round_ste, METH_O, "round_ste(x) -> round(x) on torch's current stream, or None if not taken"},
    {"bias_act", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)(void)>(&bias_act)), METH_FASTCALL,
     "bias_act(x, b, dim, act, alpha, gain, clamp, impl) -> the output, or None if not taken"},
    {nullptr, nullptr, 0, nullptr},
};

PyModuleDef module_def = {PyModuleDef_HEAD_INIT, "_C_cuda", "fusedops' CUDA kernels (eager fast path)", -1, methods};

}  // namespace

PyMODINIT_FUNC PyInit__C_cuda(void) {
  PyObject** slots[] = {&names.is_cuda,       &names.is_contiguous, &names.dtype, &names.get_device,
                        &names.requires_grad, &names.data_ptr,      &names.shape, &names.cuda};
  const char* spellings[] = {"is_cuda", "is_contiguous", "dtype", "get_device", "requires_grad", "data_ptr", "shape",
                             "cuda"};
  for (size_t i = 0; i < sizeof(slots) / sizeof(slots[0]); ++i) {
    if ((*slots[i] = PyUnicode_InternFromString(spellings[i])) == nullptr) return nullptr;
  }
  return PyModule_Create(&module_def);
}
