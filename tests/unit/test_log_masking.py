"""Secrets are never said (ci/log.py): a URL's password, a token, a secret variable's value, masked in every form the
farm prints them: a replayable command line with its variables, the logger's lines, tables, JSON, GitHub's
annotations and step summary, a child's echoed and kept output, ``--show-settings``, a build report. Real child
processes where the farm runs one."""

from __future__ import annotations

import json
import re
import sys
import tempfile
import uuid
from pathlib import Path

import pytest
from rich.table import Table

from ci import log as voice
from ci import proc, settings
from ci.builds import report
from ci.log import Logger

ANSI = re.compile(r"\x1b\[[0-9;]*m")


def secret() -> str:
    """A value no other test prints (the registry is the process's)."""
    return f"S3cr{uuid.uuid4().hex[:12]}"


@pytest.mark.parametrize(("text", "shown"), [
    ("redis://:pw@127.0.0.1:6379", "redis://:***@127.0.0.1:6379"),
    ("redis://user:pw@cache.internal", "redis://user:***@cache.internal"),
    ("https://user:p%40ss@dav.example.org/cache", "https://user:***@dav.example.org/cache"),
    ("git+https://ghp_abcdef@github.com/org/repo", "git+https://***@github.com/org/repo"),
    ("http://cache:8080|bearer-token=abcdef|keep-alive=true", "http://cache:8080|bearer-token=***|keep-alive=true"),
    ("SCCACHE_REDIS_PASSWORD=pw make", "SCCACHE_REDIS_PASSWORD=*** make"),
    ("  FARM_SCCACHE_TOKEN=\"a b\" x", "  FARM_SCCACHE_TOKEN=\"***\" x"),
    ("environment: ACTIONS_RUNTIME_TOKEN='ey.J'", "environment: ACTIONS_RUNTIME_TOKEN='***'"),
])
def test_every_form_of_a_secret_is_masked_by_its_shape(text: str, shown: str) -> None:
    assert voice.mask(text) == shown
    assert voice.mask(shown) == shown  # masking twice changes nothing


@pytest.mark.parametrize("text", [
    "nvcc -gencode=arch=compute_90,code=sm_90 -DTOKEN_COUNT=3 -c k.cu",
    "https://download.pytorch.org:443/whl/cu130 and build@example.org",
    "redis://127.0.0.1:6379/0", "file:///var/cache/ccache", "PIP_INDEX_URL=https://pypi.org/simple",
    "the scheduler http://127.0.0.1:10600 took 3 compiles",
])
def test_text_without_a_secret_is_left_as_it_is(text: str) -> None:
    assert voice.mask(text) == text


def test_a_registered_secret_is_masked_wherever_it_appears() -> None:
    token, password, short = secret(), secret(), "ab1"
    voice.register_environ({"SCCACHE_WEBDAV_TOKEN": token, "SCCACHE_REDIS_PASSWORD": short, "HOME": "/root",
                            "PIP_EXTRA_INDEX_URL": f"https://me:{password}@idx.local/simple"})
    # A tool's message quoting the value alone, outside any URL or assignment.
    said = voice.mask(f"authentication with {token} failed; tried {password}")
    assert said == "authentication with *** failed; tried ***"
    assert voice.mask("/root and ab1 stay") == "/root and ab1 stay"  # too short to register, and no secret's name
    # A name that only contains a secret's word, a value that is a word: neither is registered.
    voice.register_environ({"TOKENIZERS_PARALLELISM": "parallel", "GH_TOKEN_ENABLED": "false"})
    assert voice.mask("parallel checks: false") == "parallel checks: false"
    assert voice.mask_data({"k": [f"x{token}", 3, {"n": (password,)}]}) == {"k": ["x***", 3, {"n": ["***"]}]}


@pytest.fixture
def fresh(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> tuple[Logger, str, Path]:
    """A logger started in an environment that holds a token (the farm's own setting), on GitHub Actions."""
    token = secret()
    monkeypatch.setenv("FARM_SCCACHE_TOKEN", token)
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    summary = tmp_path / "summary.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    return Logger(), token, summary


def test_the_logger_says_no_secret_on_any_of_its_outputs(fresh: tuple[Logger, str, Path],
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    log, token, summary = fresh
    url = f"redis://farm:{secret()}@cache.local:6379"
    log.command(f"sccache --start-server  # with {url}")
    log.info(f"token {token}")
    log.warn(f"the shared compile cache {url} cannot be used")
    log.details(f"Traceback: connect({url!r}) auth {token}")
    table = Table()
    table.add_column("setting")
    table.add_row(url)
    log.result(table)
    log.json({"remote": url, "token": token})
    log.target_start("t1")
    log.target_end(False, f"failed at {url}")
    out, err = capsys.readouterr()
    said = out + err + summary.read_text()
    assert token not in said and url not in said and url.split(":")[2].split("@")[0] not in said
    assert "::warning::the shared compile cache redis://farm:***@cache.local:6379 cannot be used" in out
    assert json.loads(out[out.index("{"):out.index("}") + 1]) == {"remote": "redis://farm:***@cache.local:6379",
                                                                  "token": "***"}
    assert "token ***" in ANSI.sub("", err)


def test_a_replayable_line_masks_its_secret_variables_and_urls(capsys: pytest.CaptureFixture[str]) -> None:
    password, token = secret(), "tok"  # a token too short to register is still masked by its variable's name
    proc.log_command(["sccache", "--start-server"], env={"SCCACHE_REDIS_ENDPOINT": f"redis://:{password}@h:1",
                                                         "SCCACHE_WEBDAV_TOKEN": token, "SCCACHE_DIR": "/c"})
    line = ANSI.sub("", capsys.readouterr().err).strip()
    assert line == "$ SCCACHE_DIR=/c SCCACHE_REDIS_ENDPOINT=redis://:***@h:1 SCCACHE_WEBDAV_TOKEN=*** " \
                   "sccache --start-server"
    assert voice.mask(f"the password {password} again") == "the password *** again"  # registered by the line


def test_a_childs_output_is_masked_where_it_is_echoed_and_kept(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    """cibuildwheel echoes CIBW_ENVIRONMENT, a build tool may print the URL it was given: the farm's echo and its
    kept copy (build-output.log) carry neither; the child's own file is private and removed."""
    password = secret()
    url = f"redis://:{password}@127.0.0.1:1"
    code = ("import os, sys; print('environment:'); print('    CCACHE_REMOTE_STORAGE=\"' + os.environ['R'] + '\"'); "
            "print('cannot reach', os.environ['R'], file=sys.stderr); print('last', os.environ['R'], end='')")
    before = set(Path(tempfile.gettempdir()).glob("farm-output-*"))
    proc.run([sys.executable, "-c", code], env={"R": url}, tee=tmp_path / "build-output.log")
    kept = (tmp_path / "build-output.log").read_text()
    out, err = capsys.readouterr()
    assert password not in out + err + kept
    assert kept == ("environment:\n    CCACHE_REMOTE_STORAGE=\"redis://:***@127.0.0.1:1\"\n"
                    "cannot reach redis://:***@127.0.0.1:1\nlast redis://:***@127.0.0.1:1")
    assert out.splitlines() == kept.splitlines()
    assert set(Path(tempfile.gettempdir()).glob("farm-output-*")) == before
    lines: list[str] = []
    proc.stream([sys.executable, "-c", code], lines.append, env={"R": url})
    assert password not in capsys.readouterr().out and any(password in line for line in lines)  # callers parse it


def test_show_settings_masks_a_token_and_a_urls_password() -> None:
    token, password = "t0", secret()
    resolved = settings.resolve({"FARM_SCCACHE_TOKEN": token, "FARM_CCACHE_REMOTE": f"redis://u:{password}@h:1",
                                 "FARM_SCCACHE_SCHEDULER": "https://tok3n@sched.local:10600"})
    lines = "\n".join(resolved.lines())
    assert password not in lines and "tok3n" not in lines
    assert f"{'FARM_SCCACHE_TOKEN':22} = *** (env)" in lines
    assert "FARM_CCACHE_REMOTE     = redis://u:***@h:1 (env)" in lines
    assert "FARM_SCCACHE_SCHEDULER = https://***@sched.local:10600 (env)" in lines


def test_a_build_report_writes_no_secret(tmp_path: Path) -> None:
    url = f"https://user:{secret()}@registry.local/builder:13.0"
    made = report.BuildReport(target="t", project="p", mode="container", wheel="p.whl", sha256="0" * 64, size_bytes=1,
                              tags=("cp311",), sass=(), ptx=(), nvcc=None, torch="2.13.0", python="3.11",
                              build_seconds=1.0, checks=({"name": "x", "ok": True, "detail": f"pulled {url}"},),
                              image=url)
    written = report.write_report(made, tmp_path).read_text()
    assert url not in written and json.loads(written)["image"] == "https://user:***@registry.local/builder:13.0"


def test_a_traceback_under_farm_debug_is_masked(monkeypatch: pytest.MonkeyPatch,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    """FARM_DEBUG prints the traceback of an internal error: it goes through the logger, which masks it."""
    from ci import __main__ as entry
    from ci import cli

    password = secret()

    def broken(opts: object) -> int:
        raise RuntimeError(f"could not reach redis://user:{password}@127.0.0.1:1")

    import dataclasses

    monkeypatch.setitem(cli.COMMANDS, "matrix", dataclasses.replace(cli.COMMANDS["matrix"], run=broken))
    monkeypatch.setenv("FARM_DEBUG", "1")
    monkeypatch.delenv("FARM_STATUS_FILE", raising=False)
    assert entry.main(["matrix", "--project", str(Path(__file__).resolve().parents[2])]) == 70
    said = capsys.readouterr()
    assert "Traceback" in said.err + said.out and "RuntimeError" in said.err + said.out
    assert password not in said.err + said.out
