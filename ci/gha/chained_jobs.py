"""A Linux target's build in wheels.yml as a chain of jobs, so that a build longer than a runner's time limit
finishes: each link builds with ``--deadline`` set to the job's end less the time to save the compile cache
(ci/builds/progress/deadline.py); a build stopped there exits :data:`EXIT_DEADLINE`, the link saves the compile
cache (the container route's ccache volume) and the farm's compile records (``compile-records/`` of its cache
folder: each compile's measured need and duration, ci/builds/progress/records.py) as an artifact of this run, and
the next link (``needs:`` the one before, run only when it stopped) restores both and runs the same command, which
compiles only what is missing, admitted and estimated from the first link's records.
Up to :data:`LINKS` links; the last one's stop is a failure. The wheel is uploaded by the link that finished, and
the import test needs every link.

The hand-off is an artifact, not the Actions cache: it lives in this run only, so no other run (a fork's pull
request, another branch) can hand a release compiled objects, and a release (wheels.yml with ``cache: false``)
stays cache-free.
"""

from __future__ import annotations

from ci.gha.dispatch_jobs import only_selected
from ci.gha.steps import (
    LINUX_RUNNERS,
    Context,
    Job,
    Step,
    base_image_env,
    cached_build,
    cell_summary,
    download,
    free_disk,
    glibc_floor_env,
    image_steps,
    job_key,
    permissions,
    prologue,
    registry_login,
    upload,
)
from ci.universe import targets

#: ci/builds/progress/deadline.py's EXIT_DEADLINE (that module is not standard library only).
EXIT_DEADLINE = 75
LINKS = 3
#: A link's time limit, and what of it is kept for saving the compile cache after a stop.
TIMEOUT_MINUTES = 180
SAVE_MINUTES = 15
#: The container route's ccache volume (ci/linux/container.py's CCACHE_VOLUME) and its hand-off file; the farm's
#: compile records' hand-off file.
CCACHE_VOLUME = "cuda-ext-farm-ccache"
HANDOFF = "compile-cache.tar"
RECORDS_HANDOFF = "compile-records.tar"
STOPPED = f"steps.build.outputs.status == '{EXIT_DEADLINE}'"
#: The job's end less the time to save: written at the job's start, before anything else takes time.
DEADLINE_SCRIPT = (f'echo "JOB_DEADLINE=$(date -u -d "+{TIMEOUT_MINUTES - SAVE_MINUTES} minutes" '
                   f'+%Y-%m-%dT%H:%M:%S+00:00)" >> "$GITHUB_ENV"')
#: The volume's folder on the runner (docker says where it is); the objects are the build user's: tar as root.
VOLUME_FOLDER = f"volume=\"$(docker volume inspect --format '{{{{ .Mountpoint }}}}' {CCACHE_VOLUME})\"\n"
#: The farm's compile records (ci/builds/progress/records.py's ``cache_file``), where ci/toolenv.py's ``cache_root``
#: puts them: FARM_CACHE_DIR, else XDG_CACHE_HOME's or ~/.cache's cuda-ext-farm (the runner user's: no sudo).
RECORDS_FOLDER = 'records="${FARM_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/cuda-ext-farm}/compile-records"\n'
#: A build that recorded no compile (stopped before its first finished) has no records folder: none saved.
SAVE_SCRIPT = (f'set -euo pipefail\n{VOLUME_FOLDER}sudo tar -C "$volume" -cf "$RUNNER_TEMP/{HANDOFF}" .\n'
               f'{RECORDS_FOLDER}if [ -d "$records" ]; then tar -C "$records" -cf "$RUNNER_TEMP/{RECORDS_HANDOFF}" .; '
               'fi\n')
#: The records go where the next link's farm reads them; a hand-off without them (none saved) restores none.
RESTORE_SCRIPT = (f"set -euo pipefail\ndocker volume create {CCACHE_VOLUME} >/dev/null\n{VOLUME_FOLDER}"
                  f'sudo tar -C "$volume" -xpf "$RUNNER_TEMP/{HANDOFF}"\nrm -f "$RUNNER_TEMP/{HANDOFF}"\n'
                  f'{RECORDS_FOLDER}if [ -f "$RUNNER_TEMP/{RECORDS_HANDOFF}" ]; then\n'
                  f'  mkdir -p "$records"\n  tar -C "$records" -xf "$RUNNER_TEMP/{RECORDS_HANDOFF}"\n'
                  f'  rm -f "$RUNNER_TEMP/{RECORDS_HANDOFF}"\nfi\n')
#: The artifact's paths: it holds the files at its top (their common folder), and the next link downloads it to its
#: runner's temp folder; the records' file, when none was saved, is left out (upload-artifact fails only when none of
#: its paths exists).
HANDED_PATHS = f"${{{{ runner.temp }}}}/{HANDOFF}\n${{{{ runner.temp }}}}/{RECORDS_HANDOFF}"


def link_key(target_id: str, link: int) -> str:
    return job_key("build", target_id) + ("" if link == 1 else f"-link{link}")


def handoff_name(target_id: str, link: int) -> str:
    return f"compile-cache-{target_id}-link{link}"


def build_script(target_id: str, link: int) -> str:
    """The build, its status as the step's output ``status``; a stop at the deadline passes but in the last link."""
    command = f'python -m ci build-cuda --target {target_id} --wheelhouse wheelhouse --deadline "$JOB_DEADLINE"'
    passes = (f'if [ "$status" -eq {EXIT_DEADLINE} ]; then exit 0; fi  # the next link resumes\n' if link < LINKS else
              f'if [ "$status" -eq {EXIT_DEADLINE} ]; then echo "::error::the build did not finish in {LINKS} '
              'links"; fi\n')
    return f'set +e\n{command}\nstatus=$?\necho "status=$status" >> "$GITHUB_OUTPUT"\n{passes}exit "$status"\n'


def link_job(ctx: Context, target: targets.Target, link: int) -> Job:
    """Link ``link`` (1 to :data:`LINKS`) of ``target``'s build."""
    cell = target.cell
    later = f" (link {link} of {LINKS}: resumes link {link - 1})" if link > 1 else ""
    job: Job = {"name": f"build {target.id}{later}", "runs-on": LINUX_RUNNERS[target.arch],
                "timeout-minutes": TIMEOUT_MINUTES, "permissions": permissions(contents="read", packages="read"),
                "env": {**glibc_floor_env(), **base_image_env([cell])},
                "outputs": {"status": "${{ steps.build.outputs.status }}"}}
    if link > 1:
        before = link_key(target.id, link - 1)
        job["needs"] = before
        job["if"] = f"needs.{before}.outputs.status == '{EXIT_DEADLINE}'"
    resume: list[Step] = [] if link == 1 else [
        download(handoff_name(target.id, link - 1), "${{ runner.temp }}"),
        {"name": f"Restore the compile cache and records link {link - 1} saved", "run": RESTORE_SCRIPT}]
    save: list[Step] = [] if link == LINKS else [
        {"name": "Save the compile cache and records (stopped at the deadline)", "if": STOPPED, "run": SAVE_SCRIPT},
        upload(handoff_name(target.id, link), HANDED_PATHS, retention=1, when=STOPPED)]
    build = cached_build({"name": f"cibuildwheel in the {cell.name} {target.arch} image, repair, audit "
                                  f"({cell_summary(cell)})", "id": "build", "run": build_script(target.id, link)},
                         scheduler=True, container=True)
    job["steps"] = [
        {"name": f"Deadline: the job's end less {SAVE_MINUTES} minutes to save the compile cache",
         "run": DEADLINE_SCRIPT},
        *prologue(ctx), free_disk(cell), registry_login(), *image_steps(ctx, cell, push=False, arch=target.arch),
        *resume, *build, *save,
        upload(f"wheel-{target.id}", f"wheelhouse/{target.id}/", when="steps.build.outputs.status == '0'"),
    ]
    return job


def linux_build_jobs(ctx: Context, target: targets.Target) -> dict[str, Job]:
    """The links of ``target``'s build, each run only for the selected targets."""
    return {link_key(target.id, n): only_selected(link_job(ctx, target, n), target.id) for n in range(1, LINKS + 1)}


def import_needs(target: targets.Target) -> tuple[list[str], str]:
    """The jobs an import test of a Linux target needs (every link) and its condition: one link built the wheel
    (the later ones are skipped when an earlier one finished)."""
    keys = [link_key(target.id, n) for n in range(1, LINKS + 1)]
    built = " || ".join(f"needs.{key}.outputs.status == '0'" for key in keys)
    return keys, f"({built}) && !cancelled()"
