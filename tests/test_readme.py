"""The README as a user's guide: the presets it names exist, its links resolve, it stays short."""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()


@pytest.mark.parametrize("group", ["experiment", "search"])
def test_every_preset_the_readme_names_exists(group):
    named = set(re.findall(rf"\+{group}=([A-Za-z0-9_]+)", README))
    assert named
    missing = {name for name in named if not (ROOT / "conf" / group / f"{name}.yaml").is_file()}
    assert not missing, f"README names {group} presets that do not exist: {sorted(missing)}"


def test_every_local_link_resolves():
    links = re.findall(r"\]\(((?!https?:|#)[^)#\s]+)(?:#[^)]*)?\)", README)
    assert "docs/mlflow-ui.md" in links
    assert not [link for link in links if not (ROOT / link).exists()]


def test_the_readme_stays_a_guide():
    assert len(README.splitlines()) <= 400  # a guide; the detail lives in docs/
    comparing = README.split("## Comparing runs", 1)[1].split("\n## ", 1)[0]
    assert "docs/mlflow-ui.md" in comparing and "./gemmlab-pages/" in comparing
