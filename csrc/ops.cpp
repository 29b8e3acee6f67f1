// Operator schemas (the dispatcher's source of truth) and the Python module stub.
//
// The module has no Python API of its own: importing it loads the library, and
// its static initialisers register the operators with the dispatcher. Only the
// limited C API is used, so the binary is abi3 (one wheel for CPython >= 3.10).
#include <Python.h>

#include "common.h"

STABLE_TORCH_LIBRARY(fusedops, m) {
  m.def("round_ste(Tensor x) -> Tensor");
}

extern "C" PyObject* PyInit__C(void) {
  static PyModuleDef module_def = {PyModuleDef_HEAD_INIT, "_C", nullptr, -1, nullptr};
  return PyModule_Create(&module_def);
}
