"""The scheduled workflows that take a new torch release without anyone acting (``ci/universe/adoption.py``):

``adopt-torch.yml``  daily (and by hand). In the farm's repository: ``python -m ci adopt-torch --check`` with a
                     read-only token; when PyPI has a torch the table lacks (or differs from), a second job writes
                     the entries, makes the locks and workflows again and opens a pull request (the only job that
                     may write: contents and pull requests). In a project's repository: the targets its newest
                     ``v*`` release lacks (``coverage`` of the index site rebuilt from that release's manifest, no
                     wheel downloaded), then ``dispatch.yml`` started on that tag for exactly those targets with
                     ``publish``: built, audited, import- and GPU-tested, added to the release and the index site
                     (the only job that may start workflows: ``actions: write``). A tag whose farm pin does not
                     know the new torch yet builds nothing: its dispatch plan refuses the ids in one line, and the
                     next release (with the farm pin moved) carries them. A stable-ABI project's targets do not
                     depend on the torch release, so none is missing: its released wheel is tested instead beside
                     the newest torch of the farm's table (``test --torch``: the smoke and CPU tests, no rebuild;
                     the wheel's ``Requires-Dist`` floor stays) and the result written to the run's summary.
``torch-canary.yml`` daily (and by hand): the project built and CPU-tested against the next torch, the release
                     candidate on PyTorch's test channel (``download.pytorch.org/whl/test/cpu``), on the runner
                     with pip alone (the farm's table knows no release candidate): a CPU build, the project's
                     smoke and CPU test commands; nothing published, read-only token.

A pull request opened with the workflow's token starts no workflow (GitHub's rule against recursion): the farm's
CI runs on it when a maintainer pushes to it or closes and reopens it.

Standard library only.
"""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

from ci.gha.steps import (
    LINUX_RUNNER,
    Context,
    Job,
    Step,
    document,
    permissions,
    prologue,
)
from ci.gha.yamlout import Commented
from ci.universe import matrix, project_commands, targets

FILES = ("adopt-torch.yml", "torch-canary.yml")
#: PyTorch's release-candidate channel (CPU builds: the canary compiles no CUDA).
TEST_CHANNEL = f"{matrix.PYTORCH_INDEX}/test/cpu"
#: When the scheduled runs start (UTC): after PyTorch's usual upload hours.
ADOPT_CRON = "17 6 * * *"
CANARY_CRON = "43 6 * * *"
#: The branch the farm's adoption pull request comes from.
ADOPT_BRANCH = "adopt-torch"

#: Exit 1: something new (the pull-request job runs); 0: nothing new, a release still being uploaded included ("upload
#: incomplete, try later": a notice on the run, and the next day's run adopts it); anything else fails the job.
CHECK_SCRIPT = (
    "set +e\n"
    "python -m ci adopt-torch --check | tee adopt.txt\n"
    "code=${PIPESTATUS[0]}\n"
    "set -e\n"
    'if [ "$code" = 1 ]; then echo "new=true" >> "$GITHUB_OUTPUT"; exit 0; fi\n'
    'echo "new=false" >> "$GITHUB_OUTPUT"\n'
    'if [ "$code" = 0 ] && grep -q "^upload incomplete, try later" adopt.txt; then\n'
    '  echo "::notice title=adopt-torch::$(grep -m 1 "^upload incomplete, try later" adopt.txt)"\n'
    "fi\n"
    'exit "$code"\n'
)

PULL_REQUEST_SCRIPT = (
    'git config user.name "github-actions[bot]"\n'
    'git config user.email "41898282+github-actions[bot]@users.noreply.github.com"\n'
    f'git switch -C "{ADOPT_BRANCH}"\n'
    "git add -A ci/universe/matrix.py ci/requirements .github/workflows\n"
    'git commit -m "adopt-torch: the torch releases PyPI has" -m "$(cat adopt.txt)"\n'
    f'git push --force "https://x-access-token:${{GH_TOKEN}}@github.com/${{GITHUB_REPOSITORY}}.git" "{ADOPT_BRANCH}"\n'
    f'if ! gh pr view "{ADOPT_BRANCH}" --repo "$GITHUB_REPOSITORY" > /dev/null 2>&1; then\n'
    f'  gh pr create --repo "$GITHUB_REPOSITORY" --head "{ADOPT_BRANCH}" --base "$DEFAULT_BRANCH" '
    '--title "adopt-torch: new torch releases from PyPI" --body-file adopt.txt\n'
    "fi\n"
)

MISSING_SCRIPT = (
    'tag="$(gh release list --repo "$GITHUB_REPOSITORY" --limit 100 --json tagName,isDraft '
    "--jq '[.[] | select(.isDraft | not) | .tagName | select(startswith(\"v\"))][0] // \"\"')\"\n"
    'if [ -z "$tag" ]; then\n'
    '  echo "::notice title=adopt-torch::no v* release yet: nothing to complete"\n'
    '  echo "targets=" >> "$GITHUB_OUTPUT"\n'
    "  exit 0\n"
    "fi\n"
    'gh release download "$tag" --repo "$GITHUB_REPOSITORY" --pattern release-manifest.json --dir "manifests/$tag"\n'
    "python -m ci release --site site --manifests manifests "
    '--base-url "https://github.com/$GITHUB_REPOSITORY/releases/download"\n'
    "python -m ci coverage site --json > coverage.json\n"
    "missing=\"$(python -c 'import json; print(\" \".join(json.load(open(\"coverage.json\"))[\"missing\"]))')\"\n"
    'echo "release $tag lacks: ${missing:-nothing}"\n'
    '{ echo "tag=$tag"; echo "targets=$missing"; } >> "$GITHUB_OUTPUT"\n'
)

DISPATCH_SCRIPT = (
    'gh workflow run dispatch.yml --repo "$GITHUB_REPOSITORY" --ref "$TAG" -f targets="$TARGETS" -f publish=true\n'
)


def farm_adopt_jobs(ctx: Context) -> dict[str, Job]:
    check: Job = {
        "name": "adopt-torch --check: TORCH_RELEASES against PyPI", "runs-on": LINUX_RUNNER, "timeout-minutes": 20,
        "permissions": permissions(contents="read"), "outputs": {"new": "${{ steps.check.outputs.new }}"},
        "steps": [*prologue(ctx),
                  {"name": "Compare the table with PyPI (exit 1: something new or different)", "id": "check",
                   "run": CHECK_SCRIPT}]}
    write_steps: list[Step] = [
        *prologue(ctx),
        {"name": "uv (what `nox -s lock` installs to make the locks)", "run": "python -m pip install uv"},
        {"name": "Write the entries, the locks and the workflows",
         "run": "python -m ci adopt-torch | tee adopt.txt"},
        {"name": "Open (or update) the pull request",
         "env": {"GH_TOKEN": "${{ github.token }}", "DEFAULT_BRANCH": "${{ github.event.repository.default_branch }}"},
         "run": PULL_REQUEST_SCRIPT},
    ]
    pull_request: Job = {
        "name": "adopt-torch: a pull request with the new entries", "needs": "check",
        "if": "needs.check.outputs.new == 'true'", "runs-on": LINUX_RUNNER, "timeout-minutes": 30,
        "permissions": {"contents": Commented("write", "push the adoption branch"),
                        "pull-requests": Commented("write", "open the pull request that adopts a new torch release")},
        "steps": write_steps}
    return {"check": check, "pull-request": pull_request}


def project_adopt_jobs(ctx: Context) -> dict[str, Job]:
    missing: Job = {
        "name": "the targets the newest release lacks (coverage of its index)", "runs-on": LINUX_RUNNER,
        "timeout-minutes": 20, "permissions": permissions(contents="read"),
        "outputs": {"tag": "${{ steps.missing.outputs.tag }}", "targets": "${{ steps.missing.outputs.targets }}"},
        "steps": [*prologue(ctx),
                  {"name": "coverage of the newest v* release", "id": "missing",
                   "env": {"GH_TOKEN": "${{ github.token }}"}, "run": MISSING_SCRIPT}]}
    dispatch: Job = {
        "name": "dispatch.yml for exactly those targets (build, audit, test, publish)", "needs": "missing",
        "if": "needs.missing.outputs.targets != ''", "runs-on": LINUX_RUNNER, "timeout-minutes": 10,
        "permissions": {"actions": Commented("write", "start dispatch.yml for the targets the release lacks")},
        "steps": [{"name": "Start dispatch.yml on the release's tag",
                   "env": {"GH_TOKEN": "${{ github.token }}", "TAG": "${{ needs.missing.outputs.tag }}",
                           "TARGETS": "${{ needs.missing.outputs.targets }}"},
                   "run": DISPATCH_SCRIPT}]}
    jobs = {"missing": missing, "dispatch": dispatch}
    if ctx.config.abi == "stable":
        jobs["compat"] = stable_compat_job(ctx)
    return jobs


def compat_script(target: targets.Target, torch: str) -> str:
    """Download the release's wheel of ``target`` and run the farm's smoke and CPU tests with it beside ``torch``
    (``test --torch``: a stable-ABI target keeps its id, its test environment takes that torch)."""
    pattern = f"{target.project.normalized_name}-*-{target.wheel_tag_prefix}-{matrix.RELEASE_FLOOR}_{target.arch}.whl"
    pick = "grep -v '+'" if not target.local_version else f"grep -F '+{target.local_version}-'"
    return (
        f'gh release download "$TAG" --repo "$GITHUB_REPOSITORY" --pattern "{pattern}" --dir release-wheels\n'
        f'wheel="$(find release-wheels -name "*.whl" | {pick} | head -n 1)"\n'
        'if [ -z "$wheel" ]; then echo "error: release $TAG has no wheel of ' + target.id + '"; exit 2; fi\n'
        f'python -m ci test --target {target.id} --torch {torch} --wheel "$wheel"\n'
        f'echo "compat: $(basename "$wheel") imports and passes its CPU tests beside torch {torch} (no rebuild; '
        'its Requires-Dist floor stays)" | tee -a "$GITHUB_STEP_SUMMARY"\n'
    )


def stable_compat_job(ctx: Context) -> Job:
    """A stable-ABI project needs no rebuild for a new torch: its released wheel is tested beside the newest torch
    of the farm's table (the one an adoption adds) and the result recorded in the run's summary."""
    target, newest = ctx.release_target, matrix.TORCH_RELEASES[-1].version
    return {
        "name": f"the released stable-ABI wheel beside torch {newest} (no rebuild)", "needs": "missing",
        "if": "needs.missing.outputs.tag != ''", "runs-on": LINUX_RUNNER, "timeout-minutes": 60,
        "permissions": permissions(contents="read"),
        "steps": [*prologue(ctx),
                  {"name": f"smoke and CPU tests of {target.id} with torch {newest}",
                   "env": {"GH_TOKEN": "${{ github.token }}", "TAG": "${{ needs.missing.outputs.tag }}"},
                   "run": compat_script(target, newest)}]}


def adopt_workflow(ctx: Context) -> dict[str, Any]:
    jobs = project_adopt_jobs(ctx) if ctx.external else farm_adopt_jobs(ctx)
    return document(ctx, "Adopt new torch releases", {"schedule": [{"cron": ADOPT_CRON}], "workflow_dispatch": None},
                    jobs, {"group": "adopt-torch", "cancel-in-progress": False})


def _command(command: tuple[str, ...] | None) -> str | None:
    if command is None:
        return None
    root = "${GITHUB_WORKSPACE}"  # a marker: the checkout's path on the runner, written unquoted below
    parts = project_commands.expand(command, python="python", project_root=Path(root), out="canary-out",
                                    wheel="canary")
    return " ".join(p if root in p else shlex.quote(p) for p in parts).replace(root, '"$GITHUB_WORKSPACE"')


def canary_workflow(ctx: Context) -> dict[str, Any]:
    commands = ctx.config.commands
    steps: list[Step] = [
        *prologue(ctx, lock="test"),
        {"name": "Build tools (ci/requirements/build.txt, hash-pinned)",
         "run": f"python -m pip install --require-hashes --no-deps -r {ctx.requirements('build')}"},
        {"name": "The next torch: the release candidate on PyTorch's test channel (CPU build)",
         "run": f"python -m pip install --pre torch --index-url {TEST_CHANNEL}\n"
                "python -c 'import torch; print(\"torch\", torch.__version__)'"},
        {"name": f"CPU build of {ctx.config.name} against it (no CUDA, nothing published)",
         "env": {"FORCE_CUDA": "0", "CUDA_HOME": ""},
         "run": "python -m pip wheel --no-build-isolation --no-deps --wheel-dir canary .\n"
                "python -m pip install --no-deps canary/*.whl"},
    ]
    for name, command in (("smoke", commands.smoke), ("CPU tests", commands.test)):
        line = _command(command)
        if line is not None:
            steps.append({"name": f"{name} (the project's configured command)",
                          "working-directory": "${{ runner.temp }}", "run": f"mkdir -p canary-out\n{line}"})
    jobs: dict[str, Job] = {
        "canary": {"name": f"{ctx.config.name} against torch's release candidate (CPU)", "runs-on": LINUX_RUNNER,
                   "timeout-minutes": 60, "permissions": permissions(contents="read"), "steps": steps}}
    return document(ctx, "Canary: the next torch", {"schedule": [{"cron": CANARY_CRON}], "workflow_dispatch": None},
                    jobs, {"group": "torch-canary", "cancel-in-progress": True})
