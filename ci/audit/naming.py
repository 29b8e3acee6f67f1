"""The audit's checks of a wheel's name and metadata (Linux and Windows): ``wheel-tag``, ``manylinux`` and
``metadata`` (ci/audit/wheel_audit.py lists what each proves). Kept apart from the library checks, which read the
ELF files."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from ci import wheelmeta
from ci.audit.checks import Check
from ci.universe import matrix, shapes
from ci.universe.build_files import declared_floor
from ci.universe.targets import Target


def expected_prefix(target: Target | None, python: str) -> str:
    """The interpreter-abi tag the target's id names (``python``: without a target, the abi3 floor)."""
    if target is not None:
        return target.wheel_tag_prefix
    return _cp(python) + "-abi3"


def _cp(python: str) -> str:
    return "cp" + python.replace(".", "")


def _abi3_floor_of(prefix: str) -> str | None:
    """``cp39-abi3`` -> ``3.9``; None for any other interpreter-abi pair."""
    interpreter, _, abi = prefix.partition("-")
    digits = interpreter.removeprefix("cp")
    if abi != "abi3" or not interpreter.startswith("cp3") or not digits.isdigit() or len(digits) < 2:
        return None
    return f"{digits[0]}.{digits[1:]}"


def _limited_api_fix(python: str) -> str:
    minor = int(python.split(".")[1])
    return f'build with -DPy_LIMITED_API=0x03{minor:02X}0000 and bdist_wheel py_limited_api = "{_cp(python)}"'


def check_wheel_tag(tags: Sequence[str], target: Target | None) -> Check:
    """The ``wheel-tag`` check (Linux and Windows audits): the interpreter-abi part of every tag."""
    prefixes = sorted({"-".join(t.split("-")[:2]) for t in tags})
    shown = f"tags {', '.join(tags)}"
    if target is not None and not target.abi3:
        want = target.wheel_tag_prefix
        if prefixes == [want]:
            return Check("wheel-tag", True, shown)
        hint = ('; the wheel is abi3 (py_limited_api): set python-abi = "abi3" in [tool.cuda-ext-farm] for abi3 '
                'targets, or build without py_limited_api' if any(_abi3_floor_of(p) for p in prefixes) else "")
        return Check("wheel-tag", False, f"{shown}; expected {want} for this target{hint}")
    floor = target.oldest_python if target else matrix.PYTHON_LIMITED_API
    requires = target.project.requires_python if target else None
    declared = declared_floor(requires)
    why = f"requires-python {requires}" if declared else f"the target's oldest CPython {floor}"
    floors = [_abi3_floor_of(p) for p in prefixes]
    if not floors or None in floors:
        other = ""
        if target is not None:  # the key that makes the target abi3, and the way out where there is one
            stable = target.project.abi == "stable"
            implied = ', implied by abi = "stable"' if stable else ""
            way_out = "" if stable else ', or set python-abi = "per-python" for one wheel per Python'
            other = (f'; the project has python-abi = "abi3" ([tool.cuda-ext-farm]{implied}): '
                     f"{_limited_api_fix(floor)}{way_out}")
        return Check("wheel-tag", False, f"{shown}; expected {_cp(floor)}-abi3 ({why}) or an older cpXY-abi3{other}")
    wheel = min((f for f in floors if f), key=shapes.version_key)
    shown += f"; abi3 floor {_cp(wheel)} ({why})"
    if shapes.version_key(wheel) <= shapes.version_key(floor):
        return Check("wheel-tag", True, shown)
    build = target.python if target else floor
    if shapes.version_key(wheel) > shapes.version_key(build):
        where = f"the build Python {build}" if target else f"the farm's default floor {build}"
        return Check("wheel-tag", False, f"{shown}: above {where}, so pip would never install it there; "
                                         f"{_limited_api_fix(floor)}")
    last_refused = f"3.{int(wheel.split('.')[1]) - 1}"
    refused = floor if last_refused == floor else f"{floor} to {last_refused}"
    return Check("wheel-tag", False, f"{shown}: above {_cp(floor)}, so it would not install on CPython {refused}, "
                                     f"which {why} promises; {_limited_api_fix(floor)}")


def check_tags(wheel: Path, target: Target | None) -> tuple[tuple[str, ...], list[Check]]:
    parsed = wheelmeta.parse_name(wheel)
    manylinux = all(p.startswith("manylinux") for p in parsed.platforms)
    return parsed.tags, [
        check_wheel_tag(parsed.tags, target),
        Check("manylinux", manylinux, f"platform {', '.join(parsed.platforms)}"
              + ("" if manylinux else "; not repaired by auditwheel")),
    ]


def check_metadata(wheel: Path, target: Target) -> Check:
    """The target's local label is the first segment of the wheel's local version, the project's own local
    segments (setuptools-scm's ``g<hash>``) may follow (ci/wheelmeta.py merge_local); a classic wheel pins torch."""
    parsed = wheelmeta.parse_name(wheel)
    meta = wheelmeta.read_metadata(wheel)
    requires = meta.get("Requires-Dist", [])
    torch_reqs = [r for r in requires if r.split(";")[0].strip().lower().replace("_", "-").startswith("torch")
                  and r.split(";")[0].strip()[5:6] in ("", " ", "=", "<", ">", "!", "~", "(")]
    local = parsed.version.local or ""
    label_ok = wheelmeta.local_matches(local, target.local_version)
    if target.torch_pin is None:
        want = (f"+{target.local_version} (then the project's own local segments, if any)" if target.local_version
                else "no farm label (pt…/cu…/cpu) in its local version")
        return Check("metadata", label_ok, f"version {parsed.version}, requires {', '.join(torch_reqs) or 'no torch'}"
                     + ("" if label_ok else f"; a stable-ABI wheel of {target.variant} carries {want}"))
    ok = label_ok and target.torch_pin in [r.replace(" ", "") for r in torch_reqs]
    return Check("metadata", ok,
                 f"version {parsed.version}, requires {', '.join(torch_reqs) or 'no torch'}"
                 + ("" if ok else f"; expected +{target.local_version} (then the project's own local segments, "
                    f"if any) and {target.torch_pin}"))
