"""The chained build jobs of wheels.yml (ci/gha/chained_jobs.py), their resume logic run here: the steps' own
shell scripts, as the runner runs them (bash -eo pipefail, GITHUB_ENV and GITHUB_OUTPUT files), link after link,
against a fake farm command that stops at the deadline (75) and then finishes, with stand-ins for docker's volume
folder and sudo; the artifacts one link uploads are what the next downloads; the jobs' and steps' ``if:``
conditions are evaluated as GitHub would for these values."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from ci.builds.progress import deadline
from ci.gha import chained_jobs, steps

#: The fake farm: the first ``stops`` runs compile one object into the compile cache (the ccache volume's folder)
#: and stop at the deadline; a later run needs every object compiled before (restored by its link) and writes the
#: wheel. Every run records its arguments.
FAKE_FARM = """#!/bin/bash
echo "$@" >> "$FAKE_STATE/calls"
runs=$(wc -l < "$FAKE_STATE/calls")
volume="$FAKE_STATE/volume-$FAKE_JOB"
mkdir -p "$volume"  # the build's container makes the named volume
have=$(ls "$volume" 2>/dev/null | wc -l)
if [ "$have" -ne $((runs - 1)) ]; then echo "the compile cache lost objects: $have of $((runs - 1))"; exit 1; fi
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


def run_job(job: dict[str, Any], key: str, folder: Path, artifacts: dict[str, Path],
            env: dict[str, str]) -> tuple[int, dict[str, str]]:
    """The chain's own steps of ``job`` (the deadline, the hand-off and the build), as a runner would, in a fresh
    workspace and runner temp; the other steps (checkout, images) have nothing to say to the resume logic."""
    work, temp = folder / key / "work", folder / key / "temp"
    work.mkdir(parents=True)
    temp.mkdir()
    job_env = {**env, "RUNNER_TEMP": str(temp), "FAKE_JOB": key, **job.get("env", {})}
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
            source = Path(step["with"]["path"].replace("${{ runner.temp }}", str(temp)))
            source = source if source.is_absolute() else work / source
            assert source.exists(), (key, name)
            artifacts[name] = source
        elif "download-artifact" in uses and name.startswith("compile-cache-"):
            assert step["with"]["path"] == "${{ runner.temp }}"
            shutil.copy(artifacts[name], temp / artifacts[name].name)
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


def run_chain(documents: dict[str, dict[str, Any]], tmp_path: Path, stops: int) -> dict[str, Any]:
    """Every link of the first Linux target's build and its import test's condition."""
    wheels = documents["wheels.yml"]["jobs"]
    target_id = next(k for k in wheels if k.startswith("build-") and k.endswith("linux_x86_64"))[len("build-"):]
    fakes = tmp_path / "bin"
    fakes.mkdir()
    for name, text in (("python", FAKE_FARM), ("docker", FAKE_DOCKER), ("sudo", '#!/bin/bash\nexec "$@"\n')):
        (fakes / name).write_text(text)
        (fakes / name).chmod(0o755)
    state = tmp_path / "state"
    state.mkdir()
    env = {"PATH": f"{fakes}:{os.environ['PATH']}", "FAKE_STATE": str(state), "FAKE_STOPS": str(stops),
           "FAKE_TARGET": target_id, "HOME": str(tmp_path)}
    needs: dict[str, str] = {}
    codes: dict[str, int | None] = {}
    artifacts: dict[str, Path] = {}
    for link in range(1, chained_jobs.LINKS + 1):
        key = chained_jobs.link_key(target_id, link)
        if not condition(wheels[key]["if"], target_id, needs, {}):
            codes[key] = None  # skipped
            continue
        codes[key], outputs = run_job(wheels[key], key, tmp_path / "jobs", artifacts, env)
        needs[key] = outputs.get("status", "") if codes[key] == 0 else ""
    imports = wheels[steps.job_key("import", target_id)]
    calls = (state / "calls").read_text().splitlines()
    return {"codes": list(codes.values()), "artifacts": sorted(artifacts), "calls": calls, "target": target_id,
            "import": condition(imports["if"], target_id, needs, {}), "needs": imports["needs"]}


def test_a_build_stopped_at_its_deadline_resumes_in_the_next_link_with_the_compile_cache(
        documents: dict[str, dict[str, Any]], tmp_path: Path) -> None:
    started = time.time()
    chain = run_chain(documents, tmp_path, stops=1)
    target = chain["target"]
    # link 1 stopped (its step passed, its status 75), link 2 restored the cache and finished, link 3 was skipped
    assert chain["codes"] == [0, 0, None]
    assert chain["artifacts"] == [f"compile-cache-{target}-link1", f"wheel-{target}"]
    assert chain["import"] and chain["needs"] == [chained_jobs.link_key(target, n) for n in (1, 2, 3)]
    # the same command each time, with the deadline at the job's end less the time to save
    assert len(set(chain["calls"])) == 1 and len(chain["calls"]) == 2
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
