"""Causes that survive mixed output and resource faults (ci/builds/failure/): resources first, then the cause whose
evidence comes last; download advice that works when followed.

The samples are real output captured here (paths shortened: ENV is the build environment's site-packages, SRC the
build's copy of the project, TMP a temporary folder), from:

* tests/fixtures/gencode_family built with `python -m build --no-isolation` against a toolkit without cusparse.h,
  its prebuilt-wheel download aimed at a port nothing listens on (127.0.0.1:9), as the fixture catches it and as
  the family's variant that falls back on any URLError does;
* sccache 0.16.0 with an unreachable WebDAV storage, pip's retry warning against the same port;
* g++ 12.2 and nvcc 13.0 on torch's headers: a cc1plus or cicc killed by signal 9 (the OOM killer's signal), a
  collect2 whose ld was killed, cc1plus under `ulimit -v`; gas, ld and Python's zipfile on a full 200 KiB tmpfs;
  `-std=c++17 -Werror` (g++) and `-Werror all-warnings` (nvcc) on torch 2.13's c10/core/AutogradState.h.

Two tests run the tools themselves (g++ under RLIMIT_AS; a cc1plus killed by SIGKILL) where torch's headers are at
hand.
"""

from __future__ import annotations

import os
import resource
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

from ci.builds import failure
from ci.builds.failure import download, resources
from ci.errors import CommandFailed

ROOT = Path(__file__).resolve().parents[3]
ENV = "/cache/envs/build-torch2.11.0-py3.11/lib/python3.11/site-packages"
SRC = "/cache/build/gencode_family/gencode_family-torch2.11-cu130-cp311-linux_x86_64/src"
FAMILY_SETUP = (ROOT / "tests" / "fixtures" / "gencode_family" / "setup.py").read_text()
#: The quotes gcc prints in a UTF-8 locale.
Q, E = "\u2018", "\u2019"

TIP = ("TIP pass --env-dir and --sdist-extract-dir to keep the build environment and sources, then see "
       "https://build.pypa.io/en/stable/how-to/troubleshooting.html#debug-a-failed-build for help debugging a failed "
       "build\nERROR Backend subprocess exited when trying to invoke build_wheel\n")

NINJA_TAIL = f"""ninja: build stopped: subcommand failed.
Traceback (most recent call last):
  File "{ENV}/torch/utils/cpp_extension.py", line 2774, in _run_ninja_build
    subprocess.run(
  File "/usr/lib/python3.11/subprocess.py", line 571, in run
    raise CalledProcessError(retcode, process.args,
subprocess.CalledProcessError: Command '['ninja', '-v', '-j', '2']' returned non-zero exit status 1.

The above exception was the direct cause of the following exception:

Traceback (most recent call last):
  File "{ENV}/torch/utils/cpp_extension.py", line 2791, in _run_ninja_build
    raise RuntimeError(message) from e
RuntimeError: Error compiling objects for extension

""" + TIP

FAMILY_START = """* Building wheel...
torch.__version__ = 2.11.0+cu130
running bdist_wheel
Guessing wheel URL: http://127.0.0.1:9/wheels/gencode_family-0.1.0+cu13torch2.11-cp311-cp311-linux_x86_64.whl
"""

#: The fixture as it is, offline: its bdist_wheel catches only HTTPError, so the download's failure ends the build.
FAMILY_OFFLINE = FAMILY_START + "error: <urlopen error [Errno 111] Connection refused>\n\n" + TIP

MISSING_CUSPARSE = f"""running build_ext
building 'gencode_family._C' extension
[1/2] c++ -MMD -MF {SRC}/build/temp.linux-x86_64-cpython-311/csrc/ops.o.d -I{ENV}/torch/include -c -c \
{SRC}/csrc/ops.cpp -o {SRC}/build/temp.linux-x86_64-cpython-311/csrc/ops.o -std=c++17
FAILED: {SRC}/build/temp.linux-x86_64-cpython-311/csrc/ops.o
In file included from {ENV}/torch/include/ATen/cuda/CUDAContext.h:4,
                 from {SRC}/csrc/ops.cpp:6:
{ENV}/torch/include/ATen/cuda/CUDAContextLight.h:10:10: fatal error: cusparse.h: No such file or directory
   10 | #include <cusparse.h>
      |          ^~~~~~~~~~~~
compilation terminated.
"""

#: The family's variant that falls back on any URLError: the download fails, the local build fails on its own, and
#: Python prints the download's traceback (handled) after the compiler's error.
FAMILY_FALLBACK = (FAMILY_START + "Precompiled wheel not found (<urlopen error [Errno 111] Connection refused>). "
                   "Building from source...\n" + MISSING_CUSPARSE + """ninja: build stopped: subcommand failed.
Traceback (most recent call last):
  File "/usr/lib/python3.11/urllib/request.py", line 1348, in do_open
    h.request(req.get_method(), req.selector, req.data, headers,
  File "/usr/lib/python3.11/socket.py", line 851, in create_connection
    raise exceptions[0]
ConnectionRefusedError: [Errno 111] Connection refused

During handling of the above exception, another exception occurred:

Traceback (most recent call last):
  File "<string>", line 114, in run
  File "/usr/lib/python3.11/urllib/request.py", line 1351, in do_open
    raise URLError(err)
urllib.error.URLError: <urlopen error [Errno 111] Connection refused>

During handling of the above exception, another exception occurred:

""" + NINJA_TAIL.split("\n", 1)[1])

SCCACHE_DOWN = """sccache: error: Server startup failed: cache storage failed to read: Unexpected (temporary) at \
read => send http request

Context:
   url: http://127.0.0.1:9/cache/.sccache_check
   called: http_util::Client::send
   service: webdav

Source:
   error sending request for url (http://127.0.0.1:9/cache/.sccache_check): client error (Connect): tcp connect \
error: Connection refused (os error 111)
"""

PIP_RETRY = ("WARNING: Retrying (Retry(total=0, connect=None, read=None, redirect=None, status=None)) after connection "
             "broken by 'NewConnectionError(\"HTTPConnection(host='127.0.0.1', port=9): Failed to establish a new "
             "connection: [Errno 111] Connection refused\")': /simple/nothing-here/\n")

COMPILE_ERROR = f"""[1/2] c++ -c {SRC}/csrc/ops.cpp -o {SRC}/build/temp/csrc/ops.o
FAILED: {SRC}/build/temp/csrc/ops.o
{SRC}/csrc/ops.cpp:24:3: error: 'at::Tensor' has no member named 'mutable_dat_ptr'
"""


def classify(output: str, **kwargs: object) -> failure.Cause | None:
    return failure.classify(output, source=SRC, build_script=FAMILY_SETUP, **kwargs)  # type: ignore[arg-type]


# --- downloads ------------------------------------------------------------------------------------------------


def test_the_download_advice_names_the_force_variable_with_the_literal_the_script_compares() -> None:
    cause = classify(FAMILY_OFFLINE)
    assert cause == failure.Cause(
        "the build tried to reach the network (a download during the build)",
        "http://127.0.0.1:9/wheels/gencode_family-0.1.0+cu13torch2.11-cp311-cp311-linux_x86_64.whl: error: <urlopen "
        "error [Errno 111] Connection refused>",
        'the build script forces a local build with GENCODE_FAMILY_FORCE_BUILD (it compares it with "TRUE"): set '
        'build-env = { GENCODE_FAMILY_FORCE_BUILD = "TRUE" } in [tool.cuda-ext-farm], so the farm compiles the project '
        "instead")
    assert "SKIP_CUDA_BUILD" not in cause.fix and "CXX11_ABI" not in cause.fix


def test_following_the_advice_builds_locally() -> None:
    """The fixture's own switch: with the advised value its bdist_wheel skips the download, with "1" it does not."""
    switch = download.forcing(FAMILY_SETUP)
    assert switch == download.Switch("GENCODE_FAMILY_FORCE_BUILD", "TRUE")
    script = FAMILY_SETUP.split("\ndef nvcc_version")[0].split("FORCE_BUILD = ", 1)[1].split("\n")[0]
    assert eval(script, {"os": _Environ({switch.name: "TRUE"})}) is True
    assert eval(script, {"os": _Environ({switch.name: "1"})}) is False


class _Environ:
    """``os`` for the fixture's one line: getenv from a given mapping."""

    def __init__(self, values: dict[str, str]) -> None:
        self.values = values

    def getenv(self, name: str, default: str | None = None) -> str | None:
        return self.values.get(name, default)


@pytest.mark.parametrize(("script", "switch"), [
    ('import os\nFORCE = os.environ.get("X_FORCE_BUILD", "FALSE").upper() == "TRUE"\n', ("X_FORCE_BUILD", "TRUE")),
    ('import os\nif os.getenv("X_BUILD_FROM_SOURCE", "0").lower() in ("1", "true", "yes"):\n    pass\n',
     ("X_BUILD_FROM_SOURCE", "1")),
    ('import os\nif int(os.environ.get("X_NO_PREBUILT", 0)) == 1:\n    pass\n', ("X_NO_PREBUILT", "1")),
    ('import os\nif "X_FORCE_COMPILE" in os.environ:\n    pass\n', ("X_FORCE_COMPILE", None)),
    ('import os\nif os.environ["X_OFFLINE"]:\n    pass\n', ("X_OFFLINE", None)),
    # Python 2 (does not parse): read by the text
    ('import os\nprint "building"\nif os.getenv("X_FORCE_BUILD", "no") == "yes": pass\n', ("X_FORCE_BUILD", "yes")),
])
def test_the_forcing_switch_and_its_literal(script: str, switch: tuple[str, str | None]) -> None:
    assert download.forcing(script) == download.Switch(*switch)


def test_a_variable_that_skips_cuda_is_never_the_advice() -> None:
    script = ('import os\nSKIP = os.getenv("X_SKIP_CUDA_BUILD", "FALSE") == "TRUE"\n'
              'ABI = os.getenv("X_FORCE_CXX11_ABI", "FALSE") == "TRUE"\nCUDA = os.getenv("FORCE_CUDA", "0") == "1"\n')
    assert download.forcing(script) is None
    cause = failure.classify(FAMILY_OFFLINE, build_script=script)
    assert cause is not None and "X_SKIP_CUDA_BUILD" not in cause.fix and "FORCE_CUDA" not in cause.fix
    assert "forces a local build" in cause.fix


@pytest.mark.parametrize("noise", [FAMILY_START + "Precompiled wheel not found (<urlopen error [Errno 111] Connection "
                                   "refused>). Building from source...\n", PIP_RETRY])
def test_a_download_the_build_went_on_without_is_not_the_cause(noise: str) -> None:
    cause = classify(noise + COMPILE_ERROR + NINJA_TAIL)
    assert cause is not None and cause.what == "the compiler failed"
    assert cause.value == "csrc/ops.cpp:24: 'at::Tensor' has no member named 'mutable_dat_ptr'"


def test_a_fallback_whose_local_build_fails_names_the_compilers_error_not_the_download() -> None:
    """The real mixed output: the download's traceback comes after the compiler's error, as a handled exception."""
    cause = classify(FAMILY_FALLBACK)
    assert cause is not None and cause.what == "a header is missing"
    assert cause.value.endswith("torch/include/ATen/cuda/CUDAContextLight.h:10: cusparse.h")
    assert classify(FAMILY_OFFLINE + MISSING_CUSPARSE) is not None  # evidence order: the header came last here
    assert classify(FAMILY_OFFLINE + MISSING_CUSPARSE).what == "a header is missing"  # type: ignore[union-attr]


def test_a_compiler_cache_that_cannot_reach_its_storage_is_named_as_such() -> None:
    cause = classify(SCCACHE_DOWN)
    assert cause is not None and cause.what == "the compiler cache (sccache) failed, so the compile did"
    assert "FARM_CCACHE=off" in cause.fix and "FORCE_BUILD" not in cause.fix


def test_the_cause_that_comes_last_wins_over_an_earlier_one() -> None:
    earlier_setup_error = f"""Traceback (most recent call last):
  File "{SRC}/tools/version.py", line 3, in <module>
KeyError: 'X'
"""
    cause = classify(earlier_setup_error + COMPILE_ERROR + NINJA_TAIL)
    assert cause is not None and cause.what == "the compiler failed"
    assert classify(COMPILE_ERROR + earlier_setup_error).what == "the build script raised a Python error"  # type: ignore[union-attr]


# --- resources --------------------------------------------------------------------------------------------------

CC1PLUS_KILLED = f"""[1/2] c++ -c {SRC}/csrc/ops.cpp -o {SRC}/build/temp/csrc/ops.o
FAILED: {SRC}/build/temp/csrc/ops.o
{ENV}/torch/include/c10/core/AutogradState.h:89:33: warning: default member initializers for bit-fields only \
available with {Q}-std=c++20{E} or {Q}-std=gnu++20{E} [-Wc++20-extensions]
   89 |   bool view_replay_enabled_ : 1 = false;
      |                                 ^
g++: fatal error: Killed signal terminated program cc1plus
compilation terminated.
"""
NVCC13_KILLED = f"""[2/2] /cache/tk/bin/nvcc -c {SRC}/csrc/axpb_kernel.cu -o {SRC}/build/temp/csrc/axpb_kernel.o
FAILED: {SRC}/build/temp/csrc/axpb_kernel.o
{ENV}/torch/include/c10/core/AutogradState.h(89): warning #3306-D: a default bit-field initializer is a C++20 feature
    bool view_replay_enabled_ : 1 = false;
                                  ^

Killed
"""
#: nvcc 12's words for the same (nvcc 13 runs cicc through a shell, which says "Killed").
NVCC12_KILLED = f"""FAILED: {SRC}/build/temp/csrc/axpb_kernel.o
nvcc error   : 'cicc' died due to signal 9 (Kill signal)
"""
LD_KILLED = "collect2: fatal error: ld terminated with signal 9 [Killed]\ncompilation terminated.\n"
ULIMIT = f"FAILED: {SRC}/build/temp/csrc/ops.o\nvirtual memory exhausted: Cannot allocate memory\n"


@pytest.mark.parametrize("output", [CC1PLUS_KILLED, NVCC13_KILLED, NVCC12_KILLED, LD_KILLED, ULIMIT])
def test_a_compiler_out_of_memory_advises_fewer_jobs_with_the_numbers(output: str) -> None:
    cause = classify(output + NINJA_TAIL.replace("'-j', '2'", "'-j', '8'"))
    assert cause is not None
    assert cause.what == ("a compiler ran out of memory (killed by signal 9, the kernel's out-of-memory killer, or "
                          "stopped at a memory limit)")
    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    assert cause.value.endswith(f"; 8 parallel compile jobs on {total / 2**30:.1f} GiB of memory")
    assert cause.fix.startswith("build with fewer parallel jobs: --max-jobs 4 (MAX_JOBS=4)")


def test_a_container_builds_memory_is_its_limit_not_the_machines() -> None:
    """FARM_CONTAINER_MEMORY=6g: the kill happened at 6 GiB, whatever the machine has."""
    cause = classify(NVCC13_KILLED + NINJA_TAIL, memory=6 << 30)
    assert cause is not None and cause.value.endswith("; 2 parallel compile jobs on 6.0 GiB of memory"), cause


def test_without_a_job_count_in_the_output_the_farms_default_is_said() -> None:
    found = resources.memory(LD_KILLED)
    assert found is not None and f"; {os.cpu_count()} parallel compile jobs on " in found.cause.value


GAS_FULL = f"""/tmp/ccKkToUE.s: Assembler messages:
/tmp/ccKkToUE.s: Fatal error: can't fill 256 bytes in section .rodata of {SRC}/build/temp/csrc/ops.o: \
'No space left on device'
/tmp/ccKkToUE.s: Fatal error: {SRC}/build/temp/csrc/ops.o: No such file or directory
"""
LD_FULL = "/usr/bin/ld: final link failed: No space left on device\ncollect2: error: ld returned 1 exit status\n"
ZIP_FULL = f"""running bdist_wheel
Traceback (most recent call last):
  File "/usr/lib/python3.11/zipfile.py", line 1835, in writestr
    dest.write(data)
OSError: [Errno 28] No space left on device

During handling of the above exception, another exception occurred:

Traceback (most recent call last):
  File "{ENV}/setuptools/build_meta.py", line 317, in run_setup
    exec(code, locals())
  File "/usr/lib/python3.11/zipfile.py", line 1996, in _fpclose
    fp.close()
OSError: [Errno 28] No space left on device
""" + TIP


@pytest.mark.parametrize(("output", "written"), [(GAS_FULL, "build/temp/csrc"), (LD_FULL, ""), (ZIP_FULL, "")])
def test_a_full_disk_names_the_folder_and_its_free_bytes(tmp_path: Path, output: str, written: str) -> None:
    """Paths under the build's copy are measured on this machine (a container's /project too); a tool that names
    no file gets the build's folder; a wheel's zipfile write is not "fix the build script at zipfile.py"."""
    (tmp_path / "build").mkdir()
    cause = failure.classify(output, source=SRC, host_folder=tmp_path)
    assert cause is not None and cause.what == "the build ran out of disk space"
    free = shutil.disk_usage(tmp_path).free
    measured = tmp_path / "build" if written else tmp_path
    assert f"; {measured} has " in cause.value and " bytes free (" in cause.value
    assert abs(int(cause.value.split(" has ")[1].split(" bytes")[0]) - free) < 64 * 2**20
    assert "--build-dir" in cause.fix and "FARM_CACHE_DIR" in cause.fix


def test_a_quota_is_a_full_disk_too(tmp_path: Path) -> None:
    cause = failure.classify(f"OSError: [Errno 122] Disk quota exceeded: '{tmp_path}/x.o'\n", host_folder=tmp_path)
    assert cause is not None and cause.what == "the build ran out of disk space (its disk quota)"
    assert cause.value.startswith(f"OSError: [Errno 122] Disk quota exceeded: '{tmp_path}/x.o'; {tmp_path} has ")


def test_resources_come_before_the_errors_they_cause() -> None:
    """The compiler error after an out-of-memory kill (ninja's other jobs) is not the cause."""
    cause = classify(CC1PLUS_KILLED + COMPILE_ERROR + NINJA_TAIL)
    assert cause is not None and cause.what.startswith("a compiler ran out of memory")


# --- torch's headers as an older standard, an empty architecture list ----------------------------------------------

GCC_WERROR = f"""FAILED: {SRC}/build/temp/csrc/ops.o
In file included from {SRC}/csrc/ops.cpp:1:
{ENV}/torch/include/c10/core/AutogradState.h:89:33: error: default member initializers for bit-fields only \
available with {Q}-std=c++20{E} or {Q}-std=gnu++20{E} [-Werror=c++20-extensions]
   89 |   bool view_replay_enabled_ : 1 = false;
      |                                 ^
cc1plus: all warnings being treated as errors
"""
NVCC_WERROR = f"""FAILED: {SRC}/build/temp/csrc/k.o
{ENV}/torch/include/c10/core/AutogradState.h(89): error #3306-D: a default bit-field initializer is a C++20 feature
    bool view_replay_enabled_ : 1 = false;
                                  ^
"""


@pytest.mark.parametrize("output", [GCC_WERROR, NVCC_WERROR])
def test_torchs_headers_compiled_as_an_older_standard_are_named_with_the_projects_flag(tmp_path: Path,
                                                                                      output: str) -> None:
    (tmp_path / "setup.py").write_text("args = {'cxx': ['-O3', '-std=c++17', '-Werror']}\n")
    general = CommandFailed("the wheel build of t failed", "exit status 1", "see above")
    error = failure.explain_build(general, output + NINJA_TAIL, build="the wheel build of t", source=tmp_path,
                                  paths_from=SRC)
    assert error.what == ("the wheel build of t failed: torch's headers need C++20, and the build compiled them as "
                          "an older standard")
    assert "c10/core/AutogradState.h:89: " in error.value
    assert error.fix.startswith("the project's -std=c++17 in setup.py line 1 overrides the standard torch's "
                                "cpp_extension passes: drop it or raise it to C++20")
    # The same error outside torch's headers is the project's own compiler error.
    own = failure.classify(output.replace(f"{ENV}/torch/include/c10/core", f"{SRC}/csrc"), source=SRC)
    assert own is not None and own.what == "the compiler failed"


def test_an_empty_architecture_list_names_the_override_and_the_key() -> None:
    output = f"""Traceback (most recent call last):
  File "<string>", line 44, in <module>
  File "{ENV}/torch/utils/cpp_extension.py", line 1126, in CUDAExtension
    nvcc_flags = _get_cuda_arch_flags()
  File "{ENV}/torch/utils/cpp_extension.py", line 2600, in _get_cuda_arch_flags
    arch_list[-1] += '+PTX'
    ~~~~~~~~~^^^^
IndexError: list index out of range
""" + TIP
    cause = classify(output)
    assert cause is not None and cause.what.startswith("torch found no CUDA architecture to compile for")
    assert cause.value == "setup.py:44: IndexError: list index out of range"
    assert "cuda-available-in-build" in cause.fix and "device_count()" in cause.fix


# --- the tools themselves -------------------------------------------------------------------------------------------


def torch_include() -> Path:
    cpp_extension = pytest.importorskip("torch.utils.cpp_extension")
    header = Path(cpp_extension.include_paths()[0]) / "c10" / "core" / "AutogradState.h"
    if not header.is_file() or not shutil.which("g++"):
        pytest.skip("needs g++ and torch's headers")
    return header.parents[2]


def test_a_real_cc1plus_under_a_memory_limit(tmp_path: Path) -> None:
    """g++ under RLIMIT_AS (ulimit -v): cc1plus runs out of memory on torch's headers; the farm says so."""
    include = torch_include()
    (tmp_path / "a.cpp").write_text("#include <c10/core/AutogradState.h>\n")

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (120 * 2**20, 120 * 2**20))

    done = subprocess.run(["g++", "-std=c++17", "-fsyntax-only", f"-I{include}", str(tmp_path / "a.cpp")],
                          capture_output=True, text=True, preexec_fn=limit, check=False)
    assert done.returncode != 0
    cause = failure.classify(done.stderr)
    assert cause is not None and cause.what.startswith("a compiler ran out of memory"), done.stderr[-2000:]


def test_a_real_cc1plus_killed_by_signal_9(tmp_path: Path) -> None:
    """What the OOM killer does to the compiler, done by the test to its own cc1plus (found among g++'s children)."""
    include = torch_include()
    (tmp_path / "a.cpp").write_text("#include <c10/core/TensorImpl.h>\n")
    compile_ = subprocess.Popen(["g++", "-std=c++17", "-fsyntax-only", f"-I{include}", str(tmp_path / "a.cpp")],
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    children = Path(f"/proc/{compile_.pid}/task/{compile_.pid}/children")
    deadline = time.monotonic() + 30
    cc1plus = None
    while cc1plus is None and compile_.poll() is None and time.monotonic() < deadline:
        for pid in children.read_text().split() if children.exists() else ():
            if Path(f"/proc/{pid}/comm").read_text().strip() == "cc1plus":
                cc1plus = int(pid)
        time.sleep(0.05)
    if cc1plus is None:
        compile_.wait()
        pytest.skip("cc1plus finished before it could be stopped")
    os.kill(cc1plus, signal.SIGKILL)
    output, _ = compile_.communicate(timeout=60)
    assert "Killed signal terminated program cc1plus" in output
    cause = failure.classify(output)
    assert cause is not None and cause.what.startswith("a compiler ran out of memory")
