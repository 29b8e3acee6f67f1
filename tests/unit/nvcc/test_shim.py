"""ci/nvcc/shim.py: a toolkit folder whose bin/nvcc runs the wrapper and whose other entries are the real
toolkit's, run here as a build runs it (``CUDA_HOME/bin/nvcc``) in front of a stand-in nvcc."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from ci.builds import arch_flags
from ci.nvcc import shim


def toolkit(tmp_path: Path) -> Path:
    """A toolkit whose nvcc records its arguments and the NVCC_* variables it was given."""
    home = tmp_path / "real cuda"
    (home / "bin").mkdir(parents=True)
    (home / "include").mkdir()
    (home / "include" / "cuda.h").write_text("/* cuda */\n")
    (home / "bin" / "ptxas").write_text("ptxas\n")
    nvcc = home / "bin" / "nvcc"
    nvcc.write_text(f"#!{sys.executable}\nimport json, os, sys\nprint(json.dumps([sys.argv[1:], "
                    "{k: v for k, v in os.environ.items() if k.startswith('NVCC_')}]))\n")
    nvcc.chmod(0o755)
    return home


def test_the_shims_nvcc_runs_the_wrapper_in_front_of_the_real_nvcc(tmp_path: Path) -> None:
    real = toolkit(tmp_path)
    folder = tmp_path / "work" / "nvcc-front"
    nvcc = shim.make_shim(folder, real, [sys.executable, "-I", str(arch_flags.WRAPPER)])
    assert nvcc == folder / "bin" / "nvcc"
    assert (folder / "include" / "cuda.h").read_text() == "/* cuda */\n"
    assert os.readlink(folder / "bin" / "ptxas") == str(real / "bin" / "ptxas")
    env = {"PATH": f"{folder / 'bin'}{os.pathsep}{os.environ['PATH']}", "FARM_NVCC_ARCH_LIST": "9.0",
           "NVCC_APPEND_FLAGS": "-DFOO=1"}  # no FARM_NVCC_NEXT: the real nvcc, never the shim's on PATH
    done = subprocess.run([str(nvcc), "-c", "k.cu", "-o", "k.o", "-gencode=arch=compute_90,code=sm_90"], env=env,
                          capture_output=True, text=True, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == [["-c", "k.cu", "-o", "k.o", "-gencode=arch=compute_90,code=sm_90",
                                        "-DFOO=1"], {}]
    assert done.stderr == ("cuda-ext-farm nvcc: k.cu: -gencode=arch=compute_90,code=sm_90; "
                           "NVCC_APPEND_FLAGS: -DFOO=1\n")


def test_the_shim_is_rewritten_only_where_it_changed(tmp_path: Path) -> None:
    real = toolkit(tmp_path)
    folder = tmp_path / "nvcc-front"
    command = [sys.executable, "-I", str(arch_flags.WRAPPER)]
    nvcc = shim.make_shim(folder, real, command)
    os.utime(nvcc, (1, 1))
    shim.make_shim(folder, real, command)
    assert nvcc.stat().st_mtime == 1
    other = tmp_path / "other cuda"
    real.rename(other)
    shim.make_shim(folder, other, command)
    assert os.readlink(folder / "include") == str(other / "include") and str(other / "bin" / "nvcc") in (
        nvcc.read_text())


def test_a_toolkit_of_another_machine_is_linked_by_its_listed_entries(tmp_path: Path) -> None:
    """The container route: the toolkit is at /usr/local/cuda where the build runs, not here."""
    folder = tmp_path / "nvcc-front"
    nvcc = shim.make_shim(folder, "/usr/local/cuda", ["python", "-I", "/opt/farm/wrapper.py"],
                          entries=[("include", True), ("bin/ptxas", False), ("bin/nvcc", False)])
    assert os.readlink(folder / "include") == "/usr/local/cuda/include"
    assert os.readlink(folder / "bin" / "ptxas") == "/usr/local/cuda/bin/ptxas"
    assert "exec python -I /opt/farm/wrapper.py" in nvcc.read_text()
    assert "/usr/local/cuda/bin/nvcc" in nvcc.read_text()


def test_windows_gets_a_batch_file(tmp_path: Path) -> None:
    nvcc = shim.make_shim(tmp_path / "f", r"C:\cuda", ["python", "-I", r"C:\farm\wrapper.py"], windows=True,
                          entries=[])
    text = nvcc.read_bytes().decode()
    assert nvcc.name == "nvcc.bat" and "\r\n" in text
    assert r'set "FARM_NVCC_NEXT=C:\cuda\bin\nvcc.exe"' in text and r"python -I C:\farm\wrapper.py %*" in text
