"""A built wheel tested the way a user installs it: the project's smoke and CPU tests in a clean environment
(``wheel_tests``) and the GPU lanes on this machine's GPUs (``gpu_lanes``).
"""
