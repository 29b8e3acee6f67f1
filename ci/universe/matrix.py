"""The farm's universe of versions: the one source of truth for every build.

* A *cell* (``CELLS``) is one CUDA toolkit (version and where it comes from), the
  CUDA architectures it targets, the host compilers it accepts (gcc on Linux,
  an MSVC range on Windows), the base image of its container builds, and the
  torch release and Python a stable-ABI project builds against in it.
* ``TORCH_RELEASES`` are the torch releases on PyPI with the CUDA version of
  their wheels and the CPython versions they have wheels for: GIL builds, and
  free-threaded ones (``free_threaded``: ``cp313t`` targets of their own).

Projects never list versions of their own beyond what they want covered: a
project's targets (``ci/universe/targets/``) are this universe filtered by its
configuration (``ci/universe/project/``). Adding a toolkit is one entry in ``CELLS``;
a new torch release is one entry in ``TORCH_RELEASES``, written from PyPI by ``cuda-ext-farm adopt-torch``
(``--check`` compares the table with PyPI; ``ci/universe/adoption.py``).

Why one module, not a package of tables and functions: the file is the truth's unit. ``adopt-torch`` rewrites
its entries in place (``adoption.MATRIX_FILE``), the generated workflows rebuild the images when it changes and the
adoption job commits it by this path (``ci/gha/``), and its functions are the tables' own lookups and their
validation (``get_cell``, ``get_torch``, ``validate``: each error names the table to edit), with no other
responsibility to separate (the command line's overrides of a cell are ``selection.resolve``). About two
thirds of its lines are the tables, a quarter their lookups.

This module only uses the standard library so ``noxfile.py`` can import it
before any virtual environment exists.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable, Mapping

from ci.errors import MatrixError
from ci.universe.shapes import (
    Cell,
    Toolkit,
    TorchRelease,
    WindowsFacts,
    minor_of,
    version_key,
)

#: The glibc floor of every release wheel: the manylinux_2_28 bases of the generated workflows (ci/linux/routes.py
#: describes the routes that give it; ci/audit/glibc_floor.py checks it).
RELEASE_FLOOR = "manylinux_2_28"
#: PyTorch's own indexes (``/cpu``, ``/cu130``, ...): where the workflows and the release's import tests get torch.
PYTORCH_INDEX = "https://download.pytorch.org/whl"
#: PyPI's simple index: where the aarch64 import tests get torch (PyPI's aarch64 torch 2.11+ is a CUDA build).
PYPI_INDEX = "https://pypi.org/simple"
#: The Python each Debian suite brings (the interpreter cibuildwheel drives).
DEBIAN_PYTHON = {"bookworm": "3.11", "trixie": "3.13"}


_PY_3_10_14 = ("3.10", "3.11", "3.12", "3.13", "3.14")

#: torch releases on PyPI (newest patch of each minor), written from PyPI's metadata by ``cuda-ext-farm
#: adopt-torch`` (``--check`` says when they differ). PyPI's wheels of 2.8-2.10 are CUDA 12.8 builds, 2.11-2.14
#: CUDA 13.0, 2.15 CUDA 13.2; ``cxx``: the C++ standard their headers need (20 from 2.12); ``free_threaded``: the
#: CPythons whose free-threaded build (``cp313-cp313t``) has wheels (2.12's patch release dropped 3.13t).
#: The SASS lists are those of the cp312 manylinux_2_28 wheels' ``torch._C._cuda_getArchFlags()`` (the string
#: ``torch.cuda.get_arch_list()`` returns on a GPU machine), read from PyPI by ``nox -s torch-archs``, which also
#: says when this table and PyPI disagree. None of them carries PTX. PyPI's aarch64 wheels of 2.8-2.10 are CPU builds.
_CU128_SASS = ("7.0", "7.5", "8.0", "8.6", "9.0", "10.0", "12.0")
_CU130_SASS = ("7.5", "8.0", "8.6", "9.0", "10.0", "12.0")
_CU130_SASS_AARCH64 = ("8.0", "9.0", "10.0", "11.0", "12.0")
TORCH_RELEASES: tuple[TorchRelease, ...] = (
    TorchRelease("2.8.0", "12.8", ("3.9", "3.10", "3.11", "3.12", "3.13"), free_threaded=("3.13",), sass=_CU128_SASS),
    TorchRelease("2.9.1", "12.8", _PY_3_10_14, free_threaded=("3.13", "3.14"), sass=_CU128_SASS),
    TorchRelease("2.10.0", "12.8", _PY_3_10_14, free_threaded=("3.13", "3.14"), sass=_CU128_SASS),
    TorchRelease("2.11.0", "13.0", _PY_3_10_14, free_threaded=("3.13", "3.14"), aarch64=True, sass=_CU130_SASS,
                 sass_aarch64=_CU130_SASS_AARCH64),
    TorchRelease("2.12.1", "13.0", _PY_3_10_14, free_threaded=("3.14",), aarch64=True, sass=_CU130_SASS,
                 sass_aarch64=_CU130_SASS_AARCH64, cxx=20),
    TorchRelease("2.13.0", "13.0", _PY_3_10_14, free_threaded=("3.14",), aarch64=True, sass=_CU130_SASS,
                 sass_aarch64=_CU130_SASS_AARCH64, cxx=20),
    TorchRelease("2.14.1", "13.0", _PY_3_10_14, free_threaded=("3.14",), aarch64=True, sass=_CU130_SASS,
                 sass_aarch64=_CU130_SASS_AARCH64, cxx=20),
    TorchRelease("2.15.0", "13.2", ("3.11", "3.12", "3.13", "3.14", "3.15"), free_threaded=("3.14", "3.15"),
                 aarch64=True, sass=_CU130_SASS, sass_aarch64=_CU130_SASS_AARCH64, cxx=20),
)

#: The CUDA builds of each torch minor on PyTorch's own index (``/whl/cu126`` ...), beside PyPI's (its entry's
#: ``cuda``): a wheel that admits the release meets each one's CUDA runtime. From PyTorch's release matrix (RELEASE.md
#: and its CUDA RFCs; the index itself is out of the farm machines' reach). 2.15's are not known yet: PyPI's alone.
PYTORCH_INDEX_CUDA: Mapping[str, tuple[str, ...]] = {
    "2.8": ("12.6", "12.8", "12.9"), "2.9": ("12.6", "12.8", "13.0"), "2.10": ("12.6", "12.8", "13.0"),
    "2.11": ("12.6", "12.8", "13.0"), "2.12": ("12.6", "13.0", "13.2"), "2.13": ("12.6", "13.0", "13.2"),
    "2.14": ("12.6", "13.0", "13.2"),
}
#: The CUDA runtime wheel (``libcudart.so.<major>``) torch's builds of each CUDA version pin (cu126: 12.6.77; cu130:
#: ``cuda-toolkit[cudart]==13.0.2``, which pins 13.0.96): what the audit resolves a merged wheel's half against
#: (ci/audit/cuda_majors.py, the oldest minor of each major; locked as ``cudart-cu<XY>``).
CUDA_RUNTIMES: Mapping[str, str] = {
    "12.6": "nvidia-cuda-runtime-cu12==12.6.77", "12.8": "nvidia-cuda-runtime-cu12==12.8.90",
    "12.9": "nvidia-cuda-runtime-cu12==12.9.79", "13.0": "nvidia-cuda-runtime==13.0.96",
    "13.2": "nvidia-cuda-runtime==13.2.86",
}

#: Compatibility view used by older callers: torch minor -> CUDA version of its PyPI wheels.
TORCH_CUDA: Mapping[str, str] = {r.minor: r.cuda for r in TORCH_RELEASES}

#: The oldest CPython the abi3 wheels support (``Py_LIMITED_API``) unless a project says otherwise.
PYTHON_LIMITED_API = "3.10"

CUDA13_SASS = ("7.5", "8.0", "8.6", "8.9", "9.0", "10.0", "12.0")


def _pypi_cuda13(nvcc: str, runtime: str, cccl: str, libs: tuple[str, ...]) -> Toolkit:
    return Toolkit(
        kind="pypi",
        packages=(
            f"nvidia-cuda-nvcc=={nvcc}",
            f"nvidia-nvvm=={nvcc}",
            f"nvidia-cuda-crt=={nvcc}",
            f"nvidia-cuda-runtime=={runtime}",
            f"nvidia-cuda-cccl=={cccl}",
        ),
        home_subdir="nvidia/cu13",
        library_headers=libs,
    )


#: cuBLAS, cuSPARSE and cuSOLVER headers (what ATen/cuda/CUDAContext.h includes),
#: pinned to the versions torch 2.11's CUDA wheels install.
CUDA13_LIBRARY_HEADERS = (
    "nvidia-cublas==13.1.0.3",
    "nvidia-cusparse==12.6.3.3",
    "nvidia-cusolver==12.0.4.66",
)

MANYLINUX_2_28 = "quay.io/pypa/manylinux_2_28_x86_64"
#: The same base for linux_aarch64 (sbsa): what the release workflow's aarch64 jobs build in, on arm64 runners.
MANYLINUX_2_28_AARCH64 = "quay.io/pypa/manylinux_2_28_aarch64"


def base_image_for_arch(base_image: str, arch: str) -> str:
    """A manylinux base for another CPU architecture (``…_x86_64`` -> ``…_aarch64``); other bases unchanged."""
    if base_image.startswith("quay.io/pypa/manylinux") and arch != "x86_64":
        return re.sub(r"_x86_64(?=$|:)", f"_{arch}", base_image)
    return base_image


#: crt/host_config.h of NVIDIA's win_amd64 wheels (windows/README.md): CUDA 12.4 accepts VS 2017-2022
#: (_MSC_VER 1910-1949), 13.0 VS 2019-2022 (1920-1949), 13.2 and 13.5 VS 2019-2026 (1920-1959). CUDA 12.8 is
#: taken to keep 12.4's range (its installer could not be read here: NVIDIA's site is unreachable);
#: windows/hostconfig.py checks the installed toolkit's own header against it on the first Windows run.
_MSC_CUDA_12_4 = (1910, 1950)
_MSC_CUDA_12_8 = (1910, 1950)
_MSC_CUDA_13_0 = (1920, 1950)
_MSC_CUDA_13_2 = (1920, 1960)
#: The VS 2022 17.14 toolset: every CUDA cell accepts it, GitHub's windows-2022 image has it as default and
#: windows-2025 (VS 2026) side by side, and a wheel built with it needs no newer VC++ runtime than torch's.
_TOOLSET = "14.44"

CELLS: tuple[Cell, ...] = (
    Cell(
        cuda="13.0",
        toolkit=_pypi_cuda13(nvcc="13.0.88", runtime="13.0.96", cccl="13.0.85", libs=CUDA13_LIBRARY_HEADERS),
        torch="2.11.0",
        sass_archs=CUDA13_SASS,
        ptx_arch="12.0",
        python="3.12",
        base_image=MANYLINUX_2_28,
        host_compiler="gcc-12",
        release=True,
        windows=WindowsFacts(msc_ver=_MSC_CUDA_13_0, toolset=_TOOLSET, toolkit="pypi"),
        aarch64=True,
    ),
    Cell(
        cuda="13.2",
        toolkit=_pypi_cuda13(nvcc="13.2.86", runtime="13.2.86", cccl="13.2.86", libs=CUDA13_LIBRARY_HEADERS),
        torch="2.11.0",
        sass_archs=CUDA13_SASS,
        ptx_arch="12.0",
        python="3.12",
        base_image=MANYLINUX_2_28,
        host_compiler="gcc-12",
        windows=WindowsFacts(msc_ver=_MSC_CUDA_13_2, toolset=_TOOLSET, toolkit="pypi"),
        aarch64=True,
    ),
    Cell(
        cuda="13.5",
        toolkit=_pypi_cuda13(nvcc="13.5.37", runtime="13.5.37", cccl="13.3.5.0.6", libs=CUDA13_LIBRARY_HEADERS),
        torch="2.11.0",
        sass_archs=CUDA13_SASS,
        ptx_arch="12.0",
        python="3.12",
        base_image=MANYLINUX_2_28,
        host_compiler="gcc-12",
        windows=WindowsFacts(msc_ver=_MSC_CUDA_13_2, toolset=_TOOLSET, toolkit="pypi"),
        aarch64=True,
    ),
    # CUDA 12 as torch ships it: torch 2.8, 2.9 and 2.10's Linux wheels on PyPI pin CUDA 12.8 Update 1
    # (nvidia-cuda-runtime-cu12==12.8.90, nvidia-cuda-nvrtc-cu12==12.8.93, nvidia-cublas-cu12==12.8.4.1,
    # nvidia-cusparse-cu12==12.5.8.93, nvidia-cusolver-cu12==11.7.3.90). The release route: NVIDIA's RPM
    # repository (rhel8, x86_64; sbsa for aarch64) on the manylinux_2_28 base, so the wheels are
    # manylinux_2_28 like torch's. SASS through Blackwell (10.0, 12.0), as torch's cu128 builds.
    Cell(
        cuda="12.8",
        toolkit=Toolkit(
            kind="nvidia-repo",
            # The component versions of CUDA 12.8.1 (the same as torch's PyPI pins above). The RPM release
            # suffix (-1) and the exact files cannot be resolved here: NVIDIA's site is unreachable from this
            # machine, so they were not checked against the repository's metadata; dnf refuses a spec the
            # repository lacks, and checks every package's signature with the key the repository names.
            packages=(
                "cuda-nvcc-12-8-12.8.93-1",
                "cuda-cudart-devel-12-8-12.8.90-1",
                "cuda-cccl-12-8-12.8.90-1",
                "libcublas-devel-12-8-12.8.4.1-1",
                "libcusparse-devel-12-8-12.5.8.93-1",
                "libcusolver-devel-12-8-11.7.3.90-1",
            ),
        ),
        torch="2.10.0",
        sass_archs=("7.5", "8.0", "8.6", "8.9", "9.0", "10.0", "12.0"),
        ptx_arch="12.0",
        python="3.12",
        base_image=MANYLINUX_2_28,
        host_compiler="gcc-13",
        release=True,
        # CUDA 12's Windows wheels have no nvcc: NVIDIA's installer, only nvcc, the runtime, CCCL (thrust_)
        # and the headers ATen/cuda/CUDAContext.h includes.
        windows=WindowsFacts(
            msc_ver=_MSC_CUDA_12_8, toolset=_TOOLSET, toolkit="nvidia-installer",
            packages=("nvcc_12.8", "cudart_12.8", "thrust_12.8", "cublas_dev_12.8", "cusparse_dev_12.8",
                      "cusolver_dev_12.8"),
            installer="https://developer.download.nvidia.com/compute/cuda/12.8.1/network_installers/"
                      "cuda_12.8.1_windows_network.exe",
            # The SHA-256 several other projects record for this file (14,404,064 bytes, signed by NVIDIA); not
            # checked against a download here (no NVIDIA site is reachable): the first Windows run checks it.
            installer_hash="sha256:779bee8ff557255c1cf5f36e0230f081675b9bb41e44be38839920cd5209bdeb",
        ),
    ),
    # CUDA 12.4 from Debian: the tested local stand-in for cu128 (no NVIDIA download site is reachable here,
    # Debian's mirror is). Not a release cell: its wheels link the Debian trixie base's glibc, above the
    # release's manylinux_2_28, and 12.4 has no Blackwell SASS (those GPUs JIT the sm_90 PTX).
    Cell(
        cuda="12.4",
        toolkit=Toolkit(kind="debian", packages=("nvidia-cuda-toolkit=12.4.131~12.4.1-2",)),
        torch="2.10.0",
        sass_archs=("7.5", "8.0", "8.6", "8.9", "9.0"),
        ptx_arch="9.0",
        python="3.13",
        base_image=MANYLINUX_2_28,
        host_compiler="gcc-13",
        debian_suite="trixie",
        release=False,
        stand_in_for="cu128",
        windows=WindowsFacts(
            msc_ver=_MSC_CUDA_12_4, toolset=_TOOLSET, toolkit="nvidia-installer",
            packages=("nvcc_12.4", "cudart_12.4", "thrust_12.4", "cublas_dev_12.4", "cusparse_dev_12.4",
                      "cusolver_dev_12.4"),
            installer="https://developer.download.nvidia.com/compute/cuda/12.4.1/network_installers/"
                      "cuda_12.4.1_windows_network.exe",
            # The MD5 other projects pin for this file (NVIDIA publishes MD5s only); not checked against a download
            # here (no NVIDIA site was reachable): the first Windows run checks it and prints the SHA-256 to pin.
            installer_hash="md5:8901c95cd9e20b8fc73fc76e96065d03",
        ),
    ),
)

#: Newest GCC major each CUDA release accepts as host compiler (NVIDIA's
#: installation guide; nvcc refuses newer ones).
MAX_GCC: Mapping[str, int] = {"12.4": 13, "12.8": 14, "13.0": 15, "13.2": 15, "13.5": 15}
MIN_GCC = 6

#: cuobjdump reads the fatbinaries of every 13.x toolkit; PyPI has it from 13.2.
CUOBJDUMP_REQUIREMENT = "nvidia-cuda-cuobjdump==13.2.78"

#: Libraries that come from the user's torch install and must never be bundled.
TORCH_LIBRARIES = (
    "libc10.so",
    "libc10_cuda.so",
    "libtorch.so",
    "libtorch_cpu.so",
    "libtorch_cuda.so",
    "libtorch_python.so",
    "libshm.so",
    "libtorch_global_deps.so",
)


def cuda_libraries(cuda_major: int) -> tuple[str, ...]:
    """CUDA sonames that torch's CUDA wheels provide (so extensions may link them, never bundle them)."""
    if cuda_major >= 13:
        return ("libcudart.so.13", "libcublas.so.13", "libcublasLt.so.13", "libcusparse.so.12",
                "libcusolver.so.12", "libcufft.so.12", "libcurand.so.10", "libnvrtc.so.13", "libnvToolsExt.so.1",
                "libnvJitLink.so.13", "libcudnn.so.9", "libnccl.so.2", "libcuda.so.1")
    return ("libcudart.so.12", "libcublas.so.12", "libcublasLt.so.12", "libcusparse.so.12", "libcusolver.so.11",
            "libcufft.so.11", "libcurand.so.10", "libnvrtc.so.12", "libnvToolsExt.so.1", "libnvJitLink.so.12",
            "libcudnn.so.9", "libnccl.so.2", "libcuda.so.1")


#: NVIDIA's RPM repository for RHEL 8 (the manylinux_2_28 bases are AlmaLinux 8): one folder per architecture.
NVIDIA_REPO = "https://developer.download.nvidia.com/compute/cuda/repos/rhel8"
NVIDIA_REPO_ARCH = {"x86_64": "x86_64", "aarch64": "sbsa"}


def nvidia_repo_file(arch: str = "x86_64") -> str:
    """The ``.repo`` file of NVIDIA's repository for ``arch`` (it names the signing key dnf checks)."""
    return f"{NVIDIA_REPO}/{NVIDIA_REPO_ARCH[arch]}/cuda-rhel8.repo"


def stand_in_of(cell: Cell) -> Cell | None:
    """The local stand-in of a release cell (``cu124`` for ``cu128``), or None."""
    return next((c for c in CELLS if c.stand_in_for == cell.name), None)


def unreachable_toolkit(cell: Cell) -> tuple[str, str]:
    """(what, fix) of the one line a command prints when ``cell``'s toolkit source cannot be reached from this
    machine: ``cell cu128 takes CUDA 12.8 from NVIDIA's repository, which this machine cannot reach`` and
    ``build its local stand-in with --cuda 12.4``."""
    source = {"nvidia-repo": "NVIDIA's repository", "debian": "Debian's packages", "pypi": "PyPI"}[cell.toolkit.kind]
    stand_in = stand_in_of(cell)
    fix = (f"build its local stand-in with --cuda {stand_in.cuda}" if stand_in is not None
           else "build it on a machine that reaches it")
    return f"cell {cell.name} takes CUDA {cell.cuda} from {source}, which this machine cannot reach", fix


def _known(values: Iterable[str]) -> str:
    return ", ".join(values)


def cells(names: Iterable[str] | None = None) -> tuple[Cell, ...]:
    """Return all cells or those named (by CUDA version ``13.0``, name ``cu130`` or major ``13``)."""
    if names is None:
        return CELLS
    return tuple(get_cell(n) for n in names)


def get_cell(key: str) -> Cell:
    """Find a cell by CUDA version (``13.0``), name (``cu130``) or major (``13`` = release cell)."""
    key = str(key).strip()
    for cell in CELLS:
        if key in (cell.cuda, cell.name):
            return cell
    if key.isdigit():
        majors = [c for c in CELLS if c.cuda_major == int(key)]
        release = [c for c in majors if c.release] or majors
        if release:
            return release[0]
    raise MatrixError(
        "unknown CUDA version", key or "empty",
        f"pick one of {_known(c.cuda for c in CELLS)} (or a major: "
        f"{_known(sorted({str(c.cuda_major) for c in CELLS}))}), or add a cell to CELLS in ci/universe/matrix.py",
    )


def get_torch(version: str) -> TorchRelease:
    """A torch release by ``2.11`` or ``2.11.0`` (a patch that is not the listed one is kept as asked)."""
    wanted = str(version).strip().split("+")[0]
    for release in TORCH_RELEASES:
        if wanted in (release.version, release.minor):
            return release
    for release in TORCH_RELEASES:
        if minor_of(wanted) == release.minor and len(wanted.split(".")) == 3:
            return dataclasses.replace(release, version=wanted)
    known = _known(r.minor for r in TORCH_RELEASES)
    newest = TORCH_RELEASES[-1].version
    newer = bool(re.fullmatch(r"\d+\.\d+(\.\d+)?", wanted)) and version_key(wanted) > version_key(newest)
    raise MatrixError(
        "unknown torch release", version or "empty",
        f"this farm knows torch {known}; for a newer one update the farm (its daily adopt-torch pull request adds "
        "each release PyPI gets), or run `cuda-ext-farm adopt-torch` in the farm's checkout" if newer
        else f"pick one of {known}",
    )


def torch_cuda_version(torch_version: str) -> str:
    """The CUDA version a torch release on PyPI is built with."""
    return get_torch(torch_version).cuda


def validate(cell: Cell) -> Cell:
    """Refuse cells that cannot produce a working wheel."""
    torch_cuda = torch_cuda_version(cell.torch)
    if int(torch_cuda.split(".")[0]) != cell.cuda_major:
        same_major = [r.minor for r in TORCH_RELEASES if r.cuda_major == cell.cuda_major]
        raise MatrixError(
            f"CUDA {cell.cuda} cannot be paired with torch {cell.torch}, which is built with CUDA {torch_cuda}",
            cell.name,
            f"an extension must use torch's CUDA major: pair CUDA {cell.cuda_major}.x with a torch built for "
            f"CUDA {cell.cuda_major} ({_known(same_major) or 'none known'})",
        )
    family, _, version = cell.host_compiler.partition("-")
    if family != "gcc" or not version.isdigit():
        raise MatrixError("host compiler must be written gcc-<major>", cell.host_compiler,
                          "fix the cell in ci/universe/matrix.py")
    newest = MAX_GCC.get(cell.cuda)
    if newest is None:
        raise MatrixError("no supported host-compiler range known for this CUDA version", cell.cuda,
                          "add it to MAX_GCC in ci/universe/matrix.py")
    if not MIN_GCC <= int(version) <= newest:
        raise MatrixError(
            f"host compiler is outside CUDA {cell.cuda}'s supported range gcc-{MIN_GCC} to gcc-{newest}",
            cell.host_compiler, "pick a gcc in that range; nvcc would refuse this one",
        )
    if cell.ptx_arch and cell.ptx_arch not in cell.sass_archs:
        raise MatrixError("ptx_arch must also be in sass_archs", cell.ptx_arch, "add it to the cell's sass_archs")
    for req in cell.toolkit.packages + cell.toolkit.library_headers:
        if cell.toolkit.kind == "pypi" and "==" not in req:
            raise MatrixError("toolkit package must be pinned with ==", req, "pin it in ci/universe/matrix.py")
    series = cell.cuda.replace(".", "-")
    for rpm in cell.toolkit.packages if cell.toolkit.kind == "nvidia-repo" else ():
        if not re.fullmatch(rf"[a-z][a-z0-9-]*-{series}-\d+(\.\d+)+-\d+", rpm):
            raise MatrixError(f"an NVIDIA-repository package must be pinned as <name>-{series}-<version>-<release>",
                              rpm, "pin it in ci/universe/matrix.py (dnf's name-version-release)")
    if cell.stand_in_for:
        stands_for = get_cell(cell.stand_in_for)
        if cell.release or not stands_for.release or stands_for.cuda_major != cell.cuda_major:
            raise MatrixError("a stand-in must be a non-release cell of its release cell's CUDA major", cell.name,
                              f"fix stand_in_for / release of {cell.name} in ci/universe/matrix.py")
    return cell
