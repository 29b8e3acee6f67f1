"""The NVIDIA variant provider's own answers on the doctor's recorded machines: what ``ci/doctor/variants.py``'s
re-implementation of its rules is held to (tests/unit/doctor/test_variant_pick.py compares them wherever the tests
run, the provider installed or not).

``record`` runs the real provider (``nvidia_variant_provider``'s ``NvidiaVariantPlugin.get_supported_configs``) once
per machine of tests/fixtures/doctor/, in a fresh interpreter that has it installed, with the machine standing in for
NVML: the provider's ``_cuda_environment`` (its only reading of the system) answers the recorded driver version, the
CUDA version the driver runs and the GPUs' compute capabilities, or None for a machine without an NVIDIA driver, so
every other step (the version ranges, the highest GPU, the lists and their order) is the provider's own code. It
writes the answers, with the provider's version, to tests/fixtures/doctor_provider/nvidia-variant-provider.json.
Re-record after a provider release (its PyPI name holds a placeholder; the provider publishes its wheels on its own
index, docs/doctor.md says how to install it)::

    python -m ci.doctor.provider --python /path/to/venv/bin/python

A tool of the farm's checkout (it runs the provider through ci/proc.py), not of the standalone doctor.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from ci.errors import CommandFailed, FarmError

ROOT = Path(__file__).resolve().parents[2]
MACHINES = ROOT / "tests" / "fixtures" / "doctor"
RECORDING = ROOT / "tests" / "fixtures" / "doctor_provider" / "nvidia-variant-provider.json"
#: The provider's system override variables: never set while it answers for a recorded machine.
FORCED = ("NV_VARIANT_PROVIDER_FORCE_CUDA_DRIVER_VERSION", "NV_VARIANT_PROVIDER_FORCE_SM_ARCH")

#: Run by the interpreter that has the provider: the recorded machine (JSON on stdin) in NVML's place.
PROBE = """
import json, sys, warnings
import nvidia_variant_provider
from nvidia_variant_provider.detect_cuda import CudaEnvironment
from nvidia_variant_provider.plugin import NvidiaVariantPlugin

machine = json.load(sys.stdin)
driver = machine.get("driver") or {}
caps = sorted({tuple(int(p) for p in str(g["capability"]).split(".")[:2])
               for g in machine.get("gpus") or () if g.get("capability")})
if driver.get("version") is None and driver.get("cuda") is None:
    system = None  # no NVIDIA driver: NVML cannot start
else:
    system = CudaEnvironment(system_driver_versions=driver.get("version"), cuda_driver_version=driver.get("cuda"),
                             architectures=list(caps))
NvidiaVariantPlugin._cuda_environment = classmethod(lambda cls: system)
with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # its notes on out-of-range drivers: the empty answer says it
    configs = NvidiaVariantPlugin.get_supported_configs()
print(json.dumps({"version": nvidia_variant_provider.__version__,
                  "configs": [[c.name, list(c.values), bool(c.multi_value)] for c in configs]}))
"""


def answer(python: str, machine: dict[str, Any]) -> dict[str, Any]:
    """The provider's answer for one recorded ``machine`` (its version and ``[name, values, multi_value]`` list)."""
    from ci import proc

    done = proc.run([python, "-c", PROBE], input_text=json.dumps(machine), capture=True, check=False, unset=FORCED,
                    log=False)
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise CommandFailed(f"the NVIDIA variant provider did not answer ({last})", python,
                            "install nvidia-variant-provider into it (docs/doctor.md says from where), or pass "
                            "--python an interpreter that has it")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def derive(python: str, machines: Path = MACHINES) -> dict[str, Any]:
    """The recording: the provider's version and its answer for every machine of ``machines``."""
    answers = {path.stem: answer(python, json.loads(path.read_text(encoding="utf-8")))
               for path in sorted(machines.glob("*.json"))}
    versions = {a["version"] for a in answers.values()}
    if len(versions) != 1:
        raise CommandFailed("the provider changed while recording", ", ".join(sorted(versions)), "record again")
    return {"provider": {"name": "nvidia-variant-provider", "version": versions.pop()},
            "recorded_by": "python -m ci.doctor.provider",
            "machines": {name: a["configs"] for name, a in answers.items()}}


def dumps(recording: dict[str, Any]) -> str:
    """The recording as JSON, one line per machine's feature (a reviewer reads a provider change as a line diff)."""
    def machine(name: str, configs: list[Any]) -> str:
        lines = ",".join(f"\n   {json.dumps(config)}" for config in configs)
        return f"  {json.dumps(name)}: [{lines}{chr(10) + '  ' if configs else ''}]"

    machines = ",\n".join(machine(name, configs) for name, configs in recording["machines"].items())
    head = {k: v for k, v in recording.items() if k != "machines"}
    return json.dumps(head, indent=1)[:-2] + ',\n "machines": {\n' + machines + "\n }\n}\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ci.doctor.provider", description=__doc__.split("\n\n")[0])
    parser.add_argument("--python", default=sys.executable,
                        help="an interpreter with nvidia-variant-provider installed (default: this one)")
    parser.add_argument("--out", type=Path, default=RECORDING, help="where the recording goes")
    args = parser.parse_args(argv)
    try:
        print(f"$ {args.python} -c <the provider's get_supported_configs> < each recorded machine", file=sys.stderr)
        recording = derive(args.python)
    except FarmError as error:
        print(error.line(), file=sys.stderr)
        return error.exit_code
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(dumps(recording), encoding="utf-8")
    print(f"nvidia-variant-provider {recording['provider']['version']}: {len(recording['machines'])} machines "
          f"recorded in {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
