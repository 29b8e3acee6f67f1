"""``gil:<module>``: whether each Python extension module of a free-threaded wheel (``cp313-cp313t``) declares that
it runs without the GIL, read statically from the ELF file (pyelftools), as a warning and never a failure.

A free-threaded CPython turns the GIL back on when it imports a module that does not declare free-threading
support (with a RuntimeWarning), so the wheel works, only with the GIL. A module declares it in one of two ways:

* single-phase init (``PyInit_<name>`` returns the module): it calls ``PyUnstable_Module_SetGIL(m,
  Py_MOD_GIL_NOT_USED)``, which is what pybind11 2.13's ``PYBIND11_MODULE(name, m, py::mod_gil_not_used())`` emits;
  an imported ``PyUnstable_Module_SetGIL`` is the declaration;
* multi-phase init (``PyInit_<name>`` returns ``PyModuleDef_Init(&def)``; pybind11 3 does so): a ``{Py_mod_gil,
  Py_MOD_GIL_NOT_USED}`` entry in the definition's ``m_slots``, an array of (int slot, void *value) pairs ending
  with ``{0, NULL}``. Written in C it is plain data, searched for in the library's data sections; pybind11 3 fills
  a function-local static array in ``PyInit_<name>`` at run time (``init_slots``), which on x86_64 compiles to two
  RIP-relative stores, ``movl $4`` and ``movq $1`` eight bytes further on, searched for in that function's code.
  Where neither is found, the warning says the module was read statically (slots made any other way cannot be seen
  here).

What the interpreter really did is the import test's to say (``sys._is_gil_enabled()`` after the import, under
``PYTHON_GIL=0``: ci/builds/smoke_gil.py).
"""

from __future__ import annotations

import struct
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from ci.audit.checks import Check

#: CPython's ``Py_mod_gil`` slot id and ``Py_MOD_GIL_NOT_USED`` value (Include/moduleobject.h, 3.13 on).
PY_MOD_GIL = 4
PY_MOD_GIL_NOT_USED = 1
#: The highest slot id a definition's array may hold here (3.13 has 4; later CPythons add a few).
_MAX_SLOT = 16
_DATA_SECTIONS = (".data.rel.ro", ".data.rel.ro.local", ".data", ".rodata")

FIX_SINGLE = ("PYBIND11_MODULE(name, m, py::mod_gil_not_used()) with pybind11 >= 2.13, or "
              "PyUnstable_Module_SetGIL(m, Py_MOD_GIL_NOT_USED) after PyModule_Create (under #ifdef Py_GIL_DISABLED)")
FIX_MULTI = "the slot {Py_mod_gil, Py_MOD_GIL_NOT_USED} in the module definition's m_slots"


def wanted(target_free_threaded: bool | None, tags: Sequence[str]) -> bool:
    """Whether the wheel is a free-threaded one: the target says so, else a tag's ABI does (``cp313t``)."""
    if target_free_threaded is not None:
        return target_free_threaded
    return any(len(parts := tag.split("-")) == 3 and parts[1].startswith("cp") and parts[1].endswith("t")
               for tag in tags)


def _slot_arrays_declare(data: bytes, pointer: int) -> bool:
    """Whether ``data`` holds a module slot array (``pointer``-byte values, little endian) with a ``{Py_mod_gil,
    Py_MOD_GIL_NOT_USED}`` entry: the entry, every entry from there to a ``{0, NULL}`` terminator a known slot id."""
    entry = 2 * pointer if pointer == 8 else 8
    value_format = "<Q" if pointer == 8 else "<I"
    for offset in range(0, len(data) - 2 * entry + 1, pointer):
        slot = struct.unpack_from("<i", data, offset)[0]
        if slot != PY_MOD_GIL or struct.unpack_from(value_format, data, offset + entry - pointer)[0] != \
                PY_MOD_GIL_NOT_USED:
            continue
        at = offset + entry
        for _ in range(_MAX_SLOT):
            if at + entry > len(data):
                break
            slot = struct.unpack_from("<i", data, at)[0]
            if slot == 0:
                if struct.unpack_from(value_format, data, at + entry - pointer)[0] == 0:
                    return True
                break
            if not 0 < slot <= _MAX_SLOT:
                break
            at += entry
    return False


#: x86_64's ``movl $imm32, disp32(%rip)`` and ``movq $imm32, disp32(%rip)``: opcode bytes, then disp32 and imm32.
_MOVL_RIP = b"\xc7\x05"
_MOVQ_RIP = b"\x48\xc7\x05"


def _stores_gil_slot(code: bytes, address: int) -> bool:
    """Whether x86_64 ``code`` (at ``address``) stores the int ``Py_mod_gil`` and, 8 bytes further on, the pointer
    ``Py_MOD_GIL_NOT_USED``, each with a RIP-relative move of an immediate (pybind11 3's ``init_slots`` inlined)."""
    slots: set[int] = set()
    values: set[int] = set()
    for opcode, width, wanted, into in ((_MOVL_RIP, 10, PY_MOD_GIL, slots), (_MOVQ_RIP, 11, PY_MOD_GIL_NOT_USED,
                                                                             values)):
        at = code.find(opcode)
        while at >= 0:
            if at + width <= len(code):
                disp, imm = struct.unpack_from("<ii", code, at + len(opcode))
                if imm == wanted:
                    into.add(address + at + width + disp)
            at = code.find(opcode, at + 1)
    return any(slot + 8 in values for slot in slots)


def _module_inits(symbols: Iterator[object]) -> tuple[list[tuple[str, int, int]], set[str]]:
    """The ``PyInit_*`` functions a library defines (name, address, size), and the names it imports."""
    inits: list[tuple[str, int, int]] = []
    imported: set[str] = set()
    for sym in symbols:
        name = str(getattr(sym, "name", ""))
        if not name:
            continue
        if sym["st_shndx"] == "SHN_UNDEF":  # type: ignore[index]
            imported.add(name)
        elif name.startswith("PyInit_") and sym["st_info"]["type"] == "STT_FUNC":  # type: ignore[index]
            inits.append((name, int(sym["st_value"]), int(sym["st_size"])))  # type: ignore[index]
    return inits, imported


def _function_code(elf: Any, address: int, size: int) -> bytes:
    """The bytes of the function at ``address`` (``size`` bytes), from the section that holds them."""
    for section in elf.iter_sections():
        start = int(section["sh_addr"])
        if section["sh_type"] == "SHT_PROGBITS" and start <= address < start + int(section["sh_size"]):
            data: bytes = section.data()
            return data[address - start:address - start + size]
    return b""


def read_declaration(path: Path) -> tuple[str, str] | None:
    """(how the module initialises, what it declares) of the extension module at ``path``: ``("single", "set")``,
    ``("single", "none")``, ``("multi", "slot")`` (in its data or written by its ``PyInit_``), ``("multi",
    "unseen")``; None: not a Python module (no ``PyInit_``: a library loaded by path, ``torch.ops.load_library``)."""
    from elftools.elf.elffile import ELFFile
    from elftools.elf.sections import SymbolTableSection

    with path.open("rb") as fh:
        elf = ELFFile(fh)
        dynsym = elf.get_section_by_name(".dynsym")
        if not isinstance(dynsym, SymbolTableSection):
            return None
        inits, imported = _module_inits(dynsym.iter_symbols())
        if not inits:
            return None
        if "PyModuleDef_Init" in imported:
            pointer = 8 if elf.elfclass == 64 else 4
            for name in _DATA_SECTIONS:
                section = elf.get_section_by_name(name)
                if section is not None and section["sh_type"] == "SHT_PROGBITS" and \
                        _slot_arrays_declare(section.data(), pointer):
                    return "multi", "slot"
            if elf.header["e_machine"] == "EM_X86_64" and any(
                    _stores_gil_slot(_function_code(elf, address, size), address) for _, address, size in inits):
                return "multi", "slot"
            return "multi", "unseen"
        return "single", "set" if "PyUnstable_Module_SetGIL" in imported else "none"


def check_modules(files: Sequence[Path], root: Path) -> list[Check]:
    """A ``gil:<module>`` check per Python extension module in ``files``: a warning where it does not declare
    free-threading support, saying what to add."""
    checks: list[Check] = []
    for path in files:
        found = read_declaration(path)
        if found is None:
            continue
        rel = str(path.relative_to(root))
        init, said = found
        if said == "set":
            checks.append(Check(f"gil:{rel}", True, "declares free-threading support "
                                "(PyUnstable_Module_SetGIL; Py_MOD_GIL_NOT_USED)"))
        elif said == "slot":
            checks.append(Check(f"gil:{rel}", True, "declares free-threading support ({Py_mod_gil, "
                                "Py_MOD_GIL_NOT_USED} in its slots)"))
        elif init == "single":
            checks.append(Check(f"gil:{rel}", True, "does not declare free-threading support: a free-threaded "
                                "CPython turns the GIL back on when it imports it (the wheel works, with the GIL); "
                                f"once the module is thread-safe, add {FIX_SINGLE}", warn=True))
        else:
            checks.append(Check(f"gil:{rel}", True, "multi-phase init (PyModuleDef_Init) and no {Py_mod_gil, "
                                "Py_MOD_GIL_NOT_USED} slot found in its data or PyInit_'s code (read statically: "
                                "slots made another way cannot be seen; the import test says what the interpreter "
                                "did): a "
                                "free-threaded CPython turns the GIL back on for a module without it; once the "
                                f"module is thread-safe, add {FIX_MULTI} (pybind11: py::mod_gil_not_used())",
                                warn=True))
    return checks
