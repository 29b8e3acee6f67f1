"""The import tests of a target's wheel, as commands: the release workflow runs them (ci/gha/jobs.py), and so does
the release dry run (ci/release/rehearsal.py), so both test the same way."""

from __future__ import annotations

from ci.universe import matrix, targets
from ci.universe.matrix import PYPI_INDEX, PYTORCH_INDEX


def torch_cuda_index(target: targets.Target) -> str:
    """PyTorch's index of the CUDA build of the target's torch (``…/cu130`` for torch 2.11)."""
    return f"{PYTORCH_INDEX}/cu{matrix.get_torch(target.torch).cuda.replace('.', '')}"


def import_commands(target: targets.Target, wheel: str = "dist") -> list[tuple[str, str]]:
    """(step name, command) of a target's import tests: the workflow runs them, and so does the release dry run
    (with ``--torch-index`` replaced where PyTorch's indexes cannot be reached). An aarch64 wheel is tested with
    PyPI's aarch64 torch, a CUDA build (2.11 onwards), on a runner with no GPU: the CPU-only import of a CUDA torch
    (``release_checks.cpu_import_torch`` hides the GPU), then the CUDA torch's import."""
    base = f"python -m ci release import-test {wheel} --target {target.id} --test-python {target.python}"
    found = []
    if target.os == "linux" and target.arch != "x86_64":
        if target.project.cpu_libraries:
            found.append((f"Import on CPython {target.python} ({target.arch}) with PyPI's torch {target.torch}, a "
                          "CUDA build, and no GPU", f"{base} --torch-kind cpu --torch-index {PYPI_INDEX}"))
        found.append((f"Import on CPython {target.python} ({target.arch}) with PyPI's CUDA torch {target.torch} "
                      f"of {target.cell.name}", f"{base} --torch-kind cuda --torch-index {PYPI_INDEX}"))
        return found
    if target.project.cpu_libraries:
        found.append((f"Import on CPython {target.python} with a CPU-only torch {target.torch}",
                      f"{base} --torch-kind cpu --torch-index {PYTORCH_INDEX}/cpu"))
    found.append((f"Import on CPython {target.python} with the CUDA torch of {target.cell.name} (torch {target.torch})",
                  f"{base} --torch-kind cuda --torch-index {torch_cuda_index(target)}"))
    return found
