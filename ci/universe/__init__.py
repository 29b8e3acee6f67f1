"""The farm's universe of versions and a project's place in it: what can be built, and what a project asks for.

* ``matrix``: the one source of truth (CUDA cells, torch releases, the release floor, the indexes); ``shapes``: its
  records; ``archs``: the ``TORCH_CUDA_ARCH_LIST`` grammar and each toolkit's architectures;
* ``project``: ``[tool.cuda-ext-farm]`` read into a ``ProjectConfig`` (``tomlvalues``, ``sizes``: its value readers);
  ``project_commands``: the project's configured commands as argument lists;
* ``targets``: a build's identity (``Target``), the key of every folder, lock and job; ``selection``: a command
  line's selection narrowed to targets;
* ``pins``: hash-pinned locks made from the matrix; ``lockcheck``: proof that they install; ``torch_archs``: torch's own
  architecture lists read from PyPI; ``pypi_torch``: what PyPI says about each torch
  release; ``adoption``: its table entry written from that (``cuda-ext-farm adopt-torch``).

Standard library plus ``packaging`` only: ``noxfile.py`` and the installable command's launcher import it.
"""
