"""The chained build jobs of wheels.yml (ci/gha/chained_jobs.py), their resume logic run here: the steps' own
shell scripts, as the runner runs them (bash -eo pipefail, GITHUB_ENV and GITHUB_OUTPUT files), link after link,
against a fake farm command that stops at the deadline (75) and then finishes, with stand-ins for docker's volume
folder and sudo; each link on a fresh runner (its own home and cache folder); the artifacts one link uploads are
what the next downloads; the jobs' and steps' ``if:`` conditions are evaluated as GitHub would for these values."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from ci.builds.progress import deadline
from ci.gha import chained_jobs, steps

ROOT = Path(__file__).resolve().parents[3]
#: The fake farm: the first ``stops`` runs compile one object into the compile cache (the ccache volume's folder),
#: add a line to the project's compile records (where the farm keeps them: records.cache_file, asked of the farm)
#: and stop at the deadline; a later run needs every object compiled before and the records as the run before left
#: them, byte for byte (both restored by its link), and writes the wheel. Every run records its arguments.
FAKE_FARM = """#!/bin/bash
echo "$@" >> "$FAKE_STATE/calls"
runs=$(wc -l < "$FAKE_STATE/calls")
volume="$FAKE_STATE/volume-$FAKE_JOB"
mkdir -p "$volume"  # the build's container makes the named volume
have=$(ls "$volume" 2>/dev/null | wc -l)
if [ "$have" -ne $((runs - 1)) ]; then echo "the compile cache lost objects: $have of $((runs - 1))"; exit 1; fi
records=$(PYTHONPATH="$FAKE_ROOT" "$FAKE_PYTHON" -c \\
  'from ci.builds.progress import records; print(records.cache_file("fake-project"))')
if [ "$runs" -gt 1 ] && ! cmp "$records" "$FAKE_STATE/records-$((runs - 1))"; then
  echo "the compile records were lost: $records"; exit 1
fi
mkdir -p "${records%/*}"
printf '{"k%s.cu": {"peak": %s, "seconds": 1.5}}\\n' "$runs" "$((runs * 1000000))" >> "$records"
cp "$records" "$FAKE_STATE/records-$runs"
if [ "$runs" -le "$FAKE_STOPS" ]; then
  echo "object $runs" > "$volume/k$runs.o"
  echo "stopped at the deadline: $runs of 9 compiles done and cached; the same command resumes"
  exit 75
fi
mkdir -p "wheelhouse/$FAKE_TARGET" && echo wheel > "wheelhouse/$FAKE_TARGET/x.whl"
"""
FAKE_DOCKER = """#!/bin/bash
volume="$FAKE_STATE/volume-$FAKE_JOB"
case "$1 $2" in
  "volume create") mkdir -p "$volume" ;;
  "volume inspect") [ -d "$volume" ] || exit 1; echo "$volume" ;;
  *) exit 2 ;;
esac
"""


def condition(text: str, target_id: str, needs: dict[str, str], outputs: dict[str, str]) -> bool:
    """A job's or step's ``if:`` for these needs' and steps' outputs (the target is selected, nothing cancelled)."""
    text = text.removeprefix("${{").removesuffix("}}").strip()
    selected = f"!inputs.targets || contains(fromJSON(inputs.targets), '{target_id}')"
    text = "True" if text == selected else text.replace(f"({selected})", "True")
    text = text.replace("!cancelled()", "True").replace("&&", " and ").replace("||", " or ")
    text = re.sub(r"needs\.([\w-]+)\.outputs\.status", lambda m: repr(needs.get(m.group(1), "")), text)
    text = text.replace("steps.build.outputs.status", repr(outputs.get("status", "")))
    assert re.fullmatch(r"[\w' =()]+", text), text
    return bool(eval(text))  # a comparison of literals (checked above)


def runner_env(folder: Path, cache_variable: str | None) -> dict[str, str]:
    """A fresh runner's home, and its cache folder where ``cache_variable`` (FARM_CACHE_DIR, XDG_CACHE_HOME) names
    one (else the farm's default under the home)."""
    (folder / "home").mkdir(parents=True)
    return {"HOME": str(folder / "home"), **({cache_variable: str(folder / "cache")} if cache_variable else {})}


def run_job(job: dict[str, Any], key: str, folder: Path, artifacts: dict[str, list[Path]],
            env: dict[str, str], cache_variable: str | None = None) -> tuple[int, dict[str, str]]:
    """The chain's own steps of ``job`` (the deadline, the hand-off and the build), as a runner would, in a fresh
    workspace, runner temp and home; the other steps (checkout, images) have nothing to say to the resume logic."""
    work, temp = folder / key / "work", folder / key / "temp"
    work.mkdir(parents=True)
    temp.mkdir()
    job_env = {**env, **runner_env(folder / key, cache_variable), "RUNNER_TEMP": str(temp), "FAKE_JOB": key,
               **job.get("env", {})}
    outputs: dict[str, str] = {}
    ours = (chained_jobs.DEADLINE_SCRIPT, chained_jobs.SAVE_SCRIPT, chained_jobs.RESTORE_SCRIPT)
    for step in job["steps"]:
        uses, name = str(step.get("uses", "")), step.get("with", {}).get("name", "")
        handed = "artifact" in uses and name.startswith(("compile-cache-", "wheel-"))
        if not (handed or step.get("run") in ours or step.get("id") == "build"):
            continue  # the pull/build of the image, checkout: not run here
        if "if" in step and not condition(step["if"], env["FAKE_TARGET"], {}, outputs):
            continue
        if "upload-artifact" in uses and name.startswith(("compile-cache-", "wheel-")):
            # one path a line; a missing one is left out (upload-artifact fails only when none exists)
            sources = [Path(line.replace("${{ runner.temp }}", str(temp))) for line in step["with"]["path"].split("\n")]
            sources = [s if s.is_absolute() else work / s for s in sources]
            assert sources[0].exists(), (key, name)
            artifacts[name] = [s for s in sources if s.exists()]
        elif "download-artifact" in uses and name.startswith("compile-cache-"):
            assert step["with"]["path"] == "${{ runner.temp }}"
            for source in artifacts[name]:  # the files' common folder is the runner's temp: they sit at the top
                assert source.parent == artifacts[name][0].parent
                shutil.copy(source, temp / source.name)
        elif step.get("run") in ours or step.get("id") == "build":
            files = {"GITHUB_ENV": temp / "env", "GITHUB_OUTPUT": temp / "output"}
            for path in files.values():
                path.write_text("")
            done = subprocess.run(["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", step["run"]], cwd=work,
                                  env={**job_env, **step.get("env", {}), **{k: str(v) for k, v in files.items()}},
                                  text=True, capture_output=True)
            if done.returncode != 0:
                print(key, step.get("name"), done.stdout, done.stderr)
                return done.returncode, outputs
            job_env |= dict(line.split("=", 1) for line in files["GITHUB_ENV"].read_text().splitlines())
            if step.get("id") == "build":
                outputs |= dict(line.split("=", 1) for line in files["GITHUB_OUTPUT"].read_text().splitlines())
    return 0, outputs


def fakes_on_path(tmp_path: Path) -> dict[str, str]:
    """The fake farm, docker and sudo first on PATH, and their state folder."""
    fakes = tmp_path / "bin"
    fakes.mkdir()
    for name, text in (("python", FAKE_FARM), ("docker", FAKE_DOCKER), ("sudo", '#!/bin/bash\nexec "$@"\n')):
        (fakes / name).write_text(text)
        (fakes / name).chmod(0o755)
    state = tmp_path / "state"
    state.mkdir()
    return {"PATH": f"{fakes}:{os.environ['PATH']}", "FAKE_STATE": str(state), "FAKE_PYTHON": sys.executable,
            "FAKE_ROOT": str(ROOT)}


def run_chain(documents: dict[str, dict[str, Any]], tmp_path: Path, stops: int,
              cache_variable: str | None = None) -> dict[str, Any]:
    """Every link of the first Linux target's build and its import test's condition."""
    wheels = documents["wheels.yml"]["jobs"]
    target_id = next(k for k in wheels if k.startswith("build-") and k.endswith("linux_x86_64"))[len("build-"):]
    env = {**fakes_on_path(tmp_path), "FAKE_STOPS": str(stops), "FAKE_TARGET": target_id}
    state = Path(env["FAKE_STATE"])
    needs: dict[str, str] = {}
    codes: dict[str, int | None] = {}
    artifacts: dict[str, list[Path]] = {}
    for link in range(1, chained_jobs.LINKS + 1):
        key = chained_jobs.link_key(target_id, link)
        if not condition(wheels[key]["if"], target_id, needs, {}):
            codes[key] = None  # skipped
            continue
        codes[key], outputs = run_job(wheels[key], key, tmp_path / "jobs", artifacts, env, cache_variable)
        needs[key] = outputs.get("status", "") if codes[key] == 0 else ""
    imports = wheels[steps.job_key("import", target_id)]
    calls = (state / "calls").read_text().splitlines()
    return {"codes": list(codes.values()), "artifacts": sorted(artifacts), "calls": calls, "target": target_id,
            "import": condition(imports["if"], target_id, needs, {}), "needs": imports["needs"],
            "handed": {name: sorted(p.name for p in paths) for name, paths in artifacts.items()}}


@pytest.mark.parametrize("cache_variable", [None, "FARM_CACHE_DIR", "XDG_CACHE_HOME"])
def test_a_build_stopped_at_its_deadline_resumes_in_the_next_link_with_the_compile_cache_and_records(
        documents: dict[str, dict[str, Any]], tmp_path: Path, cache_variable: str | None) -> None:
    """Link 2 runs on a fresh runner: the compile records link 1's farm left in its cache folder (the default one,
    or where FARM_CACHE_DIR or XDG_CACHE_HOME put it) are where link 2's farm reads them, byte for byte."""
    started = time.time()
    chain = run_chain(documents, tmp_path, stops=1, cache_variable=cache_variable)
    target = chain["target"]
    # link 1 stopped (its step passed, its status 75), link 2 restored the cache and the records and finished (the
    # fake farm checks both), link 3 was skipped
    assert chain["codes"] == [0, 0, None]
    assert chain["artifacts"] == [f"compile-cache-{target}-link1", f"wheel-{target}"]
    assert chain["handed"][f"compile-cache-{target}-link1"] == [chained_jobs.HANDOFF, chained_jobs.RECORDS_HANDOFF]
    assert chain["import"] and chain["needs"] == [chained_jobs.link_key(target, n) for n in (1, 2, 3)]
    # the same command each time, with the deadline at the job's end less the time to save (each link's own: the
    # links may start in different seconds)
    assert len(chain["calls"]) == 2 and len({call.rsplit(" ", 1)[0] for call in chain["calls"]}) == 1
    words = chain["calls"][0].split()
    assert words[:6] == ["-m", "ci", "build-cuda", "--target", target, "--wheelhouse"] and words[7] == "--deadline"
    left = deadline.parse(words[8]) - started
    minutes = chained_jobs.TIMEOUT_MINUTES - chained_jobs.SAVE_MINUTES
    assert minutes * 60 - 120 <= left <= minutes * 60 + 60
    assert chained_jobs.TIMEOUT_MINUTES == documents["wheels.yml"]["jobs"][f"build-{target}"]["timeout-minutes"]


@pytest.mark.parametrize(("stops", "codes", "built"), [(0, [0, None, None], True), (2, [0, 0, 0], True),
                                                        (3, [0, 0, 75], False)])
def test_the_chain_is_bounded(documents: dict[str, dict[str, Any]], tmp_path: Path, stops: int,
                              codes: list[int | None], built: bool) -> None:
    """Done in one link: no hand-off; three links: each resumes with all compiled before; still stopped in the
    last link: it fails (75), and no import test runs."""
    chain = run_chain(documents, tmp_path, stops=stops)
    assert chain["codes"] == codes
    assert (f"wheel-{chain['target']}" in chain["artifacts"]) is built and chain["import"] is built
    assert sum(a.startswith("compile-cache-") for a in chain["artifacts"]) == min(stops, chained_jobs.LINKS - 1)


def run_script(script: str, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """A step's script as the runner runs it."""
    return subprocess.run(["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", script], cwd=cwd, env=env,
                          text=True, capture_output=True)


def farm_records(env: dict[str, str]) -> Path:
    """The compile-records folder the farm reads with this runner's environment (records.cache_file's)."""
    asked = subprocess.run([sys.executable, "-c", "from ci.builds.progress import records; "
                            "print(records.cache_file('fake-project'))"], env={**env, "PYTHONPATH": str(ROOT)},
                           text=True, capture_output=True, check=True)
    return Path(asked.stdout.strip()).parent


def handed_on(tmp_path: Path, cache_variable: str | None, records: dict[str, bytes] | None) -> tuple[Path, Path]:
    """Link 1's save (with these files in its farm's compile-records folder; None: no such folder), its files
    carried to a fresh runner's temp folder as the artifact would, and link 2's restore there; the folder link 2's
    farm reads its records from, and link 2's temp folder."""
    fakes = fakes_on_path(tmp_path)
    runners = []
    for job in ("link1", "link2"):
        (tmp_path / job / "temp").mkdir(parents=True)
        runners.append({**os.environ, **fakes, **runner_env(tmp_path / job, cache_variable),
                        "RUNNER_TEMP": str(tmp_path / job / "temp"), "FAKE_JOB": job})
    volume = Path(fakes["FAKE_STATE"]) / "volume-link1"
    volume.mkdir()
    (volume / "k1.o").write_text("object 1")
    first = farm_records(runners[0])
    assert first.is_relative_to(tmp_path / "link1")
    if records is not None:
        first.mkdir(parents=True)
        for name, data in records.items():
            (first / name).write_bytes(data)
    saved = run_script(chained_jobs.SAVE_SCRIPT, runners[0], tmp_path / "link1")
    assert saved.returncode == 0, saved.stderr
    for name in (chained_jobs.HANDOFF, chained_jobs.RECORDS_HANDOFF):
        if (tmp_path / "link1" / "temp" / name).exists():
            shutil.copy(tmp_path / "link1" / "temp" / name, tmp_path / "link2" / "temp" / name)
    restored = run_script(chained_jobs.RESTORE_SCRIPT, runners[1], tmp_path / "link2")
    assert restored.returncode == 0, restored.stderr
    assert (Path(fakes["FAKE_STATE"]) / "volume-link2" / "k1.o").read_text() == "object 1"
    return farm_records(runners[1]), tmp_path / "link2" / "temp"


@pytest.mark.parametrize("cache_variable", [None, "FARM_CACHE_DIR", "XDG_CACHE_HOME"])
def test_the_hand_off_carries_the_compile_records_byte_for_byte(tmp_path: Path, cache_variable: str | None) -> None:
    """Saved by link 1, restored by link 2 on a fresh runner: where link 2's farm reads them (its cache folder: the
    default one, or FARM_CACHE_DIR's, or XDG_CACHE_HOME's), with the same bytes; the hand-off's files are gone from
    the runner's temp folder after."""
    first = json.dumps({"sources": {"a.cu": {"kind": "device", "peak": 3_221_225_472, "seconds": 412.5}}}).encode()
    records = {"fake-project.json": first, "other-project.json": b'{"sources": {}}\n\xff'}
    folder, temp = handed_on(tmp_path, cache_variable, records)
    assert folder.is_relative_to(tmp_path / "link2")
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == records
    assert not any(temp.iterdir())


def test_a_hand_off_without_compile_records_restores_none(tmp_path: Path) -> None:
    """A build that recorded no compile: no records folder, no records file handed on; both steps pass, and the
    next link's cache folder gets no records folder (its farm sees no records, as before)."""
    folder, temp = handed_on(tmp_path, None, None)
    assert not (tmp_path / "link1" / "temp" / chained_jobs.RECORDS_HANDOFF).exists()
    assert not folder.exists() and not any(temp.iterdir())
