"""The audit: what a built wheel links, holds and promises, checked before it is published.

The Linux audit (``wheel_audit``) and the Windows audit (``windows/audit.py``) report in the same records
(``checks``); ``naming`` holds the checks of a wheel's name and metadata, ``wheel_size`` the size budget,
``glibc_floor`` the glibc floor, ``symbols`` the dynamic loader's view, ``describe`` what a wheel says about itself,
``gpu_code`` the GPU-code part both audits share (which libraries hold CUDA code, SASS/PTX read with cuobjdump).

Each check is reported separately; a build publishes its wheel only when all pass.

* ``wheel-tag``: ``cpXY-cpXY`` for per-Python targets; for abi3 ones ``cpXY-abi3``
  whose floor XY is at or below the target's (requires-python's lower bound, else
  the build Python): an older floor serves every CPython the target does, a newer
  one would not install on Pythons the project promises (or on the build Python);
  and a manylinux platform tag (auditwheel repaired it);
* ``module-suffix``: no extension library is named for a CPython that will not import it: in an abi3 wheel
  ``.abi3.so`` or no suffix, in a classic one the target's ``.cpython-XY-<platform>.so``, ``.abi3.so`` or none
  (a library without one, ``no_python_abi_suffix=True``, is imported as ``NAME.so`` or loaded by path);
* ``metadata``: a classic wheel pins torch to the release it was built against
  and carries the target's local version (``+pt2.11.cu130``);
* ``needed:<lib>``: NEEDED only system libraries, torch's libraries, the CUDA
  libraries torch's wheels ship for the cell's major, or libraries bundled in
  the wheel; ``bundled``: nothing of torch or CUDA is bundled;
* ``cpu-only:<lib>``: the project's ``cpu-libraries`` need no CUDA library (they
  load under a CPU-only torch);
* ``cuda-code:<lib>``: the project's ``cuda-libraries`` hold CUDA code in a CUDA
  build (the usual failure: a ``setup.py`` that asked ``torch.cuda.is_available()``
  on a GPU-less builder with ``cuda-available-in-build = false``, or decided on
  something else) and link the CUDA runtime;
* ``cuda-major:<lib>`` / ``cuda-majors`` (a wheel across CUDA majors, ``pypi-cuda-majors``): each
  ``_cuda<MAJOR>/`` library links ``libcudart.so.<MAJOR>`` and no CUDA library of another major; every CUDA module
  has its loader, the wheel holds each major its torch requirement admits on PyPI, and each major's SASS/PTX is what
  ``cuda-ext-farm.json`` says (ci/audit/cuda_majors.py);
* ``c10-cuda:<lib>``: a library that uses ``c10::cuda`` symbols has
  ``libc10_cuda.so`` in NEEDED (``at::cuda``: ``libtorch_cuda.so``);
* ``symbols:<lib>``: every undefined symbol resolves in the target's torch
  environment as the loader would resolve it with ``RTLD_NOW`` (ci/audit/symbols.py);
* ``rpath:<lib>``: no RPATH/RUNPATH outside ``$ORIGIN``;
* ``elf-machine``: every library is code for the target's architecture (x86_64 or aarch64);
* ``gil:<module>`` (a free-threaded wheel, ``cp313-cp313t``): each Python extension module declares free-threading
  support (``PyUnstable_Module_SetGIL``, pybind11's ``py::mod_gil_not_used()``, or a ``Py_mod_gil`` slot); a
  warning naming what to add where it does not, never a failure (ci/audit/gil.py);
* ``sass``/``ptx``: cuobjdump finds SASS for every architecture of the target (by default those of the target
  torch's own build, ``nox -s matrix``) and PTX where one is asked for; ``sass-torch`` warns about SASS that no
  torch of the target's build runs beside;
* ``torch-range``: a stable wheel's ``Requires-Dist`` torch admits no release below the floor its binary's
  stable-ABI shims need (torch-abi-audit's table; ci/audit/describe.py); a classic one carries its pin;
* ``coverage-file``: ``<dist-info>/cuda-ext-farm.json`` agrees with the SASS/PTX found and the torch requirement;
* ``abi3audit``: no symbol outside the limited API (abi3 wheels);
* ``wheel-size``: the wheel is within the project's ``max-wheel-size`` (ci/audit/wheel_size.py; over it, the ten
  largest members are named), and the report says how many bytes of CUDA code each architecture adds;
* ``debug-info``: no library carries ``.debug_*`` sections (the build splits them off into
  ``debug/<build-id>.debug`` beside the wheel; ``strip-debug = false`` keeps them and makes this a warning), each
  named with its bytes (ci/audit/debug_info.py);
* ``fatbin``: whether each library's CUDA fatbinary is compressed (Zstandard, LZ4, or not); a report, a warning
  when an entry is not compressed, never a failure;
* ``glibc-floor``: no ELF object needs a glibc/libstdc++ symbol version above the
  context's floor (``FARM_GLIBC_FLOOR``, e.g. the release's ``manylinux_2_28``;
  ci/audit/glibc_floor.py), nor is the wheel tagged above it; skipped without a floor.
"""
