"""The farm's extended suite on GitHub (``extended-tests.yml``, the farm's own workflows only): ``nox -s
tests-extended`` (the container tests and the long runs the CI workflow leaves out) once a week and by hand, after
the system packages those tests use (``.ci/system-packages extended``, the list ``.ci/run extended`` installs too).

It runs as root, as ``.ci/run`` does: sccache-dist's build server sandboxes compiles with bubblewrap as root, and
debootstrap (the Debian base, the arm64 root qemu runs) needs root.
"""

from __future__ import annotations

from typing import Any

from ci.gha.steps import LINUX_RUNNER, Context, Job, document, make_room, permissions, prologue

FILE = "extended-tests.yml"
#: Weekly, Monday early morning (UTC): the suite takes hours of a runner; every push runs the default suite.
EXTENDED_CRON = "37 4 * * 1"
#: As the container build jobs: about 20 minutes on 2 cores here with warm caches (docs/contributing.md); a runner
#: starts from empty ones (toolkits, torch environments, builder images).
TIMEOUT_MINUTES = 180
#: GiB free the suite needs: its CUDA torch volumes and environments take 5-7 GB each (docs/contributing.md).
DISK_NEEDED_GIB = 30
#: The script that holds the test machines' system packages (``.ci/run`` uses it too).
SYSTEM_PACKAGES = ".ci/system-packages"


def extended_workflow(ctx: Context) -> dict[str, Any]:
    """The one job: the farm's checkout, its lint tools (nox), room on the disk, the system packages, the suite."""
    steps = [
        *prologue(ctx, lock="lint"),
        make_room(DISK_NEEDED_GIB, "the suite's images, toolkits and torch environments", "the extended suite"),
        {"name": f"The extended suite's system packages ({SYSTEM_PACKAGES} extended, as .ci/run extended)",
         "run": f"sudo bash {SYSTEM_PACKAGES} extended"},
        # sudo keeps the job's environment (-E) and the PATH of setup-python's interpreter and its nox.
        {"name": "nox -s tests-extended (as root)",
         "run": 'sudo -E env "PATH=$PATH" nox -s tests-extended'},
    ]
    jobs: dict[str, Job] = {
        "tests-extended": {"name": "extended tests (containers and long runs: nox -s tests-extended)",
                           "runs-on": LINUX_RUNNER, "timeout-minutes": TIMEOUT_MINUTES,
                           "permissions": permissions(contents="read"), "steps": steps}}
    return document(ctx, "Extended tests", {"schedule": [{"cron": EXTENDED_CRON}], "workflow_dispatch": None}, jobs,
                    {"group": "extended-tests-${{ github.ref }}", "cancel-in-progress": True})
