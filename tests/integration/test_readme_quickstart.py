"""The README's commands, run as written (issue 47): the quick start and farm/README.md, on a fresh project.

The commands are read from the Markdown itself (its ``sh`` code blocks, and the inline code that starts with a
command), so this test follows the text. The project is the quick start's: the files it shows (the code blocks whose
first line is ``# <file name>``) written over ``tests/fixtures/quickstart_ext`` (the sources they name) in a new
folder outside the checkout. The farm is the distribution of a clone of this checkout whose origin is the README's
placeholder repository, so ``--version`` and ``workflows render`` answer as they do for a user who installed it
from GitHub.

The default suite runs the light commands (``matrix``, ``--version``, ``--help``, ``--show-settings``, ``workflows
render``), checks the install lines, and checks that the README's configuration example is one the farm accepts. The
``extended`` part installs the farm with the README's own install line (the placeholder URL pointed at the clone),
then runs the quick start's build and test and prints each command's time.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import tomllib

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
FARM_README = ROOT / "farm" / "README.md"
FIXTURE = ROOT / "tests" / "fixtures" / "quickstart_ext"
#: The one placeholder the docs use for the farm's repository, and the one spec every install line takes.
REPOSITORY = "https://github.com/OWNER/FARM"
SPEC = f"git+{REPOSITORY}#subdirectory=farm"
PROGRAMS = ("cuda-ext-farm", "pipx", "uvx", "uv", "pip", "nox")
#: What runs in the default suite; any other command of the farm runs there with --show-settings (its arguments
#: parsed and checked, nothing run) and in full in the extended part.
LIGHT = {"matrix", "--version", "--help", "--show-settings", "workflows"}


# --- reading the Markdown -----------------------------------------------------------------------------------------

def fenced_blocks(text: str) -> list[tuple[str, str]]:
    """(language, body) of each fenced code block, its indentation (a block inside a list item) removed."""
    found = re.finditer(r"^([ \t]*)```([\w-]*)[ \t]*\n(.*?)^[ \t]*```[ \t]*$", text, re.MULTILINE | re.DOTALL)
    blocks = []
    for match in found:
        indent = len(match.group(1))
        body = "\n".join(line[indent:] for line in match.group(3).splitlines())
        blocks.append((match.group(2), body))
    return blocks


def inline_code(text: str) -> list[str]:
    """The inline code spans outside fenced blocks, whitespace (a span across a line break) made one space."""
    prose = re.sub(r"^[ \t]*```.*?^[ \t]*```[ \t]*$", "", text, flags=re.MULTILINE | re.DOTALL)
    return [" ".join(span.split()) for span in re.findall(r"`([^`]+)`", prose)]


def section(text: str, heading: str) -> str:
    return text.split(f"\n## {heading}\n", 1)[1].split("\n## ", 1)[0]


def is_command(line: str) -> bool:
    """A whole command: the farm's with a command or flag, nox with a session, an installer with the farm's spec
    (`pip install` alone, in a sentence, is a name, not a command)."""
    words = line.split()
    if len(words) < 2 or words[0] not in PROGRAMS:
        return False
    return words[0] in ("cuda-ext-farm", "nox") or "git+" in line


def has_placeholder(command: str) -> bool:
    """A command shown with a word to fill in (`INDEX`, `<spec>`, `...`): not runnable as written."""
    command = command.replace(SPEC, "")
    return bool(re.search(r"<[^>]*>|\.\.\.|…|\b[A-Z][A-Z_]{2,}\b", command))


def commands(path: Path, only_section: str | None = None) -> list[str]:
    """The commands a page shows: each line of its ``sh`` blocks (a trailing comment removed) and each inline span
    that is a whole command, in the order of the page, placeholders left out."""
    text = path.read_text(encoding="utf-8")
    if only_section:
        text = section(text, only_section)
    found: list[str] = []
    for language, body in fenced_blocks(text):
        if language in ("sh", "bash", "console", ""):
            for line in body.splitlines():
                line = re.sub(r"\s+#\s.*$", "", line).strip()
                if is_command(line):
                    found.append(line)
    found += [span for span in inline_code(text) if is_command(span)]
    return [c for c in dict.fromkeys(found) if not has_placeholder(c)]


def shown_files(text: str) -> dict[str, str]:
    """The files a page shows: code blocks whose first line is `# <file name>`."""
    files = {}
    for _language, body in fenced_blocks(text):
        first, _, rest = body.partition("\n")
        name = re.fullmatch(r"# ([\w.-]+\.(?:toml|py|cfg))", first.strip())
        if name and rest.strip():
            files[name.group(1)] = body + "\n"
    return files


# --- the farm, the project, running ----------------------------------------------------------------------------------

def _git(*args: str, cwd: Path) -> str:
    git = shutil.which("git")
    if git is None or not (ROOT / ".git").exists():
        pytest.skip("needs git and the farm's git checkout")
    return subprocess.run([git, *args], cwd=cwd, capture_output=True, text=True, check=True).stdout.strip()


@pytest.fixture(scope="module")
def clone(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """This checkout's commit, cloned, its origin the docs' placeholder repository (what `pip install <spec>`
    clones from GitHub)."""
    folder = tmp_path_factory.mktemp("farm-repository") / "farm"
    _git("clone", "--quiet", str(ROOT), str(folder), cwd=folder.parent)
    _git("remote", "set-url", "origin", f"{REPOSITORY}.git", cwd=folder)
    return folder


def _pip_env() -> dict[str, str]:
    # A machine-wide pip constraint (a torch cap) is not the farm distribution's concern (tests/conftest.py).
    return {**os.environ, "PIP_CONSTRAINT": os.devnull, "PIP_DISABLE_PIP_VERSION_CHECK": "1"}


@pytest.fixture(scope="module")
def installed(clone: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The farm's distribution built from the clone, pip-installed into a venv of its own: its `cuda-ext-farm`."""
    venv = tmp_path_factory.mktemp("farm-installed") / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet", str(clone / "farm")], check=True,
                   env=_pip_env())
    return venv / "bin" / "cuda-ext-farm"


def new_project(where: Path) -> Path:
    """A fresh folder with the quick start's project: the fixture's sources and the files the README shows."""
    project = where / "my_ext"
    shutil.copytree(FIXTURE, project)
    files = shown_files(section(README.read_text(encoding="utf-8"), "Quick start"))
    assert set(files) == {"pyproject.toml", "setup.py"}, sorted(files)
    for name, text in files.items():
        (project / name).write_text(text, encoding="utf-8")
    return project


def run(command: str, farm: Path, cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    argv = shlex.split(command)
    assert argv[0] == "cuda-ext-farm", command
    return subprocess.run([str(farm), *argv[1:]], cwd=cwd, text=True, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, timeout=3000, env={**os.environ, "COLUMNS": "100", **env})


def farm_commands() -> list[str]:
    """Every farm command of the README's quick start and of farm/README.md, in that order, once."""
    shown = commands(README, "Quick start") + commands(FARM_README)
    return [c for c in dict.fromkeys(shown) if c.startswith("cuda-ext-farm")]


def release_target_pattern() -> re.Pattern[str]:
    """The target id the quick start says `build` makes, its CPython left open (the one the farm runs on)."""
    ids = set(re.findall(r"my_ext-torch[\d.]+-cu\d+-cp\d+-linux_x86_64", section(README.read_text(), "Quick start")))
    assert len(ids) == 1, ids
    return re.compile(re.sub(r"cp\d+", r"cp\\d+", re.escape(ids.pop())))


# --- the default suite ---------------------------------------------------------------------------------------------

def test_the_docs_show_one_way_to_get_the_farm() -> None:
    """Every git URL README.md and farm/README.md show is the one spec, `#subdirectory=farm` included; each page
    installs with it, and the README shows it with pipx, uv and pip (installed, or run once)."""
    for path in (README, FARM_README):
        text = path.read_text(encoding="utf-8")
        urls = re.findall(r"git\+[^\s\"'`]+", text)
        assert urls and set(urls) == {SPEC}, (path.name, sorted(set(urls)))
        assert f'pipx install "{SPEC}"' in commands(path), path.name
    forms = {" ".join(shlex.split(c)[:2]) for c in commands(README) if SPEC in c}
    assert {"pipx install", "uv tool", "pip install", "pipx run", "uvx --from"} <= forms, forms


def test_the_quick_start_is_five_steps_at_most_and_the_readme_3000_words() -> None:
    text = README.read_text(encoding="utf-8")
    steps = re.findall(r"^(\d+)\. ", section(text, "Quick start"), re.MULTILINE)
    assert 0 < len(steps) <= 5, steps
    assert len(text.split()) <= 3000


def test_the_readme_and_farm_readme_light_commands_run_as_written(installed: Path, clone: Path,
                                                                  tmp_path: Path) -> None:
    project = new_project(tmp_path)
    shown = [c for path in (README, FARM_README) for c in commands(path) if c.startswith("cuda-ext-farm")]
    assert "cuda-ext-farm matrix" in shown and "cuda-ext-farm build" in shown
    head = _git("rev-parse", "HEAD", cwd=clone)
    for command in dict.fromkeys(shown):
        words = shlex.split(command)[1:]
        light = bool(LIGHT & set(words[:1]))
        result = run(command if light else f"{command} --show-settings", installed, project)
        assert result.returncode == 0, f"{command}:\n{result.stdout[-3000:]}"
        if words[:1] == ["matrix"]:
            assert release_target_pattern().search(result.stdout), result.stdout
            assert_the_defaults_are_the_readmes(installed, project)
        if words[:1] == ["--version"]:
            assert f"(commit {head} of {REPOSITORY})" in result.stdout, result.stdout
        if words[:2] == ["workflows", "render"]:
            wheels = (project / ".github" / "workflows" / "wheels.yml").read_text()
            assert "repository: OWNER/FARM\n" in wheels and f"ref: {head}\n" in wheels, wheels[:3000]


def matrix_json(farm: Path, project: Path) -> list[dict[str, object]]:
    result = run("cuda-ext-farm matrix --json --os all", farm, project)
    assert result.returncode == 0, result.stdout[-3000:]
    targets: list[dict[str, object]] = json.JSONDecoder().raw_decode(result.stdout[result.stdout.index("{"):])[0][
        "targets"]
    return targets


def assert_the_defaults_are_the_readmes(farm: Path, project: Path) -> None:
    """The torch releases and CUDA versions the quick start says an empty table selects are the matrix's."""
    said = set(re.findall(r"torch (\d+\.\d+) with CUDA\s+(\d+\.\d+)", section(README.read_text(), "Quick start")))
    found = {(".".join(str(t["torch"]).split(".")[:2]), str(t["cuda"])) for t in matrix_json(farm, project)}
    assert said == found, (said, found)


def test_the_configuration_example_is_one_the_farm_accepts(installed: Path, tmp_path: Path) -> None:
    """The README's example table, put in the quick start's project: `matrix` lists exactly what it narrows to."""
    text = section(README.read_text(encoding="utf-8"), "Project configuration")
    (example,) = [body for language, body in fenced_blocks(text) if language == "toml"]
    table = tomllib.loads(example)["tool"]["cuda-ext-farm"]
    project = new_project(tmp_path)
    pyproject = project / "pyproject.toml"
    pyproject.write_text(pyproject.read_text().replace("[tool.cuda-ext-farm]\n", example), encoding="utf-8")
    found = matrix_json(installed, project)
    assert found and {".".join(str(t["torch"]).split(".")[:2]) for t in found} == set(table["torch"])
    assert {t["python"] for t in found} == set(table["python"])


# --- the extended part: the quick start, built and tested --------------------------------------------------------

@pytest.fixture
def installed_as_shown(clone: Path, tmp_path: Path) -> Iterator[Path]:
    """The farm installed by the README's first install line, its URL the clone's."""
    (line,) = [c for c in commands(README, "Install") if c.startswith("pipx install")]
    pipx = shutil.which("pipx")
    if pipx is None:
        pytest.skip("pipx is not installed (.ci/run installs it)")
    argv = [pipx, *shlex.split(line.replace(SPEC, f"git+file://{clone}#subdirectory=farm"))[1:]]
    env = {**_pip_env(), "PIPX_HOME": str(tmp_path / "pipx"), "PIPX_BIN_DIR": str(tmp_path / "bin")}
    started = time.monotonic()
    subprocess.run(argv, check=True, env=env, stdout=subprocess.DEVNULL)
    print(f"quick start: {line}: {time.monotonic() - started:.1f} s (from a local clone)")
    yield tmp_path / "bin" / "cuda-ext-farm"


@pytest.mark.extended
def test_the_quick_start_ends_with_a_wheel_and_its_test_passing(installed_as_shown: Path, tmp_path: Path) -> None:
    project = new_project(tmp_path / "fresh")
    # `workflows render` pins the GitHub repository the farm was installed from; installed from the local clone
    # here it has none, so it runs in the default suite, with the farm installed from a clone whose origin is it.
    shown = [c for c in farm_commands() if not c.startswith("cuda-ext-farm workflows")]
    assert shown.index("cuda-ext-farm build") < shown.index("cuda-ext-farm test"), shown
    outputs = {}
    for command in shown:
        started = time.monotonic()
        result = run(command, installed_as_shown, project)
        print(f"quick start: {command}: {time.monotonic() - started:.1f} s, exit {result.returncode}")
        assert result.returncode == 0, f"{command}:\n{result.stdout[-5000:]}"
        outputs[command] = result.stdout
    built = [p for p in (project / "wheelhouse").iterdir() if p.is_dir()]
    assert len(built) == 1 and release_target_pattern().fullmatch(built[0].name), built
    (wheel,) = built[0].glob("my_ext-0.1.0+pt*.whl")
    assert (built[0] / "report.json").is_file()
    tested = outputs["cuda-ext-farm test"]
    assert "my_ext comes from the installed wheel" in tested, tested[-3000:]
    print(f"quick start: wheel {wheel.name}")


@pytest.mark.extended
def test_every_install_line_of_the_readme_installs_the_farm(clone: Path, tmp_path: Path) -> None:
    """pipx, uv and pip, installed or run once, with the README's spec (its URL the clone's): each gives the
    command of the clone's commit."""
    head = _git("rev-parse", "HEAD", cwd=clone)
    project = new_project(tmp_path)
    lines = [c for c in commands(README) if SPEC in c]
    bin_dir, venv = tmp_path / "bin", tmp_path / "venv"
    env = {**_pip_env(), "PIPX_HOME": str(tmp_path / "pipx"), "PIPX_BIN_DIR": str(bin_dir),
           "UV_TOOL_DIR": str(tmp_path / "uv-tools"), "UV_TOOL_BIN_DIR": str(bin_dir),
           "UV_CACHE_DIR": str(tmp_path / "uv-cache"), "COLUMNS": "100"}
    for line in lines:
        argv = shlex.split(line.replace(SPEC, f"git+file://{clone}#subdirectory=farm"))
        tool = shutil.which(argv[0])
        if argv[0] == "pip":  # "in a virtual environment of your choice"
            subprocess.run([sys.executable, "-m", "venv", "--clear", str(venv)], check=True)
            tool = str(venv / "bin" / "pip")
        if tool is None:
            pytest.skip(f"{argv[0]} is not installed (.ci/run installs pipx and uv)")
        started = time.monotonic()
        result = subprocess.run([tool, *argv[1:]], cwd=project, env=env, text=True, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, timeout=900)
        print(f"install line: {line}: {time.monotonic() - started:.1f} s, exit {result.returncode}")
        assert result.returncode == 0, f"{line}:\n{result.stdout[-3000:]}"
        if argv[-1] == "matrix":  # run once: it ran the command
            assert release_target_pattern().search(result.stdout), result.stdout[-3000:]
            continue
        command = venv / "bin" / "cuda-ext-farm" if argv[0] == "pip" else bin_dir / "cuda-ext-farm"
        version = subprocess.run([str(command), "--version"], capture_output=True, text=True, check=True)
        assert f"(commit {head}" in version.stdout, (line, version.stdout)
        command.unlink()  # the next line installs its own
