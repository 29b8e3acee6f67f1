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
#ifdef Py_GIL_DISABLED
  // A free-threaded CPython has no limited API, so setup.py builds a wheel of its own for it (cp313t). The lines
  // above STABLE_TORCH_LIBRARY stay as they are: its registration records __LINE__, so a line added there changes
  // every GIL wheel's bytes. The stub has no state, so it does not
  // need the GIL; without this the interpreter would turn the GIL back on as it imports the module.
  PyObject* module = PyModule_Create(&module_def);
  if (module != nullptr && PyUnstable_Module_SetGIL(module, Py_MOD_GIL_NOT_USED) < 0) {
    Py_DECREF(module);
    return nullptr;
  }
  return module;
#else
  return PyModule_Create(&module_def);
#endif
}
