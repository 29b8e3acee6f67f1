"""``dispatch.yml``: build, test and (optionally) publish only the targets a person names, started by hand
(``workflow_dispatch``), and the pieces it shares with ``release.yml`` (``ci/gha/jobs.py``).

Inputs: ``targets`` (ids, separated by spaces or commas), ``torch``, ``cuda``, ``python``, ``os`` (all, linux,
windows) and ``publish`` (off by default). Jobs:

``plan``            resolves the inputs with the farm's own selection (``selection.select``, what ``python -m ci
                    matrix`` runs) into the ids of the targets the workflows build: ``python -m ci release
                    dispatch-plan`` (ci/release/dispatch.py) reads them from ``FARM_DISPATCH_*`` (set by ``env:``; no
                    input is expanded inside a script). An id the workflows do not build, a filter that selects
                    nothing, a local stand-in, a torch the targets are not built with, or ``publish`` off a ``v*``
                    tag or without its GitHub Release: one ``error:`` line, exit non-zero, before any build.
``wheels``          ``wheels.yml`` itself, called with ``targets``: the release's own build, audit and
                    import-test jobs, each skipped unless its id is in the plan (``only_selected``).
``gpu-tests``       ``gpu-tests.yml`` the same way.
``assemble``        ``--dispatch-assemble``: the selected wheels audited again and written as a release folder
                    (per-variant indexes, SHA256SUMS, manifest), every index checked with pip as in a release.
``publish-github``  (``publish`` on a ``v*`` tag) ``--dispatch-merge`` merges the wheels into that tag's GitHub
                    Release: the release's manifest and SHA256SUMS are read back, new files added, a file the
                    release already has with the same SHA-256 left as it is, one of the same name with other bytes
                    refused (a published file is never replaced); then the new wheels, with build provenance, and
                    the merged manifest and SHA256SUMS are uploaded. Nothing is removed.
``publish-index``   the index site of every release rebuilt from their manifests: the same job as the release's.

Why a workflow of its own rather than inputs on ``release.yml``: a release publishes every target, the sdist and
PyPI's files from a tag's push, and writes its release's manifest whole; a dispatch adds some wheels to a release
that exists (merge, or refuse) and never touches PyPI (which cannot take a file back), so the two publish
differently and a mistake in one input cannot turn into a release. Why ``wheels.yml`` with an ``if`` per job
rather than a ``fromJSON`` matrix: each target's jobs are rendered from the matrix with their own runner, image,
Windows toolset and import commands; a dynamic matrix would need those steps rewritten as expressions, while this
reuses the release's very jobs (unselected ones show as skipped). Nothing here names a target, so a cell added
to the matrix changes ``wheels.yml`` and not this file.

Standard library only.
"""

from __future__ import annotations

from typing import Any

from ci.gha import actions
from ci.gha.steps import (
    LINUX_RUNNER,
    SELF_REPOSITORY_IGNORE,
    Context,
    Job,
    Step,
    document,
    download,
    permissions,
    prologue,
    upload,
)
from ci.gha.yamlout import Commented
from ci.universe.selection import PLAN_ENV

FILE = "dispatch.yml"
#: The input of wheels.yml and gpu-tests.yml that narrows them: a JSON list of target ids; empty: every target.
TARGETS_INPUT = {"description": "a JSON list of target ids to build (dispatch.yml's plan); empty: every target",
                 "type": "string", "required": False, "default": ""}
#: The environment of the Pages deployment (its deployment rule admits ``v*`` tags: docs/releasing.md).
PAGES_ENVIRONMENT = "github-pages"


def selected(target_id: str) -> str:
    """Whether a target's job runs in a workflow called with ``targets``: when none are named, or when this one
    is (``contains`` of a list compares whole elements; ``||`` never evaluates ``fromJSON('')``)."""
    return f"!inputs.targets || contains(fromJSON(inputs.targets), '{target_id}')"


def only_selected(job: Job, target_id: str) -> Job:
    """``job`` with the ``selected`` condition after its name, and'ed with a condition it has (an ``if:`` that
    starts with ``!`` must be written as an expression)."""
    condition = f"{job['if']} && ({selected(target_id)})" if "if" in job else f"${{{{ {selected(target_id)} }}}}"
    result: Job = {}
    for key, value in job.items():
        if key == "if":
            continue
        result[key] = value
        if key == "name":
            result["if"] = condition
    return result


def local_workflow(name: str) -> Commented:
    return Commented(f"./.github/workflows/{name}", SELF_REPOSITORY_IGNORE)


SITE_SCRIPT = (
    "mkdir -p manifests\n"
    'gh release list --repo "$GITHUB_REPOSITORY" --limit 1000 --json tagName --jq ".[].tagName" \\\n'
    "  | while read -r tag; do\n"
    '    gh release download "$tag" --repo "$GITHUB_REPOSITORY" --pattern release-manifest.json '
    '--dir "manifests/$tag" \\\n'
    '      || echo "::notice::release $tag has no release-manifest.json (not made by the farm)"\n'
    "  done\n"
    "python -m ci release site site --manifests manifests "
    '--base-url "https://github.com/$GITHUB_REPOSITORY/releases/download"\n'
)


def index_site_job(ctx: Context, condition: str, needs: str) -> Job:
    """The per-variant indexes of every release, from their manifests, deployed to GitHub Pages (the release's
    and the dispatch's last job: a site of every release, so adding one release's files removes nothing)."""
    return {
        "name": "per-variant indexes on GitHub Pages", "if": condition, "needs": needs,
        "runs-on": LINUX_RUNNER, "timeout-minutes": 20,
        "environment": {"name": PAGES_ENVIRONMENT, "url": "${{ steps.deploy.outputs.page_url }}"},
        "permissions": permissions(contents="read", pages="write", oidc="deploy to GitHub Pages"),
        "steps": [*prologue(ctx),
                  {"name": "The indexes of every release (from their manifests)",
                   "env": {"GH_TOKEN": "${{ github.token }}"}, "run": SITE_SCRIPT},
                  {"name": "Upload the site", "uses": actions.UPLOAD_PAGES_ARTIFACT.uses(), "with": {"path": "site/"}},
                  {"name": "Deploy", "id": "deploy", "uses": actions.DEPLOY_PAGES.uses()}]}


#: Publishing needs the release of the run's tag to exist already: checked before anything is built.
RELEASE_EXISTS = (
    'if ! gh release view "$GITHUB_REF_NAME" --repo "$GITHUB_REPOSITORY" --json tagName > /dev/null; then\n'
    '  echo "error: no GitHub Release to add the wheels to ($GITHUB_REF_NAME): the release workflow creates it '
    '(push the tag); a dispatch only adds to it"\n'
    "  exit 2\n"
    "fi\n"
)

ASSEMBLE_SCRIPT = (
    "tag_args=()\n"
    'if [ "$GITHUB_REF_TYPE" = tag ]; then tag_args=(--tag "$GITHUB_REF_NAME"); fi\n'
    'python -m ci release dispatch-assemble artifacts --out release "${tag_args[@]}"\n'
)

PUBLISHED_SCRIPT = (
    'gh release download "$GITHUB_REF_NAME" --repo "$GITHUB_REPOSITORY" --dir published \\\n'
    "  --pattern release-manifest.json --pattern SHA256SUMS\n"
    "python -m ci release dispatch-merge release --published published --out merged\n"
)

UPLOAD_SCRIPT = (
    # The wheels first, then the manifest that lists them: the index never links a file that is not there. A
    # wheel the published manifest does not list may be left by an interrupted upload: --clobber replaces it.
    "shopt -s nullglob\n"
    "new=(merged/new/*)\n"
    'if [ "${#new[@]}" -gt 0 ]; then\n'
    '  gh release upload "$GITHUB_REF_NAME" --repo "$GITHUB_REPOSITORY" --clobber "${new[@]}"\n'
    "fi\n"
    'gh release upload "$GITHUB_REF_NAME" --repo "$GITHUB_REPOSITORY" --clobber '
    "merged/release-manifest.json merged/SHA256SUMS\n"
    'gh release view "$GITHUB_REF_NAME" --repo "$GITHUB_REPOSITORY" --json assets --jq ".assets[].name" \\\n'
    "  | sort > uploaded.txt\n"
    "sed 's/^[0-9a-f]*  //' merged/SHA256SUMS | sort > listed.txt\n"
    'missing="$(comm -23 listed.txt uploaded.txt)"\n'
    'if [ -n "$missing" ]; then\n'
    '  echo "::error title=dispatch::SHA256SUMS lists files the release lacks: $missing"\n'
    "  exit 1\n"
    "fi\n"
)


def plan_job(ctx: Context) -> Job:
    plan_env = {variable: f"${{{{ inputs.{name} }}}}" for name, variable in PLAN_ENV.items()}
    steps: list[Step] = [
        *prologue(ctx),
        {"name": "The targets the inputs select (the farm's selection; one error line when it is empty)",
         "id": "plan", "env": plan_env, "run": "python -m ci release dispatch-plan"},
        {"name": "publish: the tag's GitHub Release exists", "if": "inputs.publish",
         "env": {"GH_TOKEN": "${{ github.token }}"}, "run": RELEASE_EXISTS},
    ]
    return {"name": "plan: the targets the inputs select", "runs-on": LINUX_RUNNER, "timeout-minutes": 15,
            "permissions": permissions(contents="read"), "outputs": {"targets": "${{ steps.plan.outputs.targets }}"},
            "steps": steps}


def dispatch_workflow(ctx: Context) -> dict[str, Any]:
    def text(description: str) -> dict[str, Any]:
        return {"description": description, "type": "string", "required": False, "default": ""}

    inputs = {
        "targets": text("target ids, separated by spaces or commas (python -m ci matrix lists them); empty: every "
                        "target the filters below select"),
        "torch": text("only targets built with this torch release (2.11)"),
        "cuda": text("only targets of this CUDA cell (13.0 or cu130) or CUDA major (13: its release cell)"),
        "python": text("only targets that serve this CPython (3.12)"),
        "os": {"description": "only targets of this OS", "type": "choice", "options": ["all", "linux", "windows"],
               "default": "all"},
        "publish": {"description": "add the wheels to the GitHub Release of this v* tag and to the index site "
                    "(never PyPI; a file the release has is never replaced)", "type": "boolean", "default": False},
    }
    selection = "${{ needs.plan.outputs.targets }}"
    publish = "inputs.publish && github.ref_type == 'tag'"
    jobs: dict[str, Job] = {
        "plan": plan_job(ctx),
        "wheels": {"name": "wheels (the selected targets)", "needs": "plan", "uses": local_workflow("wheels.yml"),
                   "with": {"cache": False, "targets": selection},
                   "permissions": permissions(contents="read", packages="read")},
        "gpu-tests": {"name": "GPU tests (the selected targets)", "needs": ["plan", "wheels"],
                      "uses": local_workflow("gpu-tests.yml"), "with": {"targets": selection},
                      "permissions": permissions(contents="read")},
        "assemble": {
            "name": "assemble the selected wheels: audit again, indexes, SHA256SUMS, manifest; check the indexes",
            "needs": ["plan", "wheels", "gpu-tests"], "runs-on": LINUX_RUNNER, "timeout-minutes": 30,
            "permissions": permissions(contents="read"),
            "steps": [*prologue(ctx), download(None, "artifacts", pattern="wheel-*"),
                      {"name": "python -m ci release dispatch-assemble",
                       "env": {"FARM_DISPATCH_SELECTED": selection}, "run": ASSEMBLE_SCRIPT},
                      upload("dispatch-release", "release/")]},
        "publish-github": {
            "name": "add the wheels to the tag's GitHub Release (merge: nothing removed or replaced)",
            "if": publish, "needs": "assemble", "runs-on": LINUX_RUNNER, "timeout-minutes": 30,
            # One writer of a release's manifest at a time: the release workflow's own runs of the tag too.
            "concurrency": {"group": "release-${{ github.ref }}", "cancel-in-progress": False},
            "permissions": permissions(contents="write", attestations="write", oidc="sign the build provenance"),
            "steps": [*prologue(ctx), download("dispatch-release", "release"),
                      {"name": "Merge with the release's manifest and SHA256SUMS (refuse a replaced file)",
                       "env": {"GH_TOKEN": "${{ github.token }}"}, "run": PUBLISHED_SCRIPT},
                      {"name": "Build provenance for the new files", "uses": actions.ATTEST_BUILD_PROVENANCE.uses(),
                       "with": {"subject-checksums": "merged/ATTESTED-SUMS"}},
                      {"name": "Upload the new wheels, then the merged manifest and SHA256SUMS",
                       "env": {"GH_TOKEN": "${{ github.token }}"}, "run": UPLOAD_SCRIPT}]},
        "publish-index": index_site_job(ctx, publish, "publish-github"),
    }
    return document(ctx, "Dispatch: build and publish selected targets", {"workflow_dispatch": {"inputs": inputs}},
                    jobs, {"group": "dispatch-${{ github.ref }}", "cancel-in-progress": False})
