"""The ``gil:<module>`` audit check (issue 48) on small real ELF modules compiled here: a module that does not
declare free-threading support gets a warning naming what to add, one that declares it (either way a CPython
module can) gets none, and nothing fails."""

from __future__ import annotations

import platform
import shutil
import subprocess
import zipfile
from pathlib import Path

import pytest

from ci.audit import gil, wheel_audit

# x86_64: the modules are built for this machine, and the run-time slots are read from x86_64 code.
pytestmark = pytest.mark.skipif(shutil.which("g++") is None or platform.machine() != "x86_64",
                                reason="needs g++ on x86_64")

# No Python.h: the module's CPython calls are declared here and left undefined, as in a real module (the interpreter
# defines them); the values are CPython's (Include/moduleobject.h).
_HEAD = """
extern "C" {
struct Slot { int slot; void* value; };
struct Def { char head[40]; const char* name; const char* doc; long size; void* methods; Slot* slots;
             void* traverse; void* clear; void* free; };
void* PyModule_Create2(Def*, int);
int PyUnstable_Module_SetGIL(void*, void*);
void* PyModuleDef_Init(Def*);
}
"""

SINGLE_PLAIN = _HEAD + """
static Def def_ = {{}, "plain", nullptr, -1, nullptr, nullptr, nullptr, nullptr, nullptr};
extern "C" __attribute__((visibility("default"))) void* PyInit_plain(void) { return PyModule_Create2(&def_, 1013); }
"""

SINGLE_DECLARED = _HEAD + """
static Def def_ = {{}, "declared", nullptr, -1, nullptr, nullptr, nullptr, nullptr, nullptr};
extern "C" __attribute__((visibility("default"))) void* PyInit_declared(void) {
  void* m = PyModule_Create2(&def_, 1013);
  if (m != nullptr) PyUnstable_Module_SetGIL(m, (void*)1);  // Py_MOD_GIL_NOT_USED
  return m;
}
"""


def _multi(name: str, gil_slot: bool) -> str:
    extra = "{4, (void*)1}, " if gil_slot else ""  # {Py_mod_gil, Py_MOD_GIL_NOT_USED}
    return _HEAD + f"""
static int exec_(void*) {{ return 0; }}
static Slot slots_[] = {{{{2, (void*)exec_}}, {extra}{{0, nullptr}}}};  // Py_mod_exec
static Def def_ = {{{{}}, "{name}", nullptr, 0, nullptr, slots_, nullptr, nullptr, nullptr}};
extern "C" __attribute__((visibility("default"))) void* PyInit_{name}(void) {{ return PyModuleDef_Init(&def_); }}
"""


def _runtime(name: str, gil_slot: bool) -> str:
    """pybind11 3's way: the slots are a function-local static array that PyInit_ fills once, at run time."""
    gil = "slots_[1].slot = 4; slots_[1].value = (void*)1; slots_[2].slot = 0; slots_[2].value = nullptr;" \
        if gil_slot else "slots_[1].slot = 0; slots_[1].value = nullptr;"
    return _HEAD + f"""
static int exec_(void*) {{ return 0; }}
static Def def_ = {{{{}}, "{name}", nullptr, 0, nullptr, nullptr, nullptr, nullptr, nullptr}};
extern "C" __attribute__((visibility("default"))) void* PyInit_{name}(void) {{
  static Slot slots_[4];
  static bool ready = false;
  if (!ready) {{
    slots_[0].slot = 2; slots_[0].value = (void*)exec_;
    {gil}
    def_.slots = slots_;
    ready = true;
  }}
  return PyModuleDef_Init(&def_);
}}
"""


NOT_A_MODULE = 'extern "C" int fusedops_kernel(int x) { return x + 1; }\n'


def compile_module(folder: Path, name: str, source: str) -> Path:
    src = folder / f"{name}.cpp"
    src.write_text(source)
    out = folder / f"{name}.cpython-313t-x86_64-linux-gnu.so"
    subprocess.run(["g++", "-shared", "-fPIC", "-O2", "-o", str(out), str(src)], check=True)
    return out


@pytest.fixture(scope="module")
def modules(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("gil")
    return {"plain": compile_module(folder, "plain", SINGLE_PLAIN),
            "declared": compile_module(folder, "declared", SINGLE_DECLARED),
            "multi_slot": compile_module(folder, "multi_slot", _multi("multi_slot", True)),
            "multi_plain": compile_module(folder, "multi_plain", _multi("multi_plain", False)),
            "runtime_slot": compile_module(folder, "runtime_slot", _runtime("runtime_slot", True)),
            "runtime_plain": compile_module(folder, "runtime_plain", _runtime("runtime_plain", False)),
            "library": compile_module(folder, "library", NOT_A_MODULE)}


def test_each_way_of_declaring_is_read(modules: dict[str, Path]) -> None:
    assert {name: gil.read_declaration(path) for name, path in modules.items()} == {
        "plain": ("single", "none"), "declared": ("single", "set"), "multi_slot": ("multi", "slot"),
        "multi_plain": ("multi", "unseen"), "runtime_slot": ("multi", "slot"), "runtime_plain": ("multi", "unseen"),
        "library": None}


def test_a_module_without_the_declaration_gets_a_warning_naming_the_fix(modules: dict[str, Path]) -> None:
    root = modules["plain"].parent
    found = {c.name.removeprefix("gil:").split(".")[0]: c for c in gil.check_modules(sorted(modules.values()), root)}
    # a library loaded by path: no check
    assert set(found) == {"plain", "declared", "multi_slot", "multi_plain", "runtime_slot", "runtime_plain"}
    assert all(c.ok for c in found.values())  # a warning, never a failure
    assert [n for n, c in sorted(found.items()) if c.warn] == ["multi_plain", "plain", "runtime_plain"]
    assert "PYBIND11_MODULE(name, m, py::mod_gil_not_used())" in found["plain"].detail
    assert "PyUnstable_Module_SetGIL(m, Py_MOD_GIL_NOT_USED)" in found["plain"].detail
    assert "{Py_mod_gil, Py_MOD_GIL_NOT_USED}" in found["multi_plain"].detail
    assert "read statically" in found["multi_plain"].detail and "read statically" not in found["plain"].detail
    assert not found["declared"].warn and not found["multi_slot"].warn


def test_a_slot_array_needs_its_terminator() -> None:
    entry = (4).to_bytes(4, "little") + bytes(4) + (1).to_bytes(8, "little")
    end = bytes(16)
    assert gil._slot_arrays_declare(bytes(8) + entry + end, 8)
    assert not gil._slot_arrays_declare(entry + (99).to_bytes(4, "little") + bytes(12), 8)
    assert not gil._slot_arrays_declare(entry, 8)


def test_only_a_free_threaded_wheel_is_checked() -> None:
    assert gil.wanted(None, ("cp313-cp313t-manylinux_2_28_x86_64",))
    assert not gil.wanted(None, ("cp313-cp313-manylinux_2_28_x86_64", "cp310-abi3-manylinux_2_28_x86_64"))
    assert gil.wanted(True, ()) and not gil.wanted(False, ("cp313-cp313t-linux_x86_64",))


@pytest.mark.parametrize(("module", "warned"), [("plain", True), ("declared", False)])
def test_the_audit_of_a_t_wheel_carries_the_check(modules: dict[str, Path], tmp_path: Path, module: str,
                                                   warned: bool) -> None:
    """The whole audit of a free-threaded wheel (no target: its tag says it) holds the check; no failure from it."""
    wheel = tmp_path / "ft-1.0-cp313-cp313t-manylinux_2_28_x86_64.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.write(modules[module], f"ft/{modules[module].name}")
        zf.writestr("ft-1.0.dist-info/METADATA", "Metadata-Version: 2.1\nName: ft\nVersion: 1.0\n")
        zf.writestr("ft-1.0.dist-info/WHEEL", "Wheel-Version: 1.0\nRoot-Is-Purelib: false\n"
                    "Tag: cp313-cp313t-manylinux_2_28_x86_64\n")
    result = wheel_audit.audit_wheel(wheel, None, None, cuda=False, abi3audit=False)
    (check,) = [c for c in result.checks if c.name.startswith("gil:")]
    assert check.ok and check.warn is warned
    assert not any(c.name.startswith("gil:") for c in result.failures())
