"""What the sources a project compiles ask of the GPU architecture: its gates, each a comparison of the architecture
with a number, read as modern CUDA code writes them:

* ``__CUDA_ARCH__`` compared with a number, in any spelling: ``__CUDA_ARCH__ >= 890``, ``800 <= __CUDA_ARCH__``,
  ``(__CUDA_ARCH__) >= 890``, ``__CUDA_ARCH__ / 10 >= 89`` (read as the architectures it holds for: ``>= 890``),
  ``__CUDA_ARCH__ >= SM_ADA`` (a macro whose value is a number), in ``#if`` lines and in code (``if constexpr``);
* CCCL's ``<nv/target>`` queries, as it defines them: ``NV_IF_TARGET(NV_PROVIDES_SM_89, ...)`` holds from 890 up,
  ``NV_IS_EXACTLY_SM_90`` on 900 alone, ``NV_HAS_FEATURE_SM_90a`` (like ``__CUDA_ARCH_FEAT_SM90_ALL``) in a ``9.0a``
  build alone;
* macros, object-like or function-like, expanded where they are used, wherever they are defined among the files
  read: ``#define ARCH __CUDA_ARCH__`` in a header, ``#define AT_LEAST(x) (__CUDA_ARCH__ >= (x))``, ``AT_LEAST(800)``;
  the name ``CUDA_ARCH`` is read as ``__CUDA_ARCH__`` even where no file defines it;
* the arch-specific macros (``__CUDA_ARCH_SPECIFIC__``, ``__CUDA_ARCH_FAMILY_SPECIFIC__``, defined only in
  ``9.0a``/``10.0f`` builds).

A use of the architecture the reader cannot turn into such a comparison (``constexpr int arch = __CUDA_ARCH__``,
``__CUDA_ARCH__ >= kMinArch`` with a C++ constant, a template argument) is :class:`Unread`, with its file and line:
``ci/builds/preflight.py`` warns about it, since the SASS that gate needs may not be kept. ``defined(__CUDA_ARCH__)``,
``#ifdef`` and ``__CUDA_ARCH__`` as a truth value (device code or not) are no gates.

``older-majors-sass`` (ci/universe/archs.py ``per_generation``) keeps, beside each GPU generation's oldest SASS, the
SASS of every architecture on which a gate changes its answer: a GPU that runs another architecture's cubin runs that
architecture's side of every ``#if``, so a thinned list would otherwise drop the FP8 path of an Ada GPU (``>= 890``),
or run the ``#else`` that traps.

What is read: the project's own C, C++ and CUDA files (every file with such a suffix under its folder, except hidden
folders, build outputs, virtual environments and folders that are projects of their own: a ``pyproject.toml`` or
``setup.py`` of their own), the sources its ``setup.py`` and CMake files name (a vendored library's ``.cu`` files it
compiles), and every header those include that lies in the project (``#include <cutlass/arch/mma.h>`` reaches
``third_party/cutlass/include/cutlass/arch/mma.h``): a vendored library's gates count where the project compiles
it. Headers of the toolkit and of torch are not the project's: their gates (``cuda_fp8.hpp``'s hardware conversions
on 8.9) fall back to portable code, and the docs say so. Each file is parsed once per size and time.

The package: this face (a gate, what a reading holds), ``code`` (one file's text, and the comparisons in it),
``sources`` (the files a project compiles, its macros, :func:`sources.read_project`). Standard library only
(``ci/universe/targets/`` uses it, and ``noxfile.py`` imports that).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable


@dataclasses.dataclass(frozen=True, order=True)
class Gate:
    """One comparison of the architecture macro with a number (``__CUDA_ARCH__ >= 890``), where it was first seen."""

    value: int
    op: str
    #: ``__CUDA_ARCH__`` (a macro defined as it is read as it), else a macro defined only in arch-specific builds:
    #: ``__CUDA_ARCH_SPECIFIC__`` (``9.0a``), ``__CUDA_ARCH_FAMILY_SPECIFIC__`` (``10.0f`` and ``10.0a``),
    #: ``__CUDA_ARCH_FEAT_SM90_ALL`` (``9.0a``)
    macro: str = "__CUDA_ARCH__"
    where: str = dataclasses.field(default="", compare=False)

    @property
    def specific(self) -> bool:
        return self.macro != "__CUDA_ARCH__"

    def holds(self, arch: str) -> bool:
        """Whether code compiled for ``arch`` (``8.9``, ``9.0a``) takes this comparison's true side."""
        base = arch.rstrip("af")
        if self.specific and (base == arch or (arch.endswith("f") and self.macro != "__CUDA_ARCH_FAMILY_SPECIFIC__")):
            return False  # undefined in this build (plain; or family, where only the family's macro is defined)
        major, minor = base.split(".")
        value = int(major) * 100 + int(minor) * 10
        return {">=": value >= self.value, ">": value > self.value, "<=": value <= self.value,
                "<": value < self.value, "==": value == self.value, "!=": value != self.value}[self.op]

    def text(self) -> str:
        return f"{self.macro} {self.op} {self.value}"


@dataclasses.dataclass(frozen=True, order=True)
class Unread:
    """A use of the architecture the reader cannot turn into gates: its place (``csrc/k.cu:12``) and its line."""

    where: str
    code: str

    def text(self) -> str:
        return f"{self.where} ({self.code})"


@dataclasses.dataclass(frozen=True)
class Reading:
    """A project's gates (lowest value first, each at the first place it was seen) and what could not be read."""

    gates: tuple[Gate, ...]
    unread: tuple[Unread, ...]


def behaviour(arch: str, gates: Iterable[Gate]) -> tuple[bool, ...]:
    """The side of each gate code compiled for ``arch`` takes: two architectures with one behaviour run the same
    source paths."""
    return tuple(g.holds(arch) for g in gates)
