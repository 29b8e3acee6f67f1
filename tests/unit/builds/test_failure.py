"""The cause class of a failed build, read from its output (ci/builds/failure/), over output of the shapes the
farm's builds print: pypa/build around setuptools, torch's ninja compile, gcc, nvcc, the linker. The samples are
trimmed from builds run here (paths shortened to SRC, the build's copy of the project)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from ci.builds import failure
from ci.builds.failure import download
from ci.builds.failure.causes import Cause
from ci.errors import CommandFailed

SRC = "/cache/build/proj-torch2.13-cpu-cp311-linux_x86_64/src"
ENV = "/cache/envs/build-torch2.13.0-py3.11/lib/python3.11/site-packages"

TIP = ("TIP pass --env-dir and --sdist-extract-dir to keep the build environment and sources, then see "
       "https://build.pypa.io/en/stable/how-to/troubleshooting.html#debug-a-failed-build for help debugging a failed "
       "build\nERROR Backend subprocess exited when trying to invoke build_wheel\n")

NINJA_TAIL = f"""compilation terminated.
ninja: build stopped: subcommand failed.
Traceback (most recent call last):
  File "{ENV}/torch/utils/cpp_extension.py", line 2893, in _run_ninja_build
    subprocess.run(
subprocess.CalledProcessError: Command '['ninja', '-v', '-j', '2']' returned non-zero exit status 1.

The above exception was the direct cause of the following exception:

Traceback (most recent call last):
  File "{ENV}/pyproject_hooks/_in_process/_in_process.py", line 406, in <module>
    main()
  File "{ENV}/torch/utils/cpp_extension.py", line 2910, in _run_ninja_build
    raise RuntimeError(message) from e
RuntimeError: Error compiling objects for extension

""" + TIP

MISSING_HEADER = f"""building 'proj._C' extension
[1/1] g++ -MMD -Ithird_party/glm -I{ENV}/torch/include -c -c {SRC}/csrc/ops.cpp -o {SRC}/build/temp/csrc/ops.o
FAILED: {SRC}/build/temp/csrc/ops.o
g++ -MMD -Ithird_party/glm -c -c {SRC}/csrc/ops.cpp -o {SRC}/build/temp/csrc/ops.o
{SRC}/csrc/ops.cpp:2:10: fatal error: glm/glm.hpp: No such file or directory
    2 | #include <glm/glm.hpp>
      |          ^~~~~~~~~~~~~
""" + NINJA_TAIL

COMPILER_ERROR = f"""[1/2] g++ -c -c {SRC}/csrc/ops.cpp -o {SRC}/build/temp/csrc/ops.o
FAILED: {SRC}/build/temp/csrc/ops.o
In file included from {SRC}/csrc/ops.cpp:3:
{SRC}/csrc/ops.cpp: In function 'at::Tensor scaled(const at::Tensor&, double)':
{SRC}/csrc/ops.cpp:12:10: warning: unused variable 'k' [-Wunused-variable]
{SRC}/csrc/ops.cpp:14:12: error: 'scale_factor' was not declared in this scope
   14 |   return x * scale_factor;
      |              ^~~~~~~~~~~~
{SRC}/csrc/ops.cpp:20:1: error: expected ';' before '}}' token
""" + NINJA_TAIL

NVCC_ERROR = f"""[1/1] /cache/tk/bin/nvcc -c {SRC}/csrc/kernel.cu -o {SRC}/build/temp/csrc/kernel.o
FAILED: {SRC}/build/temp/csrc/kernel.o
{SRC}/csrc/kernel.cu(41): error: identifier "blockDimm" is undefined
      int i = blockIdx.x * blockDimm.x + threadIdx.x;
                           ^

1 error detected in the compilation of "{SRC}/csrc/kernel.cu".
""" + NINJA_TAIL

SYNTAX = f"""* Getting build dependencies for wheel...
Traceback (most recent call last):
  File "{ENV}/pyproject_hooks/_in_process/_in_process.py", line 406, in <module>
    main()
  File "{ENV}/setuptools/build_meta.py", line 317, in run_setup
    exec(code, locals())
  File "<string>", line 4
    version="0.1"
            ^^^^
SyntaxError: invalid syntax. Perhaps you forgot a comma?

""" + TIP

SETUP_RAISES = f"""Traceback (most recent call last):
  File "{ENV}/setuptools/build_meta.py", line 317, in run_setup
    exec(code, locals())
  File "<string>", line 9, in <module>
  File "{SRC}/tools/versions.py", line 22, in read_version
    raise KeyError("PROJ_VERSION")
KeyError: 'PROJ_VERSION'

""" + TIP

NETWORK = """downloading the prebuilt wheel http://127.0.0.1:9/wheels/proj-0.1-cp311-linux_x86_64.whl
Traceback (most recent call last):
  File "/usr/lib/python3.11/urllib/request.py", line 1348, in do_open
    h.request(req.get_method(), req.selector, req.data, headers,
ConnectionRefusedError: [Errno 111] Connection refused

During handling of the above exception, another exception occurred:

Traceback (most recent call last):
  File "<string>", line 14, in <module>
  File "/usr/lib/python3.11/urllib/request.py", line 1351, in do_open
    raise URLError(err)
urllib.error.URLError: <urlopen error [Errno 111] Connection refused>

""" + TIP

DNS = """Guessing wheel URL:  https://github.com/example/proj/releases/download/v0.1/proj-0.1+cu130-cp311-linux_x86_64.whl
Precompiled wheel not found. Building from source...
error: <urlopen error [Errno -2] Name or service not known>
""" + TIP

UNKNOWN_ARCH = f"""Traceback (most recent call last):
  File "{ENV}/torch/utils/cpp_extension.py", line 2410, in _get_cuda_arch_flags
    raise ValueError(f"Unknown CUDA arch ({{arch}}) or GPU not supported")
ValueError: Unknown CUDA arch (9.9+PTX) or GPU not supported

""" + TIP

NVCC_ARCH = f"""[1/1] /cache/tk/bin/nvcc -gencode=arch=compute_99,code=sm_99 -c {SRC}/csrc/k.cu
FAILED: {SRC}/build/temp/csrc/k.o
nvcc fatal   : Unsupported gpu architecture 'compute_99'
""" + NINJA_TAIL

MISSING_LIBRARY = f"""g++ -shared {SRC}/build/temp/csrc/ops.o -L/cache/tk/lib -lcudart -lcublas -o build/lib/proj/_C.so
/usr/bin/ld: cannot find -lcublas: No such file or directory
collect2: error: ld returned 1 exit status
error: command '/usr/bin/g++' failed with exit code 1
""" + TIP


def classify(output: str, **kwargs: object) -> tuple[str, str, str] | None:
    return failure.classify(output, source=SRC, **kwargs)  # type: ignore[arg-type]


def test_a_missing_header_names_the_file_line_and_header() -> None:
    cause = classify(MISSING_HEADER)
    assert cause is not None
    assert (cause.what, cause.value) == ("a header is missing", "csrc/ops.cpp:2: glm/glm.hpp")
    assert "include_dirs" in cause.fix and "--env-dir" not in cause.fix


def test_a_missing_header_under_an_empty_submodule_says_so() -> None:
    cause = classify(MISSING_HEADER, empty_submodules=["third_party/glm"])
    assert cause == Cause(
        "a header is missing: it lies in a git submodule that is not checked out",
        "csrc/ops.cpp:2: glm/glm.hpp (submodule third_party/glm)",
        "run `git submodule update --init --recursive` in the project's folder, then build again")


def test_a_compiler_error_names_the_first_error_not_a_warning_or_note() -> None:
    cause = classify(COMPILER_ERROR)
    assert cause == Cause("the compiler failed", "csrc/ops.cpp:14: 'scale_factor' was not declared in "
                                  "this scope", "fix that line (the compiler's full message is above)")


def test_an_nvcc_error_names_the_cu_file_and_line() -> None:
    cause = classify(NVCC_ERROR)
    assert cause is not None and cause.value == 'csrc/kernel.cu:41: identifier "blockDimm" is undefined'


def test_a_syntax_error_in_setup_py_names_setup_py_and_the_line() -> None:
    cause = classify(SYNTAX)
    assert cause is not None
    assert cause.what == "the build script raised a Python error"
    assert cause.value == "setup.py:4: SyntaxError: invalid syntax. Perhaps you forgot a comma?"


def test_an_exception_names_the_innermost_frame_in_the_project() -> None:
    cause = classify(SETUP_RAISES)
    assert cause is not None and cause.value == "tools/versions.py:22: KeyError: 'PROJ_VERSION'"


@pytest.mark.parametrize(("output", "value"), [
    (NETWORK, "http://127.0.0.1:9/wheels/proj-0.1-cp311-linux_x86_64.whl: urllib.error.URLError: <urlopen error "
              "[Errno 111] Connection refused>"),
    (DNS, "https://github.com/example/proj/releases/download/v0.1/proj-0.1+cu130-cp311-linux_x86_64.whl: "
          "error: <urlopen error [Errno -2] Name or service not known>"),
    ("socket.gaierror: [Errno -3] Temporary failure in name resolution\n",
     "socket.gaierror: [Errno -3] Temporary failure in name resolution"),
])
def test_a_network_access_names_the_address(output: str, value: str) -> None:
    cause = classify(output)
    assert cause is not None
    assert cause.what == "the build tried to reach the network (a download during the build)"
    assert cause.value == value
    assert "build-env of [tool.cuda-ext-farm]" in cause.fix and "force" in cause.fix


def test_the_network_advice_names_the_variable_the_build_script_reads_and_cpu_env_for_cpu_builds() -> None:
    script = 'import os\nif os.environ.get("PROJ_FORCE_BUILD", "0") != "1" and not os.getenv("HOME"):\n  pass\n'
    assert download.switches(script) == [download.Switch("PROJ_FORCE_BUILD", "1")]
    cause = classify(NETWORK, build_script=script, cpu=True)
    assert cause is not None
    assert cause.fix == ('the build script forces a local build with PROJ_FORCE_BUILD (it compares it with "1"): set '
                         'cpu-env = { PROJ_FORCE_BUILD = "1" } in [tool.cuda-ext-farm], so the farm compiles the '
                         "project instead")


@pytest.mark.parametrize(("output", "value"), [(UNKNOWN_ARCH, "9.9+PTX"), (NVCC_ARCH, "compute_99")])
def test_an_unknown_architecture(output: str, value: str) -> None:
    cause = classify(output)
    assert cause is not None and cause.value == value
    assert cause.what == "the build was asked for a CUDA architecture its toolkit or torch does not know"
    assert "--arch-list" in cause.fix and "-gencode" in cause.fix


def test_a_missing_cuda_library_gives_the_toolkit_libraries_hint() -> None:
    cause = classify(MISSING_LIBRARY, linkable=["cublas", "cusparse"])
    assert cause == Cause("the linker cannot find a CUDA library", "-lcublas",
                                  'add toolkit-libraries = ["cublas"] to [tool.cuda-ext-farm]: the farm then puts '
                                  "its pinned wheel on the linker's path")
    other = classify(MISSING_LIBRARY.replace("cublas", "png"), linkable=["cublas"])
    assert other is not None and other.what == "the linker cannot find a library" and other.value == "-lpng"


GPU_QUERY = f"""* Building wheel...
Traceback (most recent call last):
  File "{ENV}/pyproject_hooks/_in_process/_in_process.py", line 389, in <module>
    main()
  File "{SRC}/setup.py", line 4, in archs
    major, minor = torch.cuda.get_device_capability()
                   ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^
  File "{ENV}/torch/cuda/__init__.py", line 686, in get_device_properties
    _lazy_init()  # will define _get_device_properties
    ^^^^^^^^^^^^
  File "{ENV}/torch/cuda/__init__.py", line 478, in _lazy_init
    torch._C._cuda_init()
RuntimeError: Found no NVIDIA driver on your system. Please check that you have an NVIDIA GPU and installed a \
driver from http://www.nvidia.com/Download/index.aspx

""" + TIP


def test_a_build_script_that_asks_the_gpu_names_the_line_and_the_key() -> None:
    """torch.cuda.is_available() is True in the farm's CUDA builds: a setup.py that then asks the device fails."""
    cause = failure.classify(GPU_QUERY, source=SRC)
    assert cause is not None and cause.what == "the build script asked for a GPU, and the builder has none"
    assert cause.value.startswith("setup.py:4: RuntimeError: Found no NVIDIA driver on your system")
    assert "TORCH_CUDA_ARCH_LIST" in cause.fix and "cuda-available-in-build = false" in cause.fix
    # Not a network access, though the message holds an address; another error is the build script's own.
    other = failure.classify(GPU_QUERY.replace("Found no NVIDIA driver", "Something else"), source=SRC)
    assert other is not None and other.what == "the build script raised a Python error"


def test_output_it_does_not_know_gives_none() -> None:
    assert classify("ERROR Backend subprocess exited when trying to invoke build_wheel\n") is None


def test_explain_puts_the_cause_in_the_general_lines_place() -> None:
    general = CommandFailed("the wheel build of t failed", "exit status 1", "the compiler output above ...")
    assert failure.explain(general, "no idea\n", build="the wheel build of t") is general
    line = failure.explain(general, MISSING_HEADER, build="the wheel build of t", source=SRC).line()
    assert line == ("error: the wheel build of t failed: a header is missing (csrc/ops.cpp:2: glm/glm.hpp): add the "
                    "folder that holds it to the extension's include_dirs (an absolute path: torch's ninja compiles "
                    "in build/), or install the library that provides it; a vendored library may be a git submodule: "
                    "git submodule update --init --recursive; nothing was written to the wheelhouse")


def test_pypa_builds_tip_is_hidden() -> None:
    assert failure.hidden(TIP.splitlines()[0])
    assert not failure.hidden("ERROR Backend subprocess exited when trying to invoke build_wheel")


def test_the_address_is_the_downloads_not_a_tools_documentation_link() -> None:
    noise = "SetuptoolsDeprecationWarning: see https://setuptools.pypa.io/en/latest/userguide.html\n"
    chained = NETWORK.replace("Traceback", "\n".join(["  File \"x.py\", line 1, in f"] * 60) + "\nTraceback", 1)
    cause = classify(noise + chained)
    assert cause is not None
    assert cause.value.startswith("http://127.0.0.1:9/wheels/proj-0.1-cp311-linux_x86_64.whl: ")
    assert classify(noise + "urllib.error.URLError: <urlopen error timed out; Connection refused>\n").value == (  # type: ignore[union-attr]
        "urllib.error.URLError: <urlopen error timed out; Connection refused>")


def test_msvc_paths_are_made_relative_too() -> None:
    output = ("C:\\farm\\stage\\source\\csrc\\ops.cpp(14): error C2065: 'scale_factor': undeclared identifier\n"
              "error: command 'cl.exe' failed with exit code 2\n")
    cause = failure.classify(output, source="C:\\farm\\stage\\source")
    assert cause is not None and cause.value == "csrc/ops.cpp:14: C2065: 'scale_factor': undeclared identifier"


SMOKE_FAILS = """Building wheel...
Successfully built proj-0.1-cp311-cp311-linux_x86_64.whl
Repairing wheel...
Testing wheel...
+ python -c "import proj; proj.check()"
Traceback (most recent call last):
  File "<string>", line 1, in <module>
AttributeError: module 'proj' has no attribute 'check'
"""


def test_a_smoke_command_that_raises_in_cibuildwheels_test_step_is_not_a_build_script_error() -> None:
    """The wheel was built; the `python -c` frame is the smoke command's, not setup.py's."""
    cause = classify(SMOKE_FAILS)
    assert cause is not None
    what, value, fix = cause
    assert what.startswith("the wheel's smoke command failed in cibuildwheel's test step")
    assert value == "<command>:1: AttributeError: module 'proj' has no attribute 'check'" and "setup.py" not in value
    assert "commands] smoke" in fix
    # The same traceback before the test step is the build script's.
    assert classify(SETUP_RAISES + "Testing wheel...\n")[0] == "the build script raised a Python error"  # type: ignore[index]


# --- following the download advice builds (issue 45, item 11) -------------------------------------------------------

@pytest.mark.parametrize("condition", [
    'os.environ.get("X_FORCE_BUILD", "0") != "0"',
    'not (os.environ.get("X_FORCE_BUILD", "0") == "0")',
    'os.getenv("X_FORCE_BUILD", "FALSE") != "FALSE"',
    'os.getenv("X_FORCE_BUILD", "false").lower() != "false"',
    'int(os.environ.get("X_FORCE_BUILD", "0")) != 0',
    'os.environ.get("X_NO_DOWNLOAD", "no") != "no"',
])
def test_following_the_download_advice_builds(tmp_path: Path, condition: str) -> None:
    """The advice's value, set as the advice says, makes the build script take its build branch: run the script
    with it (its download branch says so and fails)."""
    script = (f"import os, sys\nif {condition}:\n    print('BUILD')\nelse:\n"
              "    sys.exit('DOWNLOAD https://example.invalid/x.whl')\n")
    (tmp_path / "setup.py").write_text(script)
    cause = classify(NETWORK, build_script=script)
    assert cause is not None
    advised = re.search(r'build-env = \{ (\w+) = "([^"]*)" \}', cause.fix)
    assert advised is not None, cause.fix
    for env, taken in (({}, "DOWNLOAD"), ({advised[1]: advised[2]}, "BUILD")):
        done = subprocess.run([sys.executable, "setup.py"], cwd=tmp_path, capture_output=True, text=True,
                              env={k: v for k, v in os.environ.items() if k not in ("X_FORCE_BUILD", "X_NO_DOWNLOAD")}
                              | env, check=False)
        assert taken in done.stdout + done.stderr, (env, cause.fix)


def test_the_advice_says_why_its_value_is_not_the_literal_compared_with() -> None:
    script = 'import os\nif os.environ.get("PROJ_FORCE_BUILD", "0") == "0":\n    download()\n'
    assert download.switches(script) == [download.Switch("PROJ_FORCE_BUILD", "0")]
    cause = classify(NETWORK, build_script=script)
    assert cause is not None
    assert cause.fix == ('the build script forces a local build with PROJ_FORCE_BUILD (it compares it with "0", so "1" '
                        'turns it on): set build-env = { PROJ_FORCE_BUILD = "1" } in [tool.cuda-ext-farm], so the farm '
                        "compiles the project instead")
