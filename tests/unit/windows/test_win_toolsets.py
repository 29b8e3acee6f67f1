"""host_config.h ranges, the STL gate, vswhere parsing and the toolset chosen for every cell of the matrix."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from ci.errors import MissingRequirement, UsageError
from ci.universe import matrix, shapes
from windows import hostconfig, msvc, vswhere

DATA = Path(__file__).resolve().parent / "data"

# --- host_config.h -------------------------------------------------------------------------------

#: What each recorded crt/host_config.h (data/host_config-<cuda>.h, from NVIDIA's win_amd64 wheels and installer)
#: accepts: the _MSC_VER range of its check. Facts of the recorded files, not of the matrix.
RECORDED_RANGES = {"12.4": (1910, 1950), "13.0": (1920, 1950), "13.2": (1920, 1960), "13.5": (1920, 1960)}


def test_every_recorded_header_has_its_range() -> None:
    recorded = {p.name[len("host_config-"):-len(".h")] for p in DATA.glob("host_config-1*.h")} - {"12.x-deprecated"}
    assert recorded == set(RECORDED_RANGES)


@pytest.mark.parametrize(("cuda", "expected"), sorted(RECORDED_RANGES.items()))
def test_host_config_range_per_toolkit(data: Path, cuda: str, expected: tuple[int, int]) -> None:
    assert hostconfig.parse((data / f"host_config-{cuda}.h").read_text()).msc_ver == expected


@pytest.mark.parametrize("cell", [c for c in matrix.CELLS if c.cuda in RECORDED_RANGES], ids=lambda c: c.name)
def test_the_matrix_carries_what_the_recorded_header_says(data: Path, cell: shapes.Cell) -> None:
    parsed = hostconfig.parse((data / f"host_config-{cell.cuda}.h").read_text())
    assert cell.windows is not None and cell.windows.msc_ver == parsed.msc_ver
    hostconfig.check_cell(cell, parsed)


def test_host_config_reads_the_check_not_the_stale_comment(data: Path) -> None:
    text = (data / "host_config-13.0.h").read_text()
    assert "_MSC_VER < 1910" in text  # the #endif comment
    assert hostconfig.parse(text).msc_ver[0] == 1920
    assert "2019 and 2022" in hostconfig.parse(text).message


def test_host_config_deprecated_range(data: Path) -> None:
    assert hostconfig.parse((data / "host_config-12.4.h").read_text()).deprecated is None  # 1910..1910 is empty
    assert hostconfig.parse((data / "host_config-12.x-deprecated.h").read_text()).deprecated == (1910, 1920)


def test_host_config_without_a_check_is_an_error() -> None:
    with pytest.raises(UsageError, match="no _MSC_VER check"):
        hostconfig.parse("#if defined(_WIN32)\n#endif /* _WIN32 */\n")


def test_matrix_that_disagrees_with_the_header_is_refused(data: Path) -> None:
    parsed = hostconfig.parse((data / "host_config-13.2.h").read_text())
    with pytest.raises(UsageError, match=r"accepts _MSC_VER 1920-1959.*records 1920-1949") as err:
        hostconfig.check_cell(matrix.get_cell("13.0"), parsed)
    assert "msc_ver=(1920, 1960)" in err.value.fix


def test_read_names_a_missing_header(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match=r"no crt/host_config\.h"):
        hostconfig.read(tmp_path)


# --- toolsets and the STL gate --------------------------------------------------------------------


def test_toolset_versions() -> None:
    assert msvc.Toolset.parse("14.44.35207").msc_ver == 1944
    assert msvc.Toolset.parse("14.50").msc_ver == 1950
    assert str(msvc.Toolset.parse("14.44.35207")) == "14.44.35207"
    assert msvc.Toolset.parse("14.44.35207").matches(msvc.Toolset.parse("14.44"))
    assert not msvc.Toolset.parse("14.44.35207").matches(msvc.Toolset.parse("14.43"))
    for bad in ("", "19.44", "v143", "14"):
        with pytest.raises(UsageError):
            msvc.Toolset.parse(bad)


@pytest.mark.parametrize(("toolset", "floor"), [
    ("14.29", (10, 1)), ("14.33", (10, 1)), ("14.34", (11, 6)), ("14.40", (11, 6)), ("14.41", (12, 4)),
    ("14.44", (12, 4)), ("14.50", (12, 4)), ("14.51", (13, 2)), ("14.52", (13, 3)), ("14.16", None),
])
def test_stl_floor(toolset: str, floor: tuple[int, int] | None) -> None:
    assert msvc.stl_min_cuda(msvc.Toolset.parse(toolset)) == floor


def test_refusals_say_why() -> None:
    assert msvc.refusal("13.0", (1920, 1950), msvc.Toolset.parse("14.44")) is None
    why = msvc.refusal("13.0", (1920, 1950), msvc.Toolset.parse("14.50"))
    assert why is not None and "outside the range 1920-1949" in why
    # VS 2026's 14.51 passes CUDA 13.2's header, but its STL wants 13.2 or newer: 13.2 is fine, 13.0 is not.
    assert msvc.refusal("13.2", (1920, 1960), msvc.Toolset.parse("14.51")) is None
    why = msvc.refusal("13.0", (1920, 1960), msvc.Toolset.parse("14.51"))
    assert why is not None and "STL1002" in why and "13.2" in why
    # 14.52's STL (main) wants 13.3: CUDA 13.2 is refused although its header would take _MSC_VER 1952.
    assert "STL1002" in (msvc.refusal("13.2", (1920, 1960), msvc.Toolset.parse("14.52")) or "")
    assert msvc.refusal("13.5", (1920, 1960), msvc.Toolset.parse("14.52")) is None
    # CUDA 12.3 with VS 2022 17.14: the classic STL1002 report.
    assert "12.4" in (msvc.refusal("12.3", (1910, 1950), msvc.Toolset.parse("14.44")) or "")


@pytest.mark.parametrize(("cuda", "accepted"), [
    ("12.4", ["14.16", "14.29", "14.38", "14.44"]),
    ("13.0", ["14.29", "14.38", "14.44"]),
    ("13.2", ["14.29", "14.38", "14.44", "14.50", "14.51"]),
    ("13.5", ["14.29", "14.38", "14.44", "14.50", "14.51", "14.52"]),
])
def test_accepted_toolsets_per_recorded_header(cuda: str, accepted: list[str]) -> None:
    # The rules (the header's range, then the STL's gate) on the recorded toolkits' ranges.
    every = ["14.16", "14.29", "14.38", "14.44", "14.50", "14.51", "14.52"]
    assert [t for t in every if msvc.refusal(cuda, RECORDED_RANGES[cuda], msvc.Toolset.parse(t)) is None] == accepted


@pytest.mark.parametrize("cell", matrix.CELLS, ids=lambda c: c.name)
def test_the_pinned_toolset_of_every_cell_is_acceptable(cell: shapes.Cell) -> None:
    assert cell.windows is not None and msvc.acceptable(cell, msvc.Toolset.parse(cell.windows.toolset))


def test_component_ids() -> None:
    assert msvc.component_id(msvc.Toolset.parse("14.44")) == "Microsoft.VisualStudio.Component.VC.14.44.17.14.x86.x64"
    assert msvc.component_id(msvc.Toolset.parse("14.38")) == "Microsoft.VisualStudio.Component.VC.14.38.17.8.x86.x64"
    assert msvc.component_id(msvc.Toolset.parse("14.29")) == "Microsoft.VisualStudio.Component.VC.14.29.16.11.x86.x64"
    assert msvc.component_id(msvc.Toolset.parse("14.50")) == "Microsoft.VisualStudio.Component.VC.Tools.x86.x64"
    assert msvc.product_of(msvc.Toolset.parse("14.44")) == "Visual Studio 2022 17.14"


# --- vswhere --------------------------------------------------------------------------------------


def test_vswhere_command_includes_build_tools_and_previews() -> None:
    cmd = vswhere.vswhere_command("vswhere.exe")
    assert cmd[1:] == ["-all", "-products", "*", "-prerelease", "-format", "json", "-utf8"]


def test_parse_vswhere(data: Path) -> None:
    instances = vswhere.parse_vswhere((data / "vswhere-dev-box.json").read_text())
    assert [i.year for i in instances] == ["2022", "2019", "2026", "2022"]
    enterprise, bt2019, insiders, bt2022 = instances
    assert not enterprise.build_tools and bt2019.build_tools and bt2022.build_tools
    assert insiders.prerelease and not enterprise.prerelease
    assert not bt2022.complete
    # VS 2026 lives in ...\18\..., the year comes from the version.
    assert "\\18\\" in insiders.path and insiders.year == "2026"
    assert str(enterprise.vcvarsall).endswith(r"2022\Enterprise\VC\Auxiliary\Build\vcvarsall.bat")


def test_parse_vswhere_edge_cases() -> None:
    assert vswhere.parse_vswhere("") == ()
    assert vswhere.parse_vswhere("\ufeff[]") == ()
    with pytest.raises(UsageError, match="not JSON"):
        vswhere.parse_vswhere("Visual Studio Locator version 3.1")
    # Older vswhere wrote "1"/"0" strings; the catalog marks previews as well.
    one = vswhere.parse_vswhere('[{"installationPath": "C:\\\\VS", "isPrerelease": "1"}, {"installationPath": '
                                '"C:\\\\VS2", "catalog": {"productMilestoneIsPreRelease": "True"}}]')
    assert [i.prerelease for i in one] == [True, True]


def test_discovery_of_a_dev_box(machine: Callable[[str], vswhere.Discovery]) -> None:
    found = machine("dev-box")
    assert [(t.instance.display_name, t.version) for t in found.toolsets] == [
        ("Visual Studio Enterprise 2022", "14.44.35207"),
        ("Visual Studio Enterprise 2022", "14.38.33130"),
        ("Visual Studio Community 2026 Insiders", "14.50.35717"),
    ]
    assert any("Build Tools 2019" in s and "no C++ build tools" in s for s in found.skipped)
    assert any("Build Tools 2022" in s and "incomplete" in s for s in found.skipped)


# --- the choice for every cell --------------------------------------------------------------------

#: Recorded machines -> the toolset each offers and the instance holding it. dev-box and windows-2025 have the
#: 14.44 every cell pins; vs2026-buildtools only VS 2026's 14.50, which a cell takes as a stand-in for its pinned
#: 14.44 when its rules accept it (the header's range, the STL's gate: test_accepted_toolsets_per_recorded_header)
#: and is refused otherwise (CUDA 13.0, 12.4 and 12.8 refuse it; 13.2 and 13.5 take it).
MACHINES = {
    "dev-box": ("14.44.35207", "Visual Studio Enterprise 2022"),
    "windows-2025": ("14.44.35207", "Visual Studio Enterprise 2026"),
    "vs2026-buildtools": ("14.50.35717", "Visual Studio Build Tools 2026"),
}


@pytest.mark.parametrize("name", sorted(MACHINES))
def test_toolset_for_every_cell(machine: Callable[[str], vswhere.Discovery], name: str) -> None:
    found = machine(name)
    version, display_name = MACHINES[name]
    offered = msvc.Toolset.parse(version)
    chosen: list[str] = []
    refused: list[str] = []
    for cell in matrix.CELLS:
        assert cell.windows is not None
        pinned = offered.short == cell.windows.toolset
        if not msvc.acceptable(cell, offered):
            refused.append(cell.name)
            with pytest.raises(MissingRequirement):
                msvc.choose(cell, found.toolsets, skipped=found.skipped)
            continue
        chosen.append(cell.name)
        choice = msvc.choose(cell, found.toolsets, skipped=found.skipped)
        assert (str(choice.toolset), choice.instance.display_name, choice.preferred) == (
            version, display_name, pinned), cell.cuda
        assert choice.vcvars_ver == version
        if not choice.preferred:
            assert "14.44" in choice.note and "VC.14.44.17.14" in choice.note
    # The recorded machines exercise both outcomes: the pinned toolset everywhere, and 14.50 taken and refused.
    assert chosen
    if name == "vs2026-buildtools":
        assert refused and "cu130" in refused


def test_cuda13_on_vs2026_without_the_2022_toolset_names_the_component(
        machine: Callable[[str], vswhere.Discovery]) -> None:
    found = machine("vs2026-buildtools")
    with pytest.raises(MissingRequirement) as err:
        msvc.choose(matrix.get_cell("13.0"), found.toolsets)
    exc = err.value
    assert "no MSVC toolset that CUDA 13.0 accepts is installed" in exc.what
    assert "14.50.35717 (Visual Studio Build Tools 2026" in str(exc.value)
    assert "Microsoft.VisualStudio.Component.VC.14.44.17.14.x86.x64" in exc.fix
    assert "-vcvars_ver=14.44" in exc.fix
    assert r'--installPath "D:\BuildTools\18"' in exc.fix
    assert "_MSC_VER 1950 is outside the range 1920-1949" in exc.details
    assert exc.line().startswith("error: no MSVC toolset that CUDA 13.0 accepts")


def test_no_visual_studio_with_cpp_tools(machine: Callable[[str], vswhere.Discovery]) -> None:
    found = machine("dev-box")
    only_skipped = vswhere.Discovery(found.instances, (), found.skipped)
    with pytest.raises(MissingRequirement) as err:
        msvc.choose(matrix.get_cell("13.0"), only_skipped.toolsets, skipped=only_skipped.skipped)
    assert "no Visual Studio with the C++ build tools" in str(err.value.value)
    assert "Build Tools 2019" in err.value.details


def test_explicit_toolset(machine: Callable[[str], vswhere.Discovery]) -> None:
    found = machine("dev-box")
    choice = msvc.choose(matrix.get_cell("12.4"), found.toolsets, "14.38")
    assert str(choice.toolset) == "14.38.33130"
    with pytest.raises(UsageError, match=r"MSVC 14.50 cannot build CUDA 13.0: _MSC_VER 1950"):
        msvc.choose(matrix.get_cell("13.0"), found.toolsets, "14.50")
    with pytest.raises(MissingRequirement) as err:
        msvc.choose(matrix.get_cell("13.0"), found.toolsets, "14.42")
    assert "VC.14.42.17.12.x86.x64" in err.value.fix


def test_release_instance_before_preview() -> None:
    release = vswhere.VsInstance("r", r"C:\VS\2022", "17.14.1.1", "Microsoft.VisualStudio.Product.Community", "VS 2022")
    preview = vswhere.VsInstance("p", r"C:\VS\18", "18.1.1.1", "Microsoft.VisualStudio.Product.Community", "VS 2026",
                                 prerelease=True)
    toolsets = [vswhere.InstalledToolset(preview, "14.44.35207"), vswhere.InstalledToolset(release, "14.44.35207")]
    assert msvc.choose(matrix.get_cell("13.0"), toolsets).instance is release
