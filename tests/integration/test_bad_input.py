"""Every subcommand and session, given bad values: a non-zero exit of the documented kind, no traceback, and a
last line ``error: <what> (<value>): <how to fix>`` that names the value.

The nox sessions validate their arguments with the same parser before creating or installing anything.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CLASSIC = ROOT / "tests" / "fixtures" / "classic_ext"
NOT_A_DIR = "/etc/hostname/inside"  # a path below a regular file: nothing can be created there


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("bad")
    empty = folder / "empty-1.0-py3-none-any.whl"
    empty.write_bytes(b"")
    notzip = folder / "notzip-1.0-py3-none-any.whl"
    notzip.write_text("garbage")
    notelf = folder / "notelf-1.0-cp310-abi3-manylinux_2_28_x86_64.whl"
    with zipfile.ZipFile(notelf, "w") as zf:
        zf.writestr("notelf/_C.abi3.so", "this is not ELF")
        zf.writestr("notelf-1.0.dist-info/METADATA", "Metadata-Version: 2.1\nName: notelf\nVersion: 1.0\n")
        zf.writestr("notelf-1.0.dist-info/WHEEL", "Wheel-Version: 1.0\n")
        zf.writestr("notelf-1.0.dist-info/RECORD", "")
    badconf = folder / "badconf"
    badconf.mkdir()
    (badconf / "pyproject.toml").write_text('[project]\nname = "x"\n[tool.cuda-ext-farm]\nabii = "classic"\n')
    emptydir = folder / "emptydir"
    emptydir.mkdir()
    # The table under a near-miss name: silently taking the defaults would build something else.
    misnamed = folder / "misnamed"
    misnamed.mkdir()
    (misnamed / "pyproject.toml").write_text('[project]\nname = "x"\n[tool.cuda_ext_farm]\nabi = "stable"\n')
    (misnamed / "setup.py").write_text("")
    misconf = folder / "farm.toml"
    misconf.write_text('[tool.cuda-ext-farms]\nname = "x"\n')
    # A CMake project (scikit-build-core) whose CMakeLists.txt never finds torch.
    cmake_no_torch = folder / "cmake_no_torch"
    cmake_no_torch.mkdir()
    (cmake_no_torch / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["scikit-build-core", "torch"]\nbuild-backend = "scikit_build_core.build"\n'
        '[project]\nname = "x"\nversion = "1.0"\n[tool.cuda-ext-farm]\n')
    (cmake_no_torch / "CMakeLists.txt").write_text(
        "cmake_minimum_required(VERSION 3.18)\nproject(x LANGUAGES CXX)\n# find_package(Torch REQUIRED)\n"
        "add_library(_C MODULE x.cpp)\n")
    curand = folder / "curand"
    curand.mkdir()
    (curand / "pyproject.toml").write_text('[project]\nname = "x"\n[tool.cuda-ext-farm]\n'
                                           'toolkit-libraries = ["curand"]\n')
    libname = folder / "libname"
    libname.mkdir()
    (libname / "pyproject.toml").write_text('[project]\nname = "x"\n[tool.cuda-ext-farm]\n'
                                            'toolkit-libraries = ["libcublas.so"]\n')
    return {"curand": curand, "libname": libname,
            "empty": empty, "notzip": notzip, "notelf": notelf, "badconf": badconf, "emptydir": emptydir,
            "misnamed": misnamed, "misconf": misconf, "cmake_no_torch": cmake_no_torch}


# (arguments, environment, exit code, text the last line must contain)
CASES: list[tuple[list[str], dict[str, str], int, str]] = [
    (["frobnicate"], {}, 2, "unknown command (frobnicate): `python -m ci --help` lists the commands"),
    (["build", "--cuda", "99.9"], {}, 2, "unknown CUDA version (99.9)"),
    (["build", "--cuda"], {}, 2, "--cuda: expected one argument"),
    (["build", "--max-jobs", "0"], {}, 2, "must be 1 or more, got 0"),
    (["build", "--max-jobs", "-1"], {}, 2, "must be 1 or more, got -1"),
    (["build", "--max-jobs", "many"], {}, 2, "not a whole number: 'many'"),
    (["build", "--torch", "9.9"], {}, 2, "unknown torch release (9.9)"),
    (["build", "--torch", "2.10", "--cuda", "13.0"], {}, 2, "cannot be paired with torch 2.10.0"),
    (["build", "--arch-list", "sm_90"], {}, 2, "bad architecture in the arch list (sm_90)"),
    (["build", "--arch-list", "3.5"], {}, 2,
     "architecture not supported by CUDA 13.0 (3.5): torch extensions with CUDA 13.0 build for 7.5, 8.0,"),
    (["build-cuda", "12.4", "--arch-list", "8.0;10.0"], {}, 2,
     "architecture not supported by CUDA 12.4 (10.0): torch extensions with CUDA 12.4 build for 5.0, 5.2,"),
    (["build", "--project", "/nonexistent-project"], {}, 2, "--project does not exist (/nonexistent-project)"),
    (["build", "--project", "{emptydir}"], {}, 2, "no pyproject.toml or setup.py in the project folder"),
    (["build", "--project", "{badconf}"], {}, 2, "unknown key in [tool.cuda-ext-farm] of pyproject.toml (abii)"),
    (["build", "--project", str(CLASSIC), "--python", "3.9"], {}, 2, "has no target for Python (3.9)"),
    (["build", "--project", str(CLASSIC), "--torch", "2.12"], {}, 2, "has no target for torch (2.12)"),
    (["build", "--project", str(CLASSIC), "--deadline", "2020-01-01T00:00"], {}, 2,
     "--deadline has already passed ('2020-01-01T00:00')"),
    (["build-cuda", "13.0", "--deadline", "0m"], {}, 2, "--deadline has already passed ('0m')"),
    (["build-cuda", "13.0"], {"FARM_COMPILE_ADMISSION": "of"}, 2,
     "FARM_COMPILE_ADMISSION is neither on nor off ('of')"),
    (["build", "--target", "no-such-target"], {}, 2, "has no such target (no-such-target)"),
    (["build", "--config", "/nonexistent.toml"], {}, 2, "--config does not exist (/nonexistent.toml)"),
    (["build", "--wheelhouse", NOT_A_DIR], {}, 3, f"the wheelhouse is not writable ({NOT_A_DIR}): Not a directory"),
    (["build"], {"FARM_BUILD_DIR": NOT_A_DIR}, 3, f"the build folder is not writable ({NOT_A_DIR})"),
    (["build-cuda", "77.7"], {}, 2, "unknown CUDA version (77.7)"),
    (["build-cuda", "13.0", "--cuda", "12.4"], {}, 2, "two CUDA versions were given"),
    (["build-all", "--jobs", "0"], {}, 2, "must be 1 or more, got 0"),
    (["build", "--arch", "arm64"], {}, 2, "invalid choice: 'arm64'"),
    (["build", "--arch", "aarch64", "--cuda", "12.4"], {}, 2, "cell cu124 has no aarch64 toolkit (12.4)"),
    (["build", "--arch", "aarch64"], {"FARM_AARCH64_CXX": "no-such-g++"}, 3,
     "no aarch64 cross compiler: the farm builds linux_aarch64 wheels on x86_64 with one (no-such-g++)"),
    (["develop", "--torch", "1.0"], {}, 2, "unknown torch release (1.0)"),
    (["audit", "/nonexistent.whl"], {}, 2, "does not exist (/nonexistent.whl)"),
    (["audit", "{empty}"], {}, 2, "wheel file is empty"),
    (["audit", "{notzip}"], {}, 2, "wheel file is not a zip archive"),
    (["audit", "README.md"], {}, 2, "not a wheel file name (README.md)"),
    (["audit", "{notelf}", "--cpu"], {}, 2, "not an ELF shared library (_C.abi3.so)"),
    (["audit", "{notelf}", "--torch-env", "/nonexistent-env"], {}, 2, "--torch-env does not exist (/nonexistent-env)"),
    (["matrix", "--os", "beos"], {}, 2, "invalid choice: 'beos'"),
    (["matrix", "--project", "{badconf}"], {}, 2, "(abii)"),
    (["shell", "--cuda", "5"], {}, 2, "unknown CUDA version (5)"),
    (["test-gpu", "--lanes", "bogus"], {}, 2, "unknown GPU test lane (bogus)"),
    (["test-gpu", "--wheel", "/nonexistent.whl", "--lanes", "default"], {}, 2,
     "--wheel does not exist (/nonexistent.whl)"),
    (["run", "nonsense"], {}, 2, "invalid choice: 'nonsense'"),
    (["run", "bench", "--project", str(CLASSIC), "--wheel", "{notelf}"], {}, 2, "configures no bench command"),
    (["toolkit", "--cuda", "abc"], {}, 2, "unknown CUDA version (abc)"),
    (["toolkit"], {"FARM_CUDA_HOME": "/nonexistent-cuda"}, 2,
     "FARM_CUDA_HOME does not point at an existing folder (/nonexistent-cuda)"),
    (["toolkit"], {"FARM_CACHE_DIR": NOT_A_DIR}, 3, "the tool cache is not writable"),
    (["images", "99"], {"FARM_DOCKER": "/nonexistent/docker"}, 2, "unknown CUDA version (99)"),
    (["images"], {"FARM_DOCKER": "/nonexistent/docker"}, 2,
     "FARM_DOCKER does not point at an existing executable (/nonexistent/docker)"),
    (["base-image", "--suite", "buster"], {}, 2, "invalid choice: 'buster'"),
    (["images"], {"FARM_DOCKER": "/bin/false"}, 2, "FARM_DOCKER is not a usable docker client (/bin/false)"),
    (["build-win"], {}, 3, "Windows builds need a Windows host with Visual Studio"),
    # A CA bundle that is not there: refused before the base image step, by every command that builds images.
    *[(args, {"FARM_CA_BUNDLE": "/nonexistent/ca.pem", "FARM_DOCKER": "/bin/false"}, 2,
       "FARM_CA_BUNDLE does not point at a file (/nonexistent/ca.pem): point it at a PEM bundle")
      for args in (["base-image"], ["images"], ["build-cuda", "13", "--project", str(CLASSIC)],
                   ["build-all", "--project", str(CLASSIC)])],
    (["release", "--bogus"], {}, 2, "release has no option --bogus (--bogus): see `python -m ci release --help`"),
    # Verbs: a missing or extra argument, two modes, an old flag's argument that does not exist.
    (["release", "import-test"], {}, 2, "release import-test needs its WHEEL"),
    (["release", "dry-run", "extra"], {}, 2, "release dry-run takes no argument (extra)"),
    (["release", "--dry-run", "--sdist", "dist"], {}, 2, "two release modes given (--dry-run and --sdist)"),
    (["release", "--assemble", "/nonexistent-artifacts"], {}, 2,
     "release assemble's ARTIFACTS does not exist (/nonexistent-artifacts)"),
    (["release", "frobnicate"], {}, 2, "invalid choice: 'frobnicate'"),
    (["release"], {}, 2, "no release mode given"),
    (["workflows", "frobnicate"], {}, 2, "invalid choice: 'frobnicate'"),
    (["images", "pull"], {}, 2, "images pull takes one cell (none)"),
    (["images", "changed", "13"], {}, 2, "images changed takes no cell (13)"),
    (["workflows", "--push-image", "99"], {"FARM_DOCKER": "/nonexistent/docker"}, 2, "unknown CUDA version (99)"),
    # An explicit empty list is not "the defaults"; a junk MAX_JOBS is not ignored; no abbreviated options.
    (["build", "--arch-list", ""], {}, 2, "--arch-list is empty ('')"),
    (["develop", "--arch-list", " "], {}, 2, "--arch-list is empty (' ')"),
    (["matrix", "--cuda", ""], {}, 2, "--cuda is empty (''): give one (--cuda 13.0)"),
    (["build", "--torch", ""], {}, 2, "--torch is empty ('')"),
    (["test", "--python", " "], {}, 2, "--python is empty (' ')"),
    (["build", "--arch-list", "9.9"], {}, 2, "architecture not supported by CUDA 13.0 (9.9)"),
    (["build", "--torch", "2.99"], {}, 2, "unknown torch release (2.99): this farm knows torch"),
    (["build"], {"MAX_JOBS": "junk"}, 2, "MAX_JOBS is not a positive whole number ('junk')"),
    (["build", "--wheel", "x"], {}, 2, "build has no option --wheel (--wheel x)"),
    (["build", "--project", "{curand}"], {}, 2, "toolkit-libraries names a library cell cu130 does not pin (curand): "
     "the libraries the farm can add are cublas, cusolver, cusparse"),
    (["matrix", "--project", "{libname}"], {}, 2, "toolkit-libraries names a library by something else than its "
     "name (libcublas.so)"),
    (["build", "--project", "{misnamed}"], {}, 2,
     "pyproject.toml has [tool.cuda_ext_farm], not [tool.cuda-ext-farm] (cuda_ext_farm): rename the table"),
    (["matrix", "--project", "{misnamed}", "--config", "{misconf}"], {}, 2,
     "farm.toml has [tool.cuda-ext-farms], not [tool.cuda-ext-farm] (cuda-ext-farms)"),
    (["build", "--project", "{cmake_no_torch}"], {}, 2,
     "the project builds with CMake (scikit_build_core.build) but its CMakeLists.txt has no find_package(Torch)"),
    (["build", "--project", "no-such-folder"], {}, 2,
     f"--project does not exist (no-such-folder): pass an existing path (a relative path is read from the folder "
     f"you ran in, {ROOT})"),
]


def _expand(args: list[str], files: dict[str, Path]) -> list[str]:
    return [str(files[a[1:-1]]) if a.startswith("{") and a.endswith("}") else a for a in args]


def check_output(text: str, code: int, expected_code: int, expected: str) -> None:
    assert "Traceback" not in text, text[-3000:]
    last = text.strip().splitlines()[-1]
    assert code == expected_code, text[-2000:]
    assert last.startswith("error: ") and expected in last, last


@pytest.mark.parametrize(("args", "env", "code", "expected"), CASES, ids=[" ".join(c[0])[:60] for c in CASES])
def test_farm_command_with_bad_input(files: dict[str, Path], args: list[str], env: dict[str, str], code: int,
                                     expected: str, tmp_path: Path) -> None:
    run_env = {**os.environ, "COLUMNS": "300", "PYTHONPATH": str(ROOT), "FARM_WHEELHOUSE": str(tmp_path / "wh"),
               "FARM_BUILD_DIR": str(tmp_path / "build"), **env}
    result = subprocess.run([sys.executable, "-m", "ci", *_expand(args, files)], cwd=ROOT, env=run_env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=120)
    check_output(result.stdout, result.returncode, code, expected)
    assert not (tmp_path / "wh").exists() or not any((tmp_path / "wh").rglob("*.whl"))


@pytest.mark.parametrize("order", ["before", "after"])
def test_an_option_the_command_lacks_is_named_with_the_value_given(files: dict[str, Path], order: str) -> None:
    """`doctor --config FILE INDEX`: the line quotes FILE (argparse's leftovers would be `--config INDEX`)."""
    index, config = str(files["emptydir"]), str(files["misconf"])
    args = ["--config", config, index] if order == "before" else [index, "--config", config]
    result = subprocess.run([sys.executable, "-m", "ci", "doctor", *args], cwd=ROOT, text=True,
                            env={**os.environ, "COLUMNS": "300", "PYTHONPATH": str(ROOT)},
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=120)
    check_output(result.stdout, result.returncode, 2, f"doctor has no option --config (--config {config}): "
                 "see `python -m ci doctor --help` for its options")


NOX_CASES: list[tuple[list[str], int, str]] = [
    (["-s", "build", "--", "--cuda", "99.9"], 2, "unknown CUDA version (99.9)"),
    (["-s", "build", "--", "--cuda"], 2, "--cuda: expected one argument"),
    (["-s", "build", "--", "--max-jobs", "0"], 2, "must be 1 or more, got 0"),
    (["-s", "build-cuda", "--", "77.7"], 2, "unknown CUDA version (77.7)"),
    (["-s", "build-cuda-13", "--", "--torch", "3.0"], 2, "unknown torch release (3.0)"),
    (["-s", "build-all", "--", "--project", "/nonexistent-project"], 2,
     "--project does not exist (/nonexistent-project)"),
    (["-s", "develop", "--", "--python", "2.7"], 2, "(2.7)"),
    (["-s", "matrix", "--", "--os", "beos"], 2, "invalid choice: 'beos'"),
    (["-s", "shell", "--", "--cuda", "5"], 2, "unknown CUDA version (5)"),
    (["-s", "test-gpu", "--", "--lanes", "bogus"], 2, "unknown GPU test lane (bogus)"),
    (["-s", "audit", "--", "/nonexistent.whl"], 2, "does not exist (/nonexistent.whl)"),
    (["-s", "images", "--", "99"], 2, "unknown CUDA version (99)"),
    (["-s", "toolkit", "--", "--cuda", "x"], 2, "unknown CUDA version (x)"),
    (["-s", "build-win-cuda-13"], 3, "Windows builds need a Windows host with Visual Studio"),
    (["-s", "release", "--", "--bogus"], 2, "release has no option --bogus (--bogus)"),
    (["-s", "test-gpu-system", "--", "--wheel", "/nonexistent.whl"], 2, "--wheel does not exist (/nonexistent.whl)"),
    (["-s", "lint", "--", "junk"], 2, "nox -s lint takes no arguments (junk)"),
]


@pytest.mark.skipif(shutil.which("nox") is None and not (Path(sys.executable).parent / "nox").exists(),
                    reason="nox is not installed")
@pytest.mark.parametrize(("args", "code", "expected"), NOX_CASES, ids=[" ".join(c[0])[:60] for c in NOX_CASES])
def test_nox_session_with_bad_input_fails_before_creating_anything(args: list[str], code: int, expected: str,
                                                                   tmp_path: Path) -> None:
    envdir = tmp_path / "nox-envs"
    nox = shutil.which("nox") or str(Path(sys.executable).parent / "nox")
    result = subprocess.run([nox, "-f", str(ROOT / "noxfile.py"), *args], cwd=ROOT, text=True,
                            env={**os.environ, "COLUMNS": "300", "FARM_NOX_ENVDIR": str(envdir),
                                 "FARM_CACHE_DIR": str(tmp_path / "cache")},
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=120)
    check_output(result.stdout, result.returncode, code, expected)
    # Validation came first: no session venv, no farm tool environment.
    assert not envdir.exists() or not any(envdir.iterdir())
    assert not (tmp_path / "cache").exists()


@pytest.mark.skipif(shutil.which("nox") is None and not (Path(sys.executable).parent / "nox").exists(),
                    reason="nox is not installed")
@pytest.mark.parametrize("envdir", ["{file}", "{file}/envs"])
def test_nox_envdir_naming_a_file_is_one_line(envdir: str, tmp_path: Path) -> None:
    """FARM_NOX_ENVDIR at a file (or below one): the farm's line, not nox's traceback creating the venv."""
    file = tmp_path / "a-file"
    file.write_text("")
    given = envdir.format(file=file)
    nox = shutil.which("nox") or str(Path(sys.executable).parent / "nox")
    result = subprocess.run([nox, "-f", str(ROOT / "noxfile.py"), "-s", "lint"], cwd=ROOT, text=True,
                            env={**os.environ, "COLUMNS": "300", "FARM_NOX_ENVDIR": given,
                                 "FARM_CACHE_DIR": str(tmp_path / "cache")},
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=120)
    where = given if given == str(file) else f"{given}; {file} is a file"
    check_output(result.stdout, result.returncode, 2, f"FARM_NOX_ENVDIR is not a folder ({where}): point it at a "
                 "folder")
    assert not (tmp_path / "cache").exists()


def test_launcher_with_a_cache_folder_that_cannot_be_created_is_one_line(tmp_path: Path) -> None:
    """`cuda-ext-farm` (the launcher) with FARM_CACHE_DIR below a file: one line, as `python -m ci` gives, no
    traceback from making the tool environment."""
    cache = f"{NOT_A_DIR}/cache"
    result = subprocess.run([sys.executable, "-c", "from ci import launch; launch.main()", "matrix", "--project",
                             str(CLASSIC)], cwd=tmp_path, text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            env={**os.environ, "PYTHONPATH": str(ROOT), "FARM_CACHE_DIR": cache}, timeout=120)
    check_output(result.stdout, result.returncode, 3, f"error: the farm's cache folder is not writable ({cache}/envs): "
                 "Not a directory; point FARM_CACHE_DIR at a writable folder")


@pytest.mark.parametrize("entry", ["python -m ci", "launcher"])
def test_a_bad_container_memory_is_refused_before_anything_starts(tmp_path: Path, entry: str) -> None:
    """FARM_CONTAINER_MEMORY (docker's --memory of the build container) is read by the container route only once
    the builder image is made, minutes in: the entry refuses a bad one first, in one line, with no docker command
    run (not even its version asked: no image pulled or built), no cache or build folder made."""
    log = tmp_path / "docker.log"
    docker = tmp_path / "docker"  # would answer its version, then fail all else: the build would get to a pull
    docker.write_text(f'#!/bin/bash\necho "$@" >> "{log}"\n[ "$1" = version ] && {{ echo 27.0.0; exit 0; }}\nexit 1\n')
    docker.chmod(0o755)
    folders = {"FARM_CACHE_DIR": tmp_path / "cache", "FARM_BUILD_DIR": tmp_path / "build",
               "FARM_WHEELHOUSE": tmp_path / "wh"}
    env = {**os.environ, "COLUMNS": "300", "PYTHONPATH": str(ROOT), "FARM_DOCKER": str(docker),
           "FARM_CONTAINER_MEMORY": "lots", **{k: str(v) for k, v in folders.items()}}
    command = [sys.executable, *(["-m", "ci"] if entry == "python -m ci" else
                                 ["-c", "from ci import launch; launch.main()"])]
    result = subprocess.run([*command, "build-cuda", "13.0", "--project", str(CLASSIC)], cwd=tmp_path, env=env,
                            text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=120)
    assert result.stdout.splitlines() == ["error: FARM_CONTAINER_MEMORY is not an amount of memory ('lots'): give "
                                          "docker's form: 6g, 6144m"], result.stdout[-3000:]
    assert result.returncode == 2
    assert not log.exists(), log.read_text()
    assert not any(folder.exists() for folder in folders.values())


def _engine_running() -> bool:
    docker = shutil.which("docker")
    return docker is not None and subprocess.run([docker, "info"], capture_output=True).returncode == 0


@pytest.mark.skipif(shutil.which("debootstrap") is None or os.geteuid() != 0 or not _engine_running(),
                    reason="debootstrap and a running Docker engine, as root (.ci/run installs and starts them)")
def test_a_failed_debootstrap_names_the_suite_and_the_mirror(tmp_path: Path) -> None:
    mirror = "http://127.0.0.1:9/debian"  # the discard port: refused at once
    result = subprocess.run([sys.executable, "-m", "ci", "base-image", "--suite", "bullseye", "--mirror", mirror,
                             "--force"], cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "300"},
                            text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=300)
    check_output(result.stdout, result.returncode, 1, "debootstrap of Debian bullseye failed")
    assert f"from the mirror {mirror}" in result.stdout.strip().splitlines()[-1]
