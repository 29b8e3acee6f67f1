"""Linux builds, beside ``windows/``: the host build (``host``), the container build in a cell's builder image
(``container``, ``images``, ``image_contents``, ``debian``), the aarch64 cross build and its qemu import (``cross``,
``qemu``), the bullseye sysroot (``sysroot``), how each target is built here and on GitHub (``routes``), every target in
containers (``buildall``), the dev loop and shell (``develop``, ``shell``, ``image_commands``) and the build
measurements (``reproduce``, ``buildbench``).
"""
