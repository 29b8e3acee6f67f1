"""ci/log.py: one voice. Progress on stderr, results on stdout, fold groups and a step summary on GitHub Actions,
text printed as written; and no module but ci/log.py makes a console of its own."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from ci import proc
from ci.log import Logger

ROOT = Path(__file__).resolve().parents[2]
ANSI = re.compile(r"\x1b\[[0-9;]*m")

#: Modules that still make a console of their own: owned by the command-line rewrite (issue 31, item 2), which
#: moves them to ci/log.py. Empty this once it has landed; the test fails when one of them no longer needs it.
PENDING: set[str] = set()


def plain(text: str) -> str:
    return ANSI.sub("", text)


@pytest.fixture
def log(monkeypatch: pytest.MonkeyPatch) -> Logger:
    monkeypatch.delenv("GITHUB_ACTIONS", raising=False)
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    return Logger()


def test_progress_goes_to_stderr_and_results_to_stdout(log: Logger, capsys: pytest.CaptureFixture[str]) -> None:
    log.command("python -m build --wheel .")
    log.info("sources in /tmp/src (3 files updated)")
    log.reuse("the environment /tmp/env")
    log.warn("uncommitted changes are not in the clones")
    log.step("the wheel build")
    log.step_end(True)
    log.result("the result")
    log.json({"targets": 2})
    out, err = (plain(s) for s in capsys.readouterr())
    assert out == 'the result\n{\n  "targets": 2\n}\n'
    assert "$ python -m build --wheel ." in err
    assert "sources in /tmp/src (3 files updated)" in err
    assert "reusing the environment /tmp/env" in err
    assert "warning: uncommitted changes are not in the clones" in err
    assert "> the wheel build" in err and "done the wheel build in " in err
    assert "::" not in out + err  # no workflow commands off GitHub Actions


def test_commands_go_through_the_logger_as_replayable_lines(capsys: pytest.CaptureFixture[str]) -> None:
    proc.log_command(["python", "-c", "d[k] [tool.cuda-ext-farm.commands]"], env={"FARM_X": "a b"})
    out, err = (plain(s) for s in capsys.readouterr())
    assert out == ""
    assert err.strip() == "$ FARM_X='a b' python -c 'd[k] [tool.cuda-ext-farm.commands]'"


def test_bracketed_text_survives(log: Logger, capsys: pytest.CaptureFixture[str]) -> None:
    log.note("test: not configured", "([tool.cuda-ext-farm.commands] test)")
    log.info("[tool.cuda-ext-farm] has no [red]markup[/]")
    log.warn("key [tool.cuda-ext-farm.commands] test")
    log.error("error: no command (test): add test = ... to [tool.cuda-ext-farm.commands]")
    log.details("[bold]compiler said[/] x :smile:")
    log.target_start("cu130-[x]", "build")
    log.target_end(True, "[ok]")
    log.result("[tool.cuda-ext-farm] :smile:")
    out, err = (plain(s) for s in capsys.readouterr())
    assert "test: not configured ([tool.cuda-ext-farm.commands] test)" in err
    assert "[tool.cuda-ext-farm] has no [red]markup[/]" in err
    assert "warning: key [tool.cuda-ext-farm.commands] test" in err
    assert "error: no command (test): add test = ... to [tool.cuda-ext-farm.commands]" in err
    assert "[bold]compiler said[/] x :smile:" in err
    assert "cu130-[x]" in err and ": [ok]" in err
    assert out == "[tool.cuda-ext-farm] :smile:\n"


def test_on_github_a_target_is_a_fold_group_and_a_summary_row(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    summary = tmp_path / "summary.md"
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    log = Logger()
    with log.target("cu130-py312-x86_64", "build"):
        log.step("the wheel build")
        log.step_end(True)
    with pytest.raises(RuntimeError), log.target("cu132-py312-x86_64", "build"):
        raise RuntimeError("the compiler | failed")
    log.warn("a [bracketed] warning")
    out, err = (plain(s) for s in capsys.readouterr())
    assert out.splitlines() == ["::group::build cu130-py312-x86_64", "::endgroup::",
                                "::group::build cu132-py312-x86_64", "::endgroup::",
                                "::warning::a [bracketed] warning"]
    assert "ok cu130-py312-x86_64" in err and "FAILED cu132-py312-x86_64" in err
    rows = summary.read_text().splitlines()
    assert rows[:2] == ["| target | result | time | detail |", "| --- | --- | --- | --- |"]
    assert rows[2].startswith("| cu130-py312-x86_64 | ok | ")
    assert rows[3].startswith("| cu132-py312-x86_64 | FAILED | ") and rows[3].endswith("the compiler \\| failed |")
    assert len(rows) == 4


def test_a_target_inside_a_target_opens_no_second_group(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    log = Logger()
    with log.target("release", "sdist"), log.target("cu130-py312-x86_64", "build"):
        pass
    out = plain(capsys.readouterr().out)
    assert out.splitlines() == ["::group::sdist release", "::endgroup::"]


def _makes_console(tree: ast.AST) -> bool:
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
            if name == "Console":
                return True
    return False


def test_no_module_but_the_logger_makes_a_console() -> None:
    makers = set()
    for path in sorted([*(ROOT / "ci").rglob("*.py"), *(ROOT / "windows").rglob("*.py")]):
        relative = path.relative_to(ROOT).as_posix()
        if relative != "ci/log.py" and _makes_console(ast.parse(path.read_text(), relative)):
            makers.add(relative)
    assert makers <= PENDING, f"only ci/log.py makes a console: {sorted(makers - PENDING)}"
    assert makers == PENDING, f"no longer making a console, drop them from PENDING: {sorted(PENDING - makers)}"


def test_a_table_keeps_its_styles_and_its_escaped_brackets(log: Logger, capsys: pytest.CaptureFixture[str]) -> None:
    from rich.markup import escape
    from rich.table import Table

    table = Table(title="test-gpu")
    table.add_column("status")
    table.add_column("detail")
    table.add_row("[green]passed[/]", escape("not configured: [tool.cuda-ext-farm.commands] bench"))
    log.result(table)
    out = plain(capsys.readouterr().out)
    assert "passed" in out and "[green]" not in out
    assert "not configured: [tool.cuda-ext-farm.commands] bench" in out


def test_an_interruption_names_what_it_interrupted(log: Logger) -> None:
    """SIGTERM during `test` used to say "stopping the build": the line names the command, target and step."""
    assert log.activity() == "the farm"
    log.command_name = "test"
    assert log.activity() == "the test command"
    with log.stage("installing the wheel"):
        assert log.activity() == "installing the wheel"
    with log.target("tiny-torch2.13-cpu", "test-gpu lane"), log.stage("the smoke command"):
        assert log.activity() == "the test-gpu lane of tiny-torch2.13-cpu (the smoke command)"
    assert log.activity() == "the test command"
