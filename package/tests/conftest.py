"""fusedops' tests: fusedops is imported from the installed wheel (package/ is deliberately not on sys.path); the
tests marked ``cuda`` are skipped where no GPU is visible (the GPU lanes of ``nox -s test-gpu`` run them)."""

from __future__ import annotations

import os

import pytest


def cuda_available() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if os.environ.get("FARM_QUICK") == "1":  # test-gpu --quick
        quick = pytest.mark.skip(reason="FARM_QUICK=1: the >2^31-element cases are skipped")
        for item in items:
            if "large" in item.keywords:
                item.add_marker(quick)
    if cuda_available():
        return
    skip = pytest.mark.skip(reason="no CUDA GPU visible (CUDA variants run on GPU machines: nox -s test-gpu)")
    for item in items:
        if "cuda" in item.keywords:
            item.add_marker(skip)
