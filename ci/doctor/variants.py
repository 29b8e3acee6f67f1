"""What a variant-aware installer would pick (PEP 825 wheel variants, draft) from an index's variant wheels, for the
doctor: the NVIDIA provider's rules and the variant ordering, implemented here (the doctor runs with the standard
library and ``packaging`` alone, so it cannot call ``variantlib``; tests/unit/doctor/test_variant_pick.py checks that
``variantlib``'s own ``sort_and_filter_supported_variants`` orders every recorded machine's variants the same way).

**The NVIDIA provider** (``nvidia-variant-provider``'s ``get_supported_configs``, learnt from its documentation and
behaviour): with the driver's CUDA version ``D`` (``driver.cuda`` of the probe; NVML's on a user's machine), from 11.0
to 15.20, else nothing is supported:

* ``cuda_version_lower_bound``: ``D`` and every version below it down to 11, newest first, each major's minors
  (down to .0) then the major alone (``13.0``, ``13``, ``12.20`` ... ``12.0``, ``12``, ... ``11``);
* ``cuda_version_upper_bound`` (exclusive): every version above ``D`` up to 15.20, newest first;
* ``sm_arch`` (multi-valued), from the GPU of the highest compute capability ``M.m`` only (5.0 or newer):
  ``Mm_real`` ... ``M0_real`` (SASS of the same major, this minor or older), then ``M0_virtual`` (PTX of the
  major's first minor). No GPU (or no readable capability): no ``sm_arch`` values.

**The ordering** (PEP 825, as ``variantlib`` 0.2.2 implements it): a variant fits when, for each feature it names,
the provider supports at least one of its values; fitting variants rank feature by feature, in the provider's order,
by the best position of their values in the provider's list (a feature a variant does not name ranks last), then by
label; the null variant (no properties) ranks after every other and always fits. The labels are ordered across
platforms, and the chosen one is the best that has a wheel this machine's platform and Python take (a Windows
machine passes over a Linux-only ``cuda13.0`` for ``cuda13.0.win``); among its wheels, the installer's tag
preference decides (the doctor's own platform and Python rules apply to every wheel).

Standard library plus ``packaging``.
"""

from __future__ import annotations

import dataclasses
import re
import sys
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ci.doctor.rules import Machine
from ci.release import variants as release_variants

MINOR_RANGE = 20
MAJORS = (11, 15)
MIN_SM = (5, 0)


@dataclasses.dataclass(frozen=True)
class Feature:
    name: str
    #: supported values, best first
    values: tuple[str, ...]
    multi_value: bool = False


def _versions(major: int, minors: Iterable[int], with_major: bool) -> list[str]:
    return [f"{major}.{m}" for m in minors] + ([str(major)] if with_major else [])


def provider_features(machine: Machine) -> tuple[Feature, ...]:
    """The NVIDIA provider's supported features on ``machine``, in its order (see the module's rules)."""
    parts = [int(p) for p in re.findall(r"\d+", machine.driver_cuda or "")][:2]
    if len(parts) < 2 or not (MAJORS[0], 0) <= (parts[0], parts[1]) <= (MAJORS[1], MINOR_RANGE):
        return ()
    major, minor = parts
    lower: list[str] = []
    for m in range(major, MAJORS[0] - 1, -1):
        lower += _versions(m, range(minor if m == major else MINOR_RANGE, -1, -1), True)
    upper: list[str] = []
    for m in range(MAJORS[1], major - 1, -1):
        upper += _versions(m, range(MINOR_RANGE, minor if m == major else -1, -1), m != major)
    found = [Feature(release_variants.LOWER_BOUND, tuple(lower))]
    if upper:
        found.append(Feature("cuda_version_upper_bound", tuple(upper)))
    caps = sorted((g.capability for g in machine.gpus if g.capability is not None), reverse=True)
    if caps and caps[0] >= MIN_SM:
        top, sub = caps[0]
        found.append(Feature(release_variants.SM_ARCH, (*(f"{top}{m}_real" for m in range(sub, -1, -1)),
                                                        f"{top}0_virtual"), multi_value=True))
    return tuple(found)


@dataclasses.dataclass(frozen=True)
class Labelled:
    """A variant of an index: its label and properties (``{(namespace, feature): values}``)."""

    label: str
    properties: Mapping[tuple[str, str], tuple[str, ...]]

    @classmethod
    def from_document(cls, label: str, document: Mapping[str, Any]) -> Labelled | None:
        """The variant ``label`` of a variant.json (None: the file does not describe it)."""
        described = (document.get("variants") or {}).get(label)
        if not isinstance(described, dict):
            return None
        props = {(ns, feature): tuple(str(v) for v in values) for ns, features in described.items()
                 if isinstance(features, dict) for feature, values in features.items() if isinstance(values, list)}
        return cls(label, props)


def order(found: Sequence[Labelled], features: Sequence[Feature]) -> list[Labelled]:
    """``found`` that fit, best first (the null variant, always fitting, last): see the module's ordering."""
    supported = {(release_variants.NAMESPACE, f.name): f.values for f in features}
    keys = list(supported)
    fitting = [v for v in found if all(any(x in supported.get(k, ()) for x in vals)
                                       for k, vals in v.properties.items())]

    def rank(v: Labelled) -> tuple[tuple[int, ...], str]:
        ranks = [sys.maxsize] * len(keys)
        for k, vals in v.properties.items():
            i = keys.index(k)
            ranks[i] = min(supported[k].index(x) for x in vals if x in supported[k])
        return tuple(ranks), v.label

    return sorted(fitting, key=rank)


def labelled(path_label_pairs: Iterable[tuple[str, Mapping[str, Any] | None]]) -> list[Labelled]:
    """The variants of an index, from each variant wheel's label and variant.json (unreadable ones left out)."""
    out: dict[str, Labelled] = {}
    for label, document in path_label_pairs:
        if document is not None and (found := Labelled.from_document(label, document)) is not None:
            out.setdefault(label, found)
    if release_variants.NULL not in out:
        out[release_variants.NULL] = Labelled(release_variants.NULL, {})  # the installer's fallback
    return list(out.values())
