"""docs/options.md, the reference of ``[tool.cuda-ext-farm]``, is generated from the keys the farm reads
(ci/universe/project/keys.py): a key the table accepts has a line there, and a line names a key it accepts."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from ci.universe.project import COMMAND_NAMES, keys, reading
from ci.universe.tomlvalues import ConfigError

ROOT = Path(__file__).resolve().parents[3]
DOC = ROOT / "docs" / "options.md"


def test_the_options_reference_is_generated_from_the_keys() -> None:
    text = keys.markdown()
    if os.environ.get("FARM_WRITE_DOCS") == "1":
        DOC.write_text(text, encoding="utf-8")
    assert DOC.read_text(encoding="utf-8") == text, "run FARM_WRITE_DOCS=1 pytest tests/unit/universe"


def test_every_key_documented_is_read_and_no_other(tmp_path: Path) -> None:
    commands = {k.name.removeprefix("commands.") for k in keys.KEYS if k.name.startswith("commands.")}
    assert commands == set(COMMAND_NAMES)
    (tmp_path / "setup.py").write_text("")
    for key in [*sorted(keys.TABLE_KEYS), "no-such-key"]:
        (tmp_path / "pyproject.toml").write_text(f'[project]\nname = "x"\n[tool.cuda-ext-farm]\n"{key}" = 0\n')
        with pytest.raises(ConfigError) as refused:
            reading.load(tmp_path)
        # 0 is a bad value for every key: a known key is refused for its value, never as unknown.
        assert ("unknown key" in str(refused.value)) == (key == "no-such-key"), (key, str(refused.value))
