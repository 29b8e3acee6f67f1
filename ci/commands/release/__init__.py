"""The release: every Linux target built, audited and import-tested, per-variant PEP 503 indexes, SHA256SUMS
and a manifest in one folder (``nox -s release -- dry-run`` does what the release workflow does for the Linux
targets, uploading nothing).

The release folder (``--out``, default ``<build>/release``)::

    assets/                 what the GitHub Release gets: every wheel, the sdist, release-manifest.json, SHA256SUMS
    pypi/                   what PyPI gets: the sdist and the PyPI variant's wheels without a local version
    index/<variant>/<project>/index.html
                            one PEP 503 index per CUDA variant, linking ../../../assets/ (so the folder installs
                            as it is: pip install --index-url file://…/index/cu124 <project>)

Which wheels go where (one rule, for every project the farm serves):

* the *PyPI variant* is the release cell of the newest CUDA major (``targets.default_target``); its wheels go to
  PyPI when their version has no local label (PyPI refuses ``+…``), with the sdist;
* every wheel of every variant goes to the GitHub Release and to its variant's index, so
  ``pip install <project> --extra-index-url <site>/cu124`` finds the cu124 build the way PyTorch's indexes work:
  a variant's local label (``+cu124``, ``+pt2.11.cu130``) sorts above the plain PyPI version;
* two different files may not share a name: a GitHub Release is one flat folder, and pip cannot tell two
  same-named files apart. Wheels of different variants must differ in their local label.

Verbs: ``release dry-run`` (the whole pipeline for the Linux targets, here), ``release assemble ARTIFACTS`` (the
release workflow's assemble job: the downloaded build artifacts of every OS -> the same folder), ``release
import-test WHEEL`` (the workflow's import-test jobs), ``release sdist DIR``, ``release wheel-from-sdist DIR``,
``release site DIR`` (the GitHub Pages index of every release, from the releases' manifests), and the dispatch
workflow's ``release dispatch-plan | dispatch-assemble ARTIFACTS | dispatch-merge RELEASE``
(``ci/release/dispatch.py``). The old spellings (``--dry-run``, ``--assemble ARTIFACTS``, ..., and ``workflows
--dispatch-*``) still work for one release, with a note naming the verb (``ci/cli.py``).

The parser hook (``args.py``) is standard library only: ``ci/cli.py`` imports it before any environment exists.
The verbs (``folder.py``: dry-run and assemble; ``steps.py``: the workflow's single steps; ``dispatch.py``) import
the rest when they run:

* ``ci/release/plan.py``: the built wheels a release takes and which file goes where (PyPI, variant indexes);
* ``ci/release/manifest.py``: the release's records: ``ReleaseFile``, the manifest, SHA256SUMS, the indexes' links;
* ``ci/release/assembly.py``: the release folder, written and checked;
* ``ci/release/install_checks.py``: pip's view of the indexes and the import tests, in clean environments;
* ``ci/release/sdist.py``: the sdist.
"""

from __future__ import annotations

from ci.commands.command import Command, Traits
from ci.commands.release import dispatch, folder, steps
from ci.commands.release.args import INPUTS, OUTPUTS, VERBS, Args, configure, finish
from ci.errors import UsageError
from ci.options import Options


def run(opts: Options[Args]) -> int:
    verb = opts.args.verb
    if verb is None:
        raise UsageError("no release mode given", "python -m ci release",
                         "run `release dry-run` (here), or release assemble/import-test/sdist/site (the release "
                         "workflow)")
    return _VERBS[verb](opts)


_VERBS = {"dry-run": folder.cmd_dry_run, "assemble": folder.cmd_assemble, "import-test": steps.cmd_import_test,
          "sdist": steps.cmd_sdist, "wheel-from-sdist": steps.cmd_wheel_from_sdist, "site": steps.cmd_site,
          "pypi-wheel": steps.cmd_pypi_wheel, "dispatch-plan": dispatch.cmd_dispatch_plan,
          "dispatch-assemble": dispatch.cmd_dispatch_assemble, "dispatch-merge": dispatch.cmd_dispatch_merge}


COMMAND = Command("release", "build, audit and test every Linux target; per-variant indexes, SHA256SUMS and a "
                  "manifest (verbs: " + ", ".join(VERBS) + ")", configure, Args, run,
                  Traits(compiles=True, selects=True, input_paths=(*INPUTS, "sdist_dir", "manifests", "published"),
                         output_paths=("out", *OUTPUTS),
                         labels=tuple((v.replace("-", "_"), f"release {v}'s {a}") for v, (a, _) in VERBS.items() if a)),
                  finish=finish)
