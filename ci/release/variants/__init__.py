"""Wheel variants (PEP 825, draft; experimental, off by default): the release's wheels again as *variant wheels*,
in ``<release>/variants/``, for installers that understand them. ``docs/variants.md`` says what is draft, what
installers do today and how to turn it on (``release --variant-wheels``, ``FARM_VARIANT_WHEELS=1`` or the project
key ``variant-wheels = true``).

A variant wheel is the audited wheel with a *label* after its platform tag
(``myext-0.1.0-cp310-abi3-manylinux_2_31_x86_64-cuda13.0.whl``) and ``<dist-info>/variant.json`` naming its
properties; the index serves ``{name}-{version}-variants.json``, every label's properties, beside them. The
properties are the NVIDIA provider's (namespace ``nvidia``), read from the binary (ELF libraries of Linux wheels,
PE files of win_amd64 wheels), never written by hand:

* ``nvidia :: cuda_version_lower_bound``: the CUDA runtime major the wheel links (``DT_NEEDED libcudart.so.13``;
  ``cudart64_13.dll`` in a PE import table, regular or delay-load) with the minor of the cell it was built in (the
  toolkit its torch is a build of): ``13.0`` for the cu130 cell. A runtime major other than the cell's, none, or
  more than one is refused (the rule would have no single answer);
* ``nvidia :: sm_arch``: one value per architecture its CUDA libraries hold (``cuobjdump``; of a PE file, its
  ``.nv_fatb`` section read as a fatbin file): SASS ``sm_90`` -> ``90_real``, PTX ``sm_90`` -> ``90_virtual``.
  Arch-specific cubins (``sm_90a``, ``sm_100f``) have no value in the provider's vocabulary and are left out; a
  CUDA wheel left with none is refused.

The label is the cell's CUDA version (``cuda13.0``, ``cuda12.8``; the local stand-in cu124 gives ``cuda12.4``),
shared by the cell's Linux and Windows wheels; where the Windows wheels hold other properties (one label names one
set), theirs is ``cuda12.8.win``. A CPU build is the *null variant* (label ``null``, no properties), which a
variant-aware installer takes when no other fits. The variant wheels carry the public version (the farm's local
label, ``+cu124``, dropped): every variant of one release is one ``{name}-{version}``. Classic projects get variants
of the release torch's wheels only (one wheel per label and tags). The wheels are written deterministically (the
input wheel's entry times, entries in its order with ``variant.json`` before ``RECORD``): same input, same bytes.

The folder::

    variants/<wheel>-<label>.whl                 the variant wheels (and <wheel>.metadata, PEP 658)
    variants/{name}-{version}-variants.json      every label's properties (PEP 825's index file)
    variants/simple/<project>/index.html         a PEP 503 page linking both (file:// installable)

``validation.validate`` reads the folder back with ``variantlib`` (0.2.2: its own dist-info and variants.json
parsers and its wheel-name pattern), so the format is checked by the reference implementation, not only by the
writer.

The package: the vocabulary (the properties, :class:`Variant`, the labelled names, :func:`read_variant`) here,
standard library only (``ci/doctor`` reads variant wheels with :func:`split_name` and :func:`read_variant`);
``binary`` a wheel's variant read from its libraries (the audit's readers); ``writing`` the variant wheels and the
release's ``variants/`` folder; ``validation`` the folder read back with ``variantlib``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import re
import zipfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

#: The variant metadata schema of PEP 825 this writer follows.
SCHEMA = "https://variants-schema.wheelnext.dev/peps/825/v0.1.1.json"
FILE = "variant.json"
FOLDER = "variants"
NULL = "null"
#: Added to a label whose Windows wheels hold other properties than its Linux ones.
WINDOWS = ".win"
NAMESPACE = "nvidia"
LOWER_BOUND = "cuda_version_lower_bound"
SM_ARCH = "sm_arch"
#: How an installer gets the NVIDIA provider (its own README's recommendation).
PROVIDER: dict[str, Any] = {"requires": ["nvidia-variant-provider>=0.0.1,<1.0.0"],
                            "plugin-api": "nvidia_variant_provider.plugin:NvidiaVariantPlugin"}
LABEL = re.compile(r"[0-9a-z._]+")


@dataclasses.dataclass(frozen=True)
class Variant:
    """A wheel's variant: its label and properties (``{feature: values}`` of the ``nvidia`` namespace; empty for
    the null variant), and where they came from."""

    label: str
    properties: Mapping[str, tuple[str, ...]]
    source: str = ""

    def document(self) -> dict[str, Any]:
        """The ``variant.json`` of a wheel of this variant."""
        return {"$schema": SCHEMA, "default-priorities": {"namespace": [NAMESPACE]},
                "providers": {NAMESPACE: PROVIDER},
                "variants": {self.label: {NAMESPACE: {k: list(v) for k, v in sorted(self.properties.items())}}
                             if self.properties else {}}}


def dumps(document: Mapping[str, Any]) -> bytes:
    return (json.dumps(document, indent=2, sort_keys=True) + "\n").encode("utf-8")


def split_name(filename: str) -> tuple[str, str | None]:
    """``a-1.0-cp310-abi3-linux_x86_64-cuda13.0.whl`` -> (``a-1.0-cp310-abi3-linux_x86_64.whl``, ``cuda13.0``);
    a wheel without a label -> (itself, None). A python tag never starts with a digit, a build tag always does:
    that tells a six-part name's build tag (third part) from a label (last part)."""
    if not filename.endswith(".whl"):
        return filename, None
    parts = filename[:-4].split("-")
    has_build = len(parts) >= 6 and parts[2][:1].isdigit()
    if len(parts) == (7 if has_build else 6) and LABEL.fullmatch(parts[-1]):
        return "-".join(parts[:-1]) + ".whl", parts[-1]
    return filename, None


def variant_name(wheel_name: str, label: str) -> str:
    return wheel_name.removesuffix(".whl") + f"-{label}.whl"


def read_variant(wheel: Path) -> dict[str, Any] | None:
    """The ``variant.json`` of a wheel (None: no such file, or not JSON)."""
    with zipfile.ZipFile(wheel) as zf:
        names = [n for n in zf.namelist() if re.fullmatch(rf"[^/]+\.dist-info/{re.escape(FILE)}", n)]
        if len(names) != 1:
            return None
        with contextlib.suppress(ValueError):
            loaded = json.loads(zf.read(names[0]))
            return loaded if isinstance(loaded, dict) else None
    return None
