// The Python module of the CUDA library: fusedops._C_cuda's round_ste and
// bias_act take the raw pointers and sizes of tensors the Python side checked
// and allocated (see fast_launch.h for why). METH_FASTCALL with positional
// integers and floats only: the limited C API (abi3) and no torch Python API.
#include <Python.h>

#include "fast_launch.h"

namespace {

bool expect_args(Py_ssize_t nargs, Py_ssize_t want, const char* name) {
  if (nargs == want) return true;
  PyErr_Format(PyExc_TypeError, "fusedops._C_cuda.%s takes %zd arguments, got %zd", name, want, nargs);
  return false;
}

// An address: a Python int, 0 for none.
void* address(PyObject* value) { return value == Py_None ? nullptr : PyLong_AsVoidPtr(value); }

PyObject* finish(fusedops::fast::Error error) {
  if (error != nullptr) {
    PyErr_SetString(PyExc_RuntimeError, error);
    return nullptr;
  }
  Py_RETURN_NONE;
}

// round_ste(in_ptr, out_ptr, n, dtype, device)
PyObject* round_ste(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (!expect_args(nargs, 5, "round_ste")) return nullptr;
  const void* in = address(args[0]);
  void* out = address(args[1]);
  const long long n = PyLong_AsLongLong(args[2]);
  const long dtype = PyLong_AsLong(args[3]);
  const long device = PyLong_AsLong(args[4]);
  if (PyErr_Occurred()) return nullptr;
  return finish(fusedops::fast::round_ste(in, out, n, static_cast<int>(dtype), static_cast<int>(device)));
}

// The product of sizes[from:], or -1 where sizes is not a tuple of ints.
long long product(PyObject* sizes, Py_ssize_t from) {
  long long n = 1;
  const Py_ssize_t nd = PyTuple_Size(sizes);
  for (Py_ssize_t d = from; d < nd; ++d) {
    const long long size = PyLong_AsLongLong(PyTuple_GetItem(sizes, d));
    if (size < 0) return -1;
    n *= size;
  }
  return n;
}

// bias_act(x_ptr, b_ptr or None, out_ptr, x_shape, dim, b_shape or None, dtype, act, alpha, gain, clamp, device)
// -> True when launched; False, before any launch, where dim or the bias's shape do not fit x's shape (the caller
// then takes the general path, which says why). x is contiguous: the channel stride is the product of the sizes
// after dim, computed here from the shape tuples (torch.Size is a tuple) instead of by more Python calls.
PyObject* bias_act(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (!expect_args(nargs, 12, "bias_act")) return nullptr;
  PyObject* x_shape = args[3];
  PyObject* b_shape = args[5];
  if (!PyTuple_Check(x_shape) || (b_shape != Py_None && !PyTuple_Check(b_shape))) {
    PyErr_SetString(PyExc_TypeError, "fusedops._C_cuda.bias_act: the shapes must be tuples");
    return nullptr;
  }
  const void* x = address(args[0]);
  const void* b = address(args[1]);
  void* out = address(args[2]);
  const long long dim = PyLong_AsLongLong(args[4]);
  const long dtype = PyLong_AsLong(args[6]);
  const long long act = PyLong_AsLongLong(args[7]);
  const double alpha = PyFloat_AsDouble(args[8]);
  const double gain = PyFloat_AsDouble(args[9]);
  const double clamp = PyFloat_AsDouble(args[10]);
  const long device = PyLong_AsLong(args[11]);
  const long long n = product(x_shape, 0);
  if (PyErr_Occurred()) return nullptr;
  long long ch_stride = 1, ch_size = 1;
  if (b_shape != Py_None) {
    const Py_ssize_t nd = PyTuple_Size(x_shape);
    if (dim < -nd || dim >= nd || PyTuple_Size(b_shape) != 1) Py_RETURN_FALSE;
    const Py_ssize_t d = static_cast<Py_ssize_t>(dim < 0 ? dim + nd : dim);
    ch_size = PyLong_AsLongLong(PyTuple_GetItem(x_shape, d));
    ch_stride = product(x_shape, d + 1);
    const long long b_size = PyLong_AsLongLong(PyTuple_GetItem(b_shape, 0));
    if (PyErr_Occurred()) return nullptr;
    if (b_size != ch_size) Py_RETURN_FALSE;
  }
  if (n < 0) {
    PyErr_SetString(PyExc_ValueError, "fusedops._C_cuda.bias_act: x_shape must hold sizes >= 0");
    return nullptr;
  }
  const fusedops::fast::Error error = fusedops::fast::bias_act(
      x, b, out, n, ch_stride, ch_size, static_cast<int>(dtype), act, alpha, gain, clamp, static_cast<int>(device));
  if (error != nullptr) {
    PyErr_SetString(PyExc_RuntimeError, error);
    return nullptr;
  }
  Py_RETURN_TRUE;
}

PyMethodDef methods[] = {
    {"round_ste", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)(void)>(&round_ste)), METH_FASTCALL,
     "round_ste(in_ptr, out_ptr, n, dtype, device): launch on torch's current stream"},
    {"bias_act", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)(void)>(&bias_act)), METH_FASTCALL,
     "bias_act(x_ptr, b_ptr, out_ptr, x_shape, dim, b_shape, dtype, act, alpha, gain, clamp, device) -> launched"},
    {nullptr, nullptr, 0, nullptr},
};

PyModuleDef module_def = {PyModuleDef_HEAD_INIT, "_C_cuda", "fusedops' CUDA kernels (eager fast path)", -1, methods};

}  // namespace

PyMODINIT_FUNC PyInit__C_cuda(void) { return PyModule_Create(&module_def); }
