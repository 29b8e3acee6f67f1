"""What a build runs with, installed by the farm and never taken from the machine: the hermetic CUDA toolkit
(``toolkit``), the Python environments with the target's torch (``envs``) and the compiler cache (``compiler_cache``).
"""
