"""The Windows half of the farm: MSVC discovery and activation (vswhere, vcvarsall), toolset gating per CUDA
version, the CUDA toolkit on Windows, delvewheel repair and the PE audit, and the JIT runner.

Parsing and choosing are pure functions over recorded inputs; running vswhere/vcvarsall is a thin layer on
``ci/proc.py``. See windows/README.md.
"""
