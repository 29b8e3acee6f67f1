"""The bullseye sysroot (ci/linux/sysroot.py): real compiles with the wrapper compilers, no mocks.

The sysroot is made once in the farm's cache (about 10 s: apt-get download of nine bullseye packages) and reused
afterwards; every test here then takes about a second. A machine without apt-get/dpkg-deb, Debian's keyring or
g++ skips them.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from ci import errors
from ci.audit import glibc_floor, symbols
from ci.linux import sysroot

LIB = """#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>
extern "C" int work(int n) {
  std::vector<std::string> v;
  std::mutex m;
  auto p = std::make_shared<int>(n);
  std::thread t([&] { std::lock_guard<std::mutex> g(m); for (int i = 0; i < n; ++i) v.push_back(std::to_string(i)); });
  t.join();
  try {
    if (n > 100) throw std::runtime_error("too many");
  } catch (const std::exception &) {
    return -1;
  }
  return static_cast<int>(v.size()) + *p;
}
"""
PROG = """#include <dlfcn.h>
#include <stdio.h>
int main(int argc, char **argv) {
  void *h = dlopen(argv[1], RTLD_NOW);
  if (!h) { printf("%s\\n", dlerror()); return 1; }
  int (*work)(int) = (int (*)(int))dlsym(h, "work");
  printf("work=%d\\n", work(5));
  return 0;
}
"""
#: gcc 12's headers call this (``new T[n]`` with a size unknown at compile time); gcc 10's libstdc++ lacks it.
MISSING = "_ZSt28__throw_bad_array_new_lengthv"
BAD = """#include <stdexcept>
namespace std { [[noreturn]] void __throw_bad_array_new_length(); }
extern "C" void boom(int n) {
  if (n < 0) std::__throw_bad_array_new_length();
  if (n > 0) throw std::runtime_error("boom");  // needs libstdc++.so.6, which defines the rest
}
"""

COMPILERS = {"x86_64": ("gcc", "g++"), "aarch64": ("aarch64-linux-gnu-gcc", "aarch64-linux-gnu-g++")}


def wrappers(arch: str) -> tuple[sysroot.Sysroot, Path, Path]:
    cc, cxx = COMPILERS[arch]
    if shutil.which(cc) is None or shutil.which(cxx) is None:
        pytest.skip(f"{cxx} is not installed")
    try:
        root = sysroot.ensure_sysroot(arch)
    except errors.MissingRequirement as exc:
        pytest.skip(f"no sysroot here: {exc}")
    wcc, wcxx = root.wrappers(cc, cxx)
    return root, wcc, wcxx


def build(tmp_path: Path, compiler: Path, name: str, source: str, *args: str) -> Path:
    src = tmp_path / name
    src.write_text(source)
    out = tmp_path / (Path(name).stem + (".so" if "-shared" in args else ""))
    libs = [a for a in args if a.startswith("-l")]
    flags = [a for a in args if not a.startswith("-l")]
    subprocess.run([str(compiler), *flags, "-O2", str(src), "-o", str(out), *libs], check=True)
    return out


def versions(path: Path) -> dict[str, str]:
    found = glibc_floor.read_versions(path, path.name)
    assert found is not None
    return glibc_floor.newest([found])


@pytest.mark.parametrize("arch", ["x86_64", "aarch64"])
def test_cxx17_library_has_bullseye_floor_and_loads_there(tmp_path: Path, arch: str) -> None:
    root, wcc, wcxx = wrappers(arch)
    lib = build(tmp_path, wcxx, "lib.cpp", LIB, "-std=c++17", "-fPIC", "-shared")
    newest = versions(lib)
    assert glibc_floor.version_key(newest["GLIBC"]) <= (2, 31), newest
    assert glibc_floor.version_key(newest["GLIBCXX"]) <= (3, 4, 28), newest
    prog = build(tmp_path, wcc, "prog.c", PROG, "-ldl")
    assert glibc_floor.version_key(versions(prog)["GLIBC"]) <= (2, 31)
    libs = ":".join(str(d) for d in root.system_lib_dirs())
    if arch == "x86_64":
        cmd = [str(root.loader), "--library-path", libs, str(prog), str(lib)]
    else:
        qemu = shutil.which("qemu-aarch64-static") or shutil.which("qemu-aarch64")
        if qemu is None:
            pytest.skip("no qemu-user for aarch64")
        cmd = [qemu, "-L", str(root.root), "-E", f"LD_LIBRARY_PATH={libs}", str(prog), str(lib)]
    run = subprocess.run(cmd, capture_output=True, text=True, env={"LD_DEBUG": "libs"})
    assert run.returncode == 0, run.stdout + run.stderr
    assert "work=10" in run.stdout
    # Every library came from the sysroot (an absolute link left in it would open this machine's).
    loaded = [line.split("calling init: ")[1] for line in run.stderr.splitlines() if "calling init: " in line]
    assert any("libstdc++.so.6" in p for p in loaded), run.stderr
    assert all(p.startswith(str(root.root)) or p == str(lib) or "/ld-linux" in p for p in loaded), loaded


def test_no_absolute_links_in_the_sysroot() -> None:
    root, _, _ = wrappers("x86_64")
    # bin/ holds the wrappers and their links to Debian's Python headers (absolute on purpose: see wrappers()).
    absolute = [p for p in root.root.rglob("*") if p.is_symlink() and str(p.readlink()).startswith("/")
                and not p.relative_to(root.root).parts[0] == "bin"]
    assert absolute == []
    assert root.loader.resolve().is_relative_to(root.root.resolve())


def test_unversioned_symbol_the_sysroot_lacks_is_unresolved(tmp_path: Path) -> None:
    """The trap: ld and auditwheel accept an unversioned undefined symbol; resolved against the sysroot's
    libraries (what the audit does for sysroot builds) it is reported, against this machine's it is not."""
    root, wcc, wcxx = wrappers("x86_64")
    lib = build(tmp_path, wcxx, "bad.cpp", BAD, "-std=c++17", "-fPIC", "-shared")
    assert MISSING in {name for name, _ in symbols.read_elf(lib).undefined}
    exe = build(tmp_path, wcc, "prog.c", PROG, "-ldl")
    in_sysroot = symbols.search_for([], exe, None, system_dirs=[str(d) for d in root.system_lib_dirs()])
    assert symbols.unresolved(lib, in_sysroot).unresolved == (MISSING,)
    here = symbols.search_for([], exe, None)
    assert symbols.unresolved(lib, here).unresolved == ()


def test_farm_sysroot_opt_out() -> None:
    assert sysroot.suite_from_env({}) == "bullseye"
    assert sysroot.suite_from_env({"FARM_SYSROOT": "none"}) is None
    assert sysroot.for_arch("x86_64", {"FARM_SYSROOT": "none"}) is None
    with pytest.raises(errors.UsageError):
        sysroot.suite_from_env({"FARM_SYSROOT": "buster"})


def test_wrappers_find_the_sysroot_wherever_it_is_mounted(tmp_path: Path) -> None:
    """A container mounts the folder elsewhere: the wrapper reads the sysroot off its own path."""
    root, _, _ = wrappers("x86_64")
    env = root.build_env("gcc", "g++", mount="/opt/farm-sysroot")
    assert env["CXX"].startswith("/opt/farm-sysroot/bin/") and env["CXX"].endswith("/g++")
    assert env["LDSHARED"] == env["LDCXXSHARED"] == f"{env['CXX']} -shared"  # no interpreter rpath (sysroot.py)
    moved = tmp_path / "moved"
    shutil.copytree(root.root / "bin", moved / "bin", symlinks=True)
    wcxx = moved / Path(env["CXX"]).relative_to("/opt/farm-sysroot")
    out = subprocess.run([str(wcxx), "-print-sysroot"], capture_output=True, text=True, check=True)
    assert Path(out.stdout.strip()) == moved
