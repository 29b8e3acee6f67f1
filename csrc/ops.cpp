// The fusedops operator namespace and the Python module stub. Each op defines
// its schema next to its CPU kernel (csrc/cpu/<op>.cpp) in a
// STABLE_TORCH_LIBRARY_FRAGMENT, so ops can be added without touching this file.
//
// The module has no Python API of its own: importing it loads the library, and
// its static initialisers register the operators with the dispatcher. Only the
// limited C API is used, so the binary is abi3 (one wheel for CPython >= 3.10).
#include <Python.h>

#include "common.h"

STABLE_TORCH_LIBRARY(fusedops, m) {}

extern "C" PyObject* PyInit__C(void) {
  static PyModuleDef module_def = {PyModuleDef_HEAD_INIT, "_C", nullptr, -1, nullptr};
  return PyModule_Create(&module_def);
}
