"""What runs in front of nvcc inside a project's build, on every route: ``wrapper.py`` (the architecture flags of
each compile: refused, replaced or kept, by the project's choice) and, for nvcc older than 12.8,
``nvcc-module-anchor`` (deterministic anonymous-namespace names). Files here run inside the build (a container
mounts the folder read-only), so they use the standard library only."""
