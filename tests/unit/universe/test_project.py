"""The project configuration ([tool.cuda-ext-farm]) and the targets derived from it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from ci.errors import TargetError, UsageError
from ci.universe import matrix, project, targets
from ci.universe.project import reading, validation
from ci.universe.selection import Selection, select
from ci.universe.tomlvalues import ConfigError

ROOT = Path(__file__).resolve().parents[3]
CLASSIC = ROOT / "tests" / "fixtures" / "classic_ext"


def write_project(tmp_path: Path, table: str, *, header: str = '[project]\nname = "my-ext"\nversion = "1.0"\n') -> Path:
    (tmp_path / "pyproject.toml").write_text(header + "\n" + table)
    (tmp_path / "setup.py").write_text("")
    return tmp_path


def test_a_name_is_all_a_classic_setup_py_project_needs(tmp_path: Path) -> None:
    config = reading.load(write_project(tmp_path, "", header='[tool.cuda-ext-farm]\nname = "my-ext"\n'))
    assert (config.name, config.abi, config.python_abi) == ("my-ext", "classic", "per-python")
    assert config.build_env == {"FORCE_CUDA": "1"}
    assert config.cuda_libraries == ("*",) and config.cpu_libraries == ()
    assert config.commands.smoke == ("python", "-c", "import my_ext")
    ids = [t.id for t in targets.targets_for(config)]
    # Default coverage: the newest torch of each CUDA major x every Python it has wheels for, the free-threaded
    # ones (cp313t) included.
    newest = {r.cuda_major: r for r in matrix.TORCH_RELEASES}
    expected = sum(len(r.labels) for r in newest.values())
    assert len(ids) == expected and len(set(ids)) == expected
    assert "my_ext-torch2.15-cu130-cp315-linux_x86_64" in ids
    # CUDA 12: the release cell (torch's own CUDA 12.8), not its local stand-in cu124.
    assert "my_ext-torch2.10-cu128-cp310-linux_x86_64" in ids
    assert "my_ext-torch2.10-cu128-cp313t-linux_x86_64" in ids and "my_ext-torch2.15-cu130-cp315t-linux_x86_64" in ids
    assert not any("-cu124-" in i for i in ids)


def test_farm_checkout_is_the_default_project() -> None:
    config = reading.load()
    assert config.root == ROOT and config.abi == "stable" and config.is_farm_itself
    assert targets.default_target(config).id == "fusedops-stable-cu130-cp310abi3-linux_x86_64"


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ('[tool.cuda-ext-farm]\nabii = "classic"\n', r"unknown key in \[tool.cuda-ext-farm\].*\(abii\)"),
        ('[tool.cuda-ext-farm]\nabi = "stabel"\n', r"abi has a bad value \('stabel'\)"),
        ('[tool.cuda-ext-farm]\ntorch = ["2.11", "two"]\n', r"torch has a bad version \(two\)"),
        ('[tool.cuda-ext-farm]\ntorch = ">=2.x"\n', r"torch is not a version specifier"),
        ('[tool.cuda-ext-farm]\npython = [3.11]\n', r"python must be a list of strings"),
        ('[tool.cuda-ext-farm]\nbuild-env = { "1BAD" = "1" }\n', r"bad environment variable name \(1BAD\)"),
        ('[tool.cuda-ext-farm]\nbuild-env = { X = "{cudaa}" }\n', r"unknown placeholder \(\{cudaa\}\)"),
        ('[tool.cuda-ext-farm.commands]\nsmoke = ""\n', r"commands\] smoke is empty"),
        ('[tool.cuda-ext-farm.commands]\nsmok = "x"\n', r"unknown key in \[tool.cuda-ext-farm.commands\] \(smok\)"),
        ('[tool.cuda-ext-farm.commands]\ntest = "pytest \'unclosed"\n', r"not a valid command line"),
        ('[tool.cuda-ext-farm]\nversion = 7\n', r"version is not supported \(7\)"),
        ('[tool.cuda-ext-farm]\nabi = "stable"\npython-abi = "per-python"\n', r"must be abi3 for a stable-ABI"),
        ("[tool.cuda-ext-farm\n", r"malformed TOML"),
        ('[tool.cuda-ext-farm]\nos = ["linux", "macos"]\n', r"os names an unknown value \(macos\)"),
        ('[tool.cuda-ext-farm]\nos = ["windows"]\n', r"os must include 'linux'"),
    ],
)
def test_bad_configuration_names_the_key(tmp_path: Path, table: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message) as info:
        reading.load(write_project(tmp_path, table))
    assert info.value.line().startswith("error: ") and "\n" not in info.value.line()


def test_missing_project_folder_and_files(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="project folder does not exist"):
        reading.load(tmp_path / "nope")
    with pytest.raises(UsageError, match=r"no pyproject\.toml or setup\.py"):
        reading.load(tmp_path)
    (tmp_path / "setup.py").write_text("")
    with pytest.raises(UsageError, match=r"has no pyproject\.toml"):
        reading.load(tmp_path)
    (tmp_path / "pyproject.toml").write_text("[tool.other]\n")
    with pytest.raises(UsageError, match="has no name"):
        reading.load(tmp_path)


def test_config_file_for_a_project_you_cannot_edit(tmp_path: Path) -> None:
    (tmp_path / "setup.py").write_text("")
    config_file = tmp_path / "farm.toml"
    config_file.write_text('name = "vendored-op"\ntorch = ["2.13"]\npython = ["3.12"]\n')
    config = reading.load(tmp_path, config_file)
    assert [t.id for t in targets.targets_for(config)] == ["vendored_op-torch2.13-cu130-cp312-linux_x86_64"]
    with pytest.raises(UsageError, match="configuration file does not exist"):
        reading.load(tmp_path, tmp_path / "missing.toml")


def test_classic_targets_prune_pythons_torch_has_no_wheel_for(tmp_path: Path) -> None:
    config = reading.load(write_project(tmp_path, '[tool.cuda-ext-farm]\ntorch = ["2.13", "2.15"]\n'
                                        'python = ["3.10", "3.15"]\n'))
    ids = [t.id for t in targets.targets_for(config)]
    # torch 2.13 has no cp315 wheel, 2.15 no cp310 wheel (PyPI).
    assert ids == ["my_ext-torch2.13-cu130-cp310-linux_x86_64", "my_ext-torch2.15-cu130-cp315-linux_x86_64"]


def test_python_with_no_torch_wheel_is_refused(tmp_path: Path) -> None:
    config = reading.load(write_project(tmp_path, '[tool.cuda-ext-farm]\ntorch = ["2.15"]\npython = ["3.10"]\n'))
    with pytest.raises(TargetError, match=r"python names no Python the selected torch releases have wheels for "
                       r"\(3.10\): torch 2.15 has wheels for Python 3.11 to 3.15"):
        targets.targets_for(config)
    # A Python one selected release has and another lacks: that release is named, with the range of them all.
    config = reading.load(write_project(tmp_path, '[tool.cuda-ext-farm]\ntorch = ["2.13", "2.15"]\n'
                                        'python = ["3.10"]\n'))
    with pytest.raises(TargetError, match=r"torch 2.15 has no wheel for the requested Python on PyPI \(3.10\): "
                       r"torch 2.15 has wheels for 3.11 to 3.15(; free-threaded [\d.t, ]+)? \(the selected torch "
                       r"releases, 2.13, 2.15, for 3.10 to 3.15(; free-threaded [\d.t, ]+)?\)"):
        targets.targets_for(config)


def test_torch_without_a_matching_cuda_cell_is_refused(tmp_path: Path) -> None:
    config = reading.load(write_project(tmp_path, '[tool.cuda-ext-farm]\ntorch = ["2.10"]\ncuda = ["13"]\n'))
    with pytest.raises(TargetError, match=r"torch 2.10 is built with CUDA 12.8"):
        targets.targets_for(config)


def test_requires_python_narrows_the_pythons(tmp_path: Path) -> None:
    config = reading.load(write_project(tmp_path, '[tool.cuda-ext-farm]\ntorch = ["2.13"]\n', header=(
        '[project]\nname = "x"\nversion = "1"\nrequires-python = ">=3.13"\n')))
    assert [t.python for t in targets.targets_for(config)] == ["3.13", "3.14", "3.14t"]


def test_abi3_classic_builds_one_wheel_per_torch(tmp_path: Path) -> None:
    config = reading.load(write_project(tmp_path, '[tool.cuda-ext-farm]\npython-abi = "abi3"\n'
                                        'torch = ["2.11", "2.13"]\n'))
    built = targets.targets_for(config)
    # abi3 does not cover a free-threaded CPython: each of those gets a wheel of its own.
    assert [t.id for t in built] == ["my_ext-torch2.11-cu130-cp310abi3-linux_x86_64",
                                     "my_ext-torch2.11-cu130-cp313t-linux_x86_64",
                                     "my_ext-torch2.11-cu130-cp314t-linux_x86_64",
                                     "my_ext-torch2.13-cu130-cp310abi3-linux_x86_64",
                                     "my_ext-torch2.13-cu130-cp314t-linux_x86_64"]
    assert built[0].wheel_tag_prefix == "cp310-abi3" and built[0].torch_pin == "torch==2.11.*"


def test_classic_identity_local_version_and_pin() -> None:
    config = reading.load(CLASSIC)
    target = select(config, Selection(torch="2.13", python="3.12"))[0]
    assert target.id == "classic_ext-torch2.13-cu130-cp312-linux_x86_64"
    assert target.local_version == "pt2.13.cu130" and target.torch_pin == "torch==2.13.*"
    assert target.torch_requirement == "torch==2.13.0,!=2.13.0+cpu"
    assert target.wheel_tag_prefix == "cp312-cp312"


def test_stable_identity_labels_only_the_variants_pypi_does_not_get() -> None:
    config = reading.load(ROOT)
    target = targets.default_target(config)
    assert target.local_version == "" and target.torch_pin is None and target.abi3
    assert targets.targets_for(config, "windows")[0].id.endswith("-win_amd64")
    labels = {t.cell.name: t.local_version for t in targets.targets_for(config) if not t.cpu}
    assert labels["cu130"] == "" and labels["cu128"] == "cu128"
    assert all(label == ("" if cell == "cu130" else cell) for cell, label in labels.items())


@pytest.mark.parametrize(
    ("selection", "message"),
    [
        (Selection(torch="2.12"), r"has no target for torch \(2.12\)"),
        (Selection(python="3.13"), r"has no target for Python \(3.13\)"),
        (Selection(target_ids=("nope",)), r"has no such target \(nope\)"),
        (Selection(cuda="12"), r"has no target for CUDA \(12\)"),
        (Selection(torch="9.9"), r"unknown torch release \(9.9\)"),
    ],
)
def test_selection_that_matches_nothing_names_the_filter(selection: Selection, message: str) -> None:
    with pytest.raises(UsageError, match=message):
        select(reading.load(CLASSIC), selection)


def test_targets_never_share_an_id() -> None:
    for config in (reading.load(ROOT), reading.load(CLASSIC)):
        for os_name in ("linux", "windows"):
            ids = [t.id for t in targets.targets_for(config, os_name)]
            assert len(ids) == len(set(ids))


def test_build_env_adds_to_the_default_force_cuda(tmp_path: Path) -> None:
    config = reading.load(write_project(tmp_path, '[tool.cuda-ext-farm]\nbuild-env = { MY_EXT_FORCE_BUILD = "1" }\n'))
    assert config.build_env == {"FORCE_CUDA": "1", "MY_EXT_FORCE_BUILD": "1"}
    config = reading.load(write_project(tmp_path, '[tool.cuda-ext-farm]\nbuild-env = { FORCE_CUDA = "0" }\n'))
    assert config.build_env == {"FORCE_CUDA": "0"}


def test_os_linux_opts_out_of_windows_targets(tmp_path: Path) -> None:
    """`os = ["linux"]`: no Windows targets (matrix, coverage, release plan, generated workflows); build-win refused."""
    from ci.gha import steps as gha_steps
    from ci.release import plan

    config = reading.load(write_project(tmp_path, '[tool.cuda-ext-farm]\nos = "linux"\n'))
    assert config.oses == ("linux",)
    assert targets.platform_targets(config, "windows") == ()
    assert targets.workflow_targets(config)[1] == ()
    assert gha_steps.context(config, gha_steps.FarmSource()).windows == ()
    assert all(t.os == "linux" for t in plan.all_targets(config).values())
    with pytest.raises(TargetError, match=r'my-ext is not built for windows \(linux\): add "windows" to '
                       r"\[tool.cuda-ext-farm\] os"):
        select(config, Selection(cuda="13"), "windows")
    both = reading.load(write_project(tmp_path, ""))
    assert both.oses == ("linux", "windows") and targets.platform_targets(both, "windows")


def test_every_key_is_documented_in_the_module_and_the_options_reference() -> None:
    """A key added to _KEYS appears in the module's example table and in docs/options.md's key table (commands:
    its own rows, and the README's example shows the table)."""
    options = (ROOT / "docs" / "options.md").read_text()
    doc = project.__doc__ or ""
    assert not [k for k in sorted(validation._KEYS) if not re.search(rf"^\s+{re.escape(k)} = ", doc, re.MULTILINE)
                and k != "commands"]
    assert not [k for k in sorted(validation._KEYS) if f"| `{k}` |" not in options and k != "commands"]
    assert "| `commands.smoke` |" in options
    readme = (ROOT / "README.md").read_text()
    assert "[tool.cuda-ext-farm.commands]" in doc and "[tool.cuda-ext-farm.commands]" in readme
