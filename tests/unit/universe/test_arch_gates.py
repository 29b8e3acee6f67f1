"""The project's architecture gates (ci/universe/arch_gates/) and what ``older-majors-sass`` keeps for them
(ci/universe/archs.py ``per_generation``): every GPU of the range a thinned half serves runs code that takes the
same side of each gate as code built for it."""

from __future__ import annotations

from pathlib import Path

import pytest

from ci.linux import routes
from ci.universe import arch_gates, archs, matrix, shapes, targets
from ci.universe.arch_gates import Gate, sources
from ci.universe.project import reading

ROOT = Path(__file__).resolve().parents[3]
FIXTURE = ROOT / "tests" / "fixtures" / "arch_gated"
TORCH_210 = matrix.get_torch("2.10").sass


def _gates(text: str) -> tuple[Gate, ...]:
    return tuple(sorted(sources.gates_in(text, "k.cu")))


def test_every_spelling_of_a_comparison_is_read() -> None:
    text = ("#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890\n"
            "#elif 800 <= __CUDA_ARCH__\n"
            "#define MY_ARCH __CUDA_ARCH__\n"
            "#if MY_ARCH == 750U\n"
            "#if CUDA_ARCH < 700 // __CUDA_ARCH__ >= 1200 in a comment is not a gate\n"
            "/* #if __CUDA_ARCH__ >= 1000 */\n"
            "#if __CUDA_ARCH_SPECIFIC__ == 900\n"
            "#if OTHER >= 800 && x >> 3\n")
    found = _gates(text)
    assert [g.text() for g in found] == ["__CUDA_ARCH__ < 700", "__CUDA_ARCH__ == 750", "__CUDA_ARCH__ >= 800",
                                         "__CUDA_ARCH__ >= 890", "__CUDA_ARCH_SPECIFIC__ == 900"]
    assert {g.text(): g.where for g in found}["__CUDA_ARCH__ >= 800"] == "k.cu:2"
    specific = found[-1]
    assert specific.holds("9.0a") and not specific.holds("9.0")  # defined only in an arch-specific build
    assert found[3].holds("8.9") and found[3].holds("10.0") and not found[3].holds("8.6")
    assert _gates("int main() { return 0; }") == ()


def test_only_the_projects_own_sources_are_read(tmp_path: Path) -> None:
    (tmp_path / "csrc").mkdir()
    (tmp_path / "csrc" / "k.cu").write_text("#if __CUDA_ARCH__ >= 890\n#endif\n")
    for skipped, name in (("build/temp", "k.cu"), (".git/x", "k.h"), ("vendored", "k.cuh"), ("venv/lib", "k.h")):
        (tmp_path / skipped).mkdir(parents=True)
        (tmp_path / skipped / name).write_text("#if __CUDA_ARCH__ == 610\n#endif\n")
    (tmp_path / "vendored" / "pyproject.toml").write_text("")  # a project of its own
    (tmp_path / "venv" / "pyvenv.cfg").write_text("")
    (tmp_path / "notes.txt").write_text("__CUDA_ARCH__ == 520")
    assert [g.text() for g in sources.project_gates(tmp_path)] == ["__CUDA_ARCH__ >= 890"]
    (tmp_path / "csrc" / "k.cu").write_text("#if __CUDA_ARCH__ >= 800\n#endif\n")  # a changed file is read again
    assert [g.text() for g in sources.project_gates(tmp_path)] == ["__CUDA_ARCH__ >= 800"]


def _half(cuda: str, gates: tuple[Gate, ...]) -> shapes.Cell:
    return archs.per_generation(archs.with_torch_archs(matrix.get_cell(cuda), TORCH_210), gates)


def test_without_gates_the_half_is_one_sass_per_generation() -> None:
    half = _half("cu128", ())
    assert (half.sass_archs, half.ptx_arch) == (("7.0", "8.0", "9.0"), "9.0")


@pytest.mark.parametrize(("source", "cu128", "cu124"), [
    ("#if __CUDA_ARCH__ >= 890", ("7.0", "8.0", "8.9", "9.0"), ("7.0", "8.0", "8.9", "9.0")),
    ("#if __CUDA_ARCH__ == 750", ("7.0", "7.5", "8.0", "9.0"), ("7.0", "7.5", "8.0", "9.0")),
    ("#if __CUDA_ARCH__ < 800", ("7.0", "8.0", "9.0"), ("7.0", "8.0", "9.0")),  # a generation floor already
    ("#if __CUDA_ARCH__ > 860", ("7.0", "8.0", "8.7", "9.0"), ("7.0", "8.0", "8.7", "9.0")),
    # Blackwell runs the PTX of 9.0 otherwise: CUDA 12.8 keeps its SASS, CUDA 12.4 cannot build it.
    ("#if __CUDA_ARCH__ >= 1000", ("7.0", "8.0", "9.0", "10.0", "12.0"), ("7.0", "8.0", "9.0")),
    ("#if __CUDA_ARCH_SPECIFIC__ == 900", ("7.0", "8.0", "9.0"), ("7.0", "8.0", "9.0")),
])
def test_each_gate_keeps_the_architecture_whose_side_differs(source: str, cu128: tuple[str, ...],
                                                              cu124: tuple[str, ...]) -> None:
    gates = _gates(source)
    for cuda, expected in (("cu128", cu128), ("cu124", cu124)):
        half = _half(cuda, gates)
        assert half.sass_archs == expected and half.ptx_arch == "9.0", cuda
        # Every GPU the half builds for runs code that takes its own side of every gate.
        buildable = [a for a in archs.toolkit_archs(half.cuda) or () if archs.buildable(half.cuda, a)
                     and archs._arch_key("7.0") <= archs._arch_key(a) <= archs._arch_key(TORCH_210[-1])]
        for gpu in buildable:
            ran = archs.runner(gpu, half.sass_archs, half.ptx_arch)
            assert ran is not None and arch_gates.behaviour(ran, gates) == arch_gates.behaviour(gpu, gates), \
                (cuda, gpu, ran)
    lost = archs.lost_paths(_half("cu124", gates), TORCH_210, gates)
    assert all(not found for gpu, found in lost.items() if gpu not in ("10.0", "12.0"))


def test_what_a_thinned_gpu_loses_is_said() -> None:
    gates = _gates("#if __CUDA_ARCH__ >= 890\n#if __CUDA_ARCH__ >= 1000\n")
    text = archs.thinned_text(_half("cu124", gates), TORCH_210, gates)
    assert text == ("7.5 runs the 7.0 build, 8.6 the 8.0 one: its scheduling, and the paths the toolkit's and torch's "
                    "headers gate above it; beyond CUDA 12.4 the sources' __CUDA_ARCH__ >= 1000 take their other side; "
                    "kept 8.9 for the sources' __CUDA_ARCH__ >= 890 (k.cu:1), __CUDA_ARCH__ >= 1000 (k.cu:2)")
    assert archs.thinned_text(_half("cu128", ()), TORCH_210, ()) == (
        "7.5 runs the 7.0 build, 8.6 the 8.0 one: its scheduling, and the paths the toolkit's and torch's headers gate "
        "above it")


def test_the_fixtures_cuda_12_half_keeps_8_9_and_matrix_says_why() -> None:
    config = reading.load(FIXTURE)
    by_id = {t.id: t for t in targets.platform_targets(config, "linux")}
    half = by_id["arch_gated-stable-cu128-cp310abi3-linux_x86_64"]
    assert (half.cell.sass_archs, half.cell.ptx_arch) == (("7.0", "8.0", "8.9", "9.0"), "9.0")
    stand_in = targets.stand_in(half)
    assert stand_in is not None and stand_in.cell.sass_archs == ("7.0", "8.0", "8.9", "9.0")
    said = routes.archs_source(half)
    assert "one SASS per GPU generation (older-majors-sass): 7.5 runs the 7.0 build, 8.6 the 8.0 one" in said
    assert "kept 8.9 for the sources' __CUDA_ARCH__ >= 800 (arch_gated/csrc/gated.cu:" in said
    # The newest major keeps torch's own list, and the gated 8.9 beside it: an Ada GPU would run sm_86's side else.
    newest = by_id["arch_gated-stable-cu130-cp310abi3-linux_x86_64"].cell.sass_archs
    assert newest == tuple(sorted({*matrix.get_torch("2.11").sass, "8.9"}, key=lambda a: tuple(map(int, a.split(".")))))


def test_fusedops_sources_have_no_gate_so_its_half_is_unchanged() -> None:
    assert sources.project_gates(ROOT) == ()
    fusedops = reading.load(ROOT)
    half = next(t for t in targets.platform_targets(fusedops, "linux") if t.id.startswith("fusedops-stable-cu128-")
                and t.arch == "x86_64")
    assert (half.cell.sass_archs, half.cell.ptx_arch) == (("7.0", "8.0", "9.0"), "9.0")
    newest = targets.default_target(fusedops)
    assert newest.cell.sass_archs == matrix.get_torch(newest.torch).sass  # no gate: torch's own list


# --- gates as modern code writes them (issue 45, item 7) -----------------------------------------------------------

MODERN = """#include <nv/target>
#define SM_ADA 890
#define AT_LEAST(x) (defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= (x))
#define PROVIDES(n) NV_PROVIDES_SM_##n
__device__ int a() { NV_IF_ELSE_TARGET(NV_PROVIDES_SM_89, (return 987650001;), (return 0;)) }
__device__ int b() { NV_IF_TARGET(NV_IS_EXACTLY_SM_90, (return 987650002;)) return 0; }
__device__ int c() { NV_IF_TARGET(NV_HAS_FEATURE_SM_90a, (return 987650003;)) return 0; }
__device__ int d() { NV_IF_TARGET(PROVIDES(120), (return 987650004;)) return 0; }
#if (__CUDA_ARCH__) >= 800
__device__ int e() { return 987650005; }
#endif
#if __CUDA_ARCH__ / 10 >= 86
__device__ int f() { return 987650006; }
#endif
#if AT_LEAST(750) && !defined(NOTHING)
__device__ int g() { return 987650007; }
#endif
#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ / 100) == 10
__device__ int h() { return 987650008; }
#endif
#if __CUDA_ARCH__ >= SM_ADA + 10
__device__ int i() { return 987650009; }
#endif
#ifdef __CUDA_ARCH_FEAT_SM100_ALL
__device__ int j() { return 987650010; }
#endif
"""


def test_modern_spellings_are_read_as_cccl_defines_them() -> None:
    found = {g.text(): g.where for g in _gates(MODERN)}
    assert found == {"__CUDA_ARCH__ >= 890": "k.cu:5", "__CUDA_ARCH__ == 900": "k.cu:6",
                     "__CUDA_ARCH_FEAT_SM90_ALL == 900": "k.cu:7", "__CUDA_ARCH__ >= 1200": "k.cu:8",
                     "__CUDA_ARCH__ >= 800": "k.cu:9", "__CUDA_ARCH__ >= 860": "k.cu:12",
                     "__CUDA_ARCH__ >= 750": "k.cu:15", "__CUDA_ARCH__ >= 1000": "k.cu:18",
                     "__CUDA_ARCH__ >= 1100": "k.cu:18", "__CUDA_ARCH__ >= 900": "k.cu:21",
                     "__CUDA_ARCH_FEAT_SM100_ALL == 1000": "k.cu:24"}


#: The architectures CUDA 13.0's nvcc compiles, arch-specific ones among them.
NVCC_ARCHS = ("7.5", "8.0", "8.6", "8.9", "9.0", "9.0a", "10.0", "10.0a", "12.0")


def test_the_reading_matches_what_nvcc_compiles_for_each_architecture(tmp_path: Path) -> None:
    """The real CUDA 13.0 nvcc preprocesses MODERN for each architecture (CCCL's <nv/target> from its own headers):
    two architectures compile the same code exactly when the read gates say they take the same sides."""
    import re
    import subprocess

    from ci.toolchain import toolkit

    cell = matrix.get_cell("13.0")
    root = toolkit.cached_toolkit(cell)
    if root is None:
        pytest.skip("the pinned CUDA 13.0 toolkit is not in the farm's cache (nox -s build or nox -s toolkit "
                    "installs it); not downloaded by a test")
    nvcc = root / cell.toolkit.home_subdir / "bin" / "nvcc"
    (tmp_path / "k.cu").write_text(MODERN)
    compiled = {}
    for arch in NVCC_ARCHS:
        sm = "sm_" + arch.replace(".", "")
        gencode = f"-gencode=arch=compute_{sm[3:]},code={sm}"
        subprocess.run([str(nvcc), "-E", gencode, "k.cu", "-o", f"{sm}.ii"], cwd=tmp_path, check=True,
                       capture_output=True)
        compiled[arch] = frozenset(re.findall(r"\b98765(\d\d\d\d)\b", (tmp_path / f"{sm}.ii").read_text()))
    gates = _gates(MODERN)
    assert len(set(compiled.values())) == 9, compiled  # every architecture compiles its own code here
    for a in NVCC_ARCHS:
        for b in NVCC_ARCHS:
            same_code = compiled[a] == compiled[b]
            assert same_code == (arch_gates.behaviour(a, gates) == arch_gates.behaviour(b, gates)), (a, b)


@pytest.mark.parametrize("source", [
    "NV_IF_TARGET(NV_PROVIDES_SM_89, (x();))", "#if __CUDA_ARCH__ / 10 >= 89",
    "#if (__CUDA_ARCH__) >= 890", "#define AT(x) (__CUDA_ARCH__ >= (x))\n#if AT(890)",
])
def test_an_ada_gate_keeps_8_9_in_the_thinned_half_however_it_is_written(source: str) -> None:
    """As ``#if __CUDA_ARCH__ >= 890`` does (test_each_gate_keeps_the_architecture_whose_side_differs)."""
    assert _half("cu124", _gates(source)).sass_archs == ("7.0", "8.0", "8.9", "9.0")


def _project(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


def test_an_alias_defined_in_an_included_header_is_read(tmp_path: Path) -> None:
    _project(tmp_path, {"csrc/include/arch.h": "#pragma once\n#define ARCH __CUDA_ARCH__\n#define SM_ADA 890\n",
                        "csrc/k.cu": '#include "include/arch.h"\n\n#if ARCH >= SM_ADA\n#endif\n'})
    reading = sources.read_project(tmp_path)
    assert [(g.text(), g.where) for g in reading.gates] == [("__CUDA_ARCH__ >= 890", "csrc/k.cu:3")]
    assert reading.unread == ()


def test_a_vendored_librarys_gates_count_where_the_project_compiles_it(tmp_path: Path) -> None:
    """third_party/mma is a project of its own (its pyproject.toml): its headers count when the project's sources
    include them, its sources when setup.py names them; what nothing reaches does not count."""
    _project(tmp_path, {
        "setup.py": ('sources = ["csrc/k.cu", "third_party/mma/src/extra.cu"]\n'
                     'include_dirs = ["third_party/mma/include"]\n'),
        "csrc/k.cu": "#include <mma/mma.h>\n#include <torch/extension.h>\n",
        "third_party/mma/pyproject.toml": "",
        "third_party/mma/include/mma/mma.h": '#include "detail.h"\n#if __CUDA_ARCH__ >= 800\n#endif\n',
        "third_party/mma/include/mma/detail.h": "#if __CUDA_ARCH__ == 750\n#endif\n",
        "third_party/mma/include/mma/unused.h": "#if __CUDA_ARCH__ >= 1000\n#endif\n",
        "third_party/mma/src/extra.cu": "#if __CUDA_ARCH__ >= 890\n#endif\n",
        "third_party/mma/src/tool.cu": "#if __CUDA_ARCH__ >= 1200\n#endif\n",
    })
    assert [(g.text(), g.where) for g in sources.project_gates(tmp_path)] == [
        ("__CUDA_ARCH__ == 750", "third_party/mma/include/mma/detail.h:1"),
        ("__CUDA_ARCH__ >= 800", "third_party/mma/include/mma/mma.h:2"),
        ("__CUDA_ARCH__ >= 890", "third_party/mma/src/extra.cu:1")]


def test_a_use_the_reader_cannot_resolve_is_named_not_dropped(tmp_path: Path) -> None:
    _project(tmp_path, {"csrc/k.cu": (
        "#ifdef __CUDA_ARCH__\n"                                       # device code or not: no gate
        "#if defined(__CUDA_ARCH__) && __CUDA_ARCH__\n#endif\n"
        "constexpr int kMin = 800;\n"
        "__device__ bool ok() { return __CUDA_ARCH__ >= kMin; }\n"     # 5: a C++ constant
        "template <int A = __CUDA_ARCH__> __device__ void run();\n"    # 6: a template argument
        "__device__ void go() { if (__CUDA_ARCH__) { run(); } }\n"     # a truth value
        "#define GATE(x) (__CUDA_ARCH__ >= x)\n"
        "#if GATE(SOMETHING)\n#endif\n"                                # 9: an unknown macro
        "#endif\n")})
    reading = sources.read_project(tmp_path)
    assert reading.gates == ()
    assert [u.where for u in reading.unread] == ["csrc/k.cu:5", "csrc/k.cu:6", "csrc/k.cu:9"]
    assert reading.unread[0].text() == "csrc/k.cu:5 (__device__ bool ok() { return __CUDA_ARCH__ >= kMin; })"
