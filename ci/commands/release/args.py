"""``release``'s command line: its verbs, the ``Args`` they share, and the parser hook (standard library only:
``ci/cli.py`` imports it before any environment exists)."""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

from ci.commands.command import output_args, selection_args
from ci.errors import UsageError
from ci.universe.matrix import PYTORCH_INDEX

#: verb -> (the argument it takes, its help)
VERBS: dict[str, tuple[str | None, str]] = {
    "dry-run": (None, "build, audit and import-test every Linux target here; write the release folder (indexes, "
                "SHA256SUMS, manifest) and check that the indexes install; upload nothing"),
    "assemble": ("ARTIFACTS", "the release workflow's assemble step: the built wheels under ARTIFACTS (<target-id>/ or "
                 "wheel-<target-id>/ folders with report.json) and the sdist -> --out"),
    "import-test": ("WHEEL", "install WHEEL (or the one wheel in a folder) into a new environment with a torch of "
                    "--torch-kind and run the project's smoke command"),
    "sdist": ("DIR", "build the project's sdist into DIR (without the CUDA torch; --torch-index: where a CPU torch "
              "comes from when setup.py imports torch) and check it"),
    "wheel-from-sdist": ("DIR", "build the release target's wheel from the sdist in DIR alone, audited (into --out, "
                         "default sdist-wheel): the proof that the sdist builds"),
    "site": ("DIR", "write the per-variant indexes of every release in --manifests into DIR, linking the GitHub "
             "Release downloads under --base-url"),
    "pypi-wheel": (None, "(pypi-cuda-majors) build the stable wheel once per CUDA major PyPI's torch uses in the "
                   "project's range (--reuse-wheels: take audited ones from the wheelhouse) and merge them into one "
                   "audited wheel in --out (default <build>/pypi-wheel; docs/releasing.md)"),
    "dispatch-plan": (None, "(dispatch.yml) the targets the FARM_DISPATCH_* inputs select; writes targets=<JSON list> "
                      "to GITHUB_OUTPUT"),
    "dispatch-assemble": ("ARTIFACTS", "(dispatch.yml) the selected targets' wheels (FARM_DISPATCH_SELECTED) audited "
                          "again into a release folder (--out)"),
    "dispatch-merge": ("RELEASE", "(dispatch.yml) that release folder merged into the published manifest and "
                       "SHA256SUMS (--published) in --out; a replaced file is refused"),
}
#: The verbs whose argument names something the user has (it must exist), and those naming where the farm writes.
INPUTS = ("assemble", "import_test", "wheel_from_sdist", "dispatch_assemble", "dispatch_merge")
OUTPUTS = ("sdist", "site")


@dataclasses.dataclass(frozen=True)
class Args:
    verb: str | None = None
    out: str | None = None
    tag: str | None = None
    sdist_dir: str | None = None
    manifests: str | None = None
    base_url: str | None = None
    base_image: str | None = None
    reuse_wheels: bool = False
    variant_wheels: bool = False
    no_audit: bool = False
    torch_kind: str = "cuda"
    torch_index: str | None = None
    test_python: str | None = None
    cpu_test_python: str | None = None
    cpu_torch: str | None = None
    published: str | None = None
    # the verb's argument, under the verb's name (finish puts it there)
    assemble: str | None = None
    import_test: str | None = None
    sdist: str | None = None
    wheel_from_sdist: str | None = None
    site: str | None = None
    dispatch_assemble: str | None = None
    dispatch_merge: str | None = None


def configure(parser: argparse.ArgumentParser) -> None:
    selection_args(parser)
    output_args(parser)
    parser.add_argument("verb", nargs="?", choices=tuple(VERBS), metavar="VERB",
                        help="; ".join(f"{v}{' ' + a if a else ''}: {h}" for v, (a, h) in VERBS.items()))
    parser.add_argument("path", nargs="?", metavar="ARG", help="the verb's argument (ARTIFACTS, WHEEL, DIR, RELEASE)")
    parser.add_argument("--out", help="the release folder (default: FARM_RELEASE_DIR, else <build>/release); replaced")
    parser.add_argument("--tag", help="the release tag; must be v<version> of the wheels")
    parser.add_argument("--sdist-dir", help="assemble: the folder holding the sdist")
    parser.add_argument("--manifests", help="site: a folder holding the releases' release-manifest.json files")
    parser.add_argument("--base-url", help="site: the releases' download URL "
                        "(https://github.com/OWNER/REPO/releases/download)")
    parser.add_argument("--base-image", help="dry-run: base image of the container builds (default: "
                        "FARM_BASE_IMAGE or the cell's)")
    parser.add_argument("--reuse-wheels", action="store_true",
                        help="dry-run: do not rebuild a target whose audited wheel and report are in the wheelhouse")
    parser.add_argument("--variant-wheels", action="store_true", help="dry-run, assemble: also write PEP 825 variant "
                        "wheels into <out>/variants/ (experimental; FARM_VARIANT_WHEELS, project key variant-wheels)")
    parser.add_argument("--no-audit", action="store_true",
                        help="assemble: trust the build reports instead of auditing the Linux wheels again")
    parser.add_argument("--torch-kind", choices=("cuda", "cpu"), default="cuda",
                        help="import-test: the CUDA torch of the target's cell, or a CPU-only torch")
    parser.add_argument("--torch-index", help="import-test: the index torch comes from (default: pip's own, "
                        f"e.g. {PYTORCH_INDEX}/cpu)")
    parser.add_argument("--test-python", metavar="VERSION",
                        help="import-test: the CPython of the test environment (default: the target's oldest; "
                             "FARM_PYTHON_3_10 and the like name an interpreter); the farm itself runs on its own")
    parser.add_argument("--cpu-test-python", metavar="VERSION",
                        help="dry-run: the CPython of the CPU-only import tests where the --cpu-torch here has no "
                             "wheel for the target's (the workflow uses the target's; recorded in the check)")
    parser.add_argument("--cpu-torch", help="the CPU torch release of the CPU-only import test, used when it fits "
                        "the wheel (stable-ABI: at or above its floor; classic: its own torch minor) and pip can see "
                        "its +cpu build; otherwise the wheel's own CPU build if the index has it, else PyPI's build "
                        "of its torch imported with no GPU (recorded in the manifest)")
    parser.add_argument("--published", help="dispatch-merge: the release's release-manifest.json and SHA256SUMS")


def finish(ns: argparse.Namespace) -> None:
    """The verb's argument goes to the verb's name (so the entry checks it as an input or output path)."""
    for verb in VERBS:
        setattr(ns, verb.replace("-", "_"), None)
    takes = VERBS[ns.verb][0] if ns.verb else None
    if ns.verb and takes and not ns.path:
        raise UsageError(f"release {ns.verb} needs its {takes}", f"release {ns.verb}",
                         f"run `release {ns.verb} {takes}`")
    if ns.path and not takes:
        raise UsageError(f"release {ns.verb or ''} takes no argument".replace("  ", " "), ns.path,
                         "drop it (the verbs: " + ", ".join(VERBS) + ")")
    if ns.verb and takes:
        setattr(ns, ns.verb.replace("-", "_"), ns.path)



def verb_arg(value: str | None) -> Path:
    """The verb's argument (``finish`` refused a verb without it)."""
    assert value is not None
    return Path(value)


def host_os() -> str:
    return "windows" if sys.platform == "win32" else "linux"
