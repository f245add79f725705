"""The commit a run records: the gemmlab checkout's own, never another repository's."""

import subprocess

import pytest

from runner.record.tracking import git_commit


@pytest.fixture(autouse=True)
def no_commit_override(monkeypatch):
    monkeypatch.delenv("GEMMLAB_GIT_COMMIT", raising=False)


def _git(folder, *args) -> str:
    return subprocess.run(["git", "-C", str(folder), "-c", "user.name=test",
                           "-c", "user.email=test@example.com", *args],
                          capture_output=True, text=True, check=True).stdout.strip()


def _project(folder, name: str):
    """A folder laid out like a checkout of project `name`: pyproject.toml beside runner/."""
    (folder / "runner").mkdir(parents=True)
    (folder / "runner" / "__init__.py").write_text("")
    (folder / "pyproject.toml").write_text(f'[project]\nname = "{name}"\nversion = "0.1.0"\n')
    return folder


def _committed_repository(folder):
    _git(folder, "init", "-q")
    _git(folder, "add", "-A")
    _git(folder, "commit", "-q", "-m", "init")
    return _git(folder, "rev-parse", "HEAD")


def test_a_gemmlab_checkout_reports_its_commit_and_dirty_state(tmp_path):
    checkout = _project(tmp_path / "gemmlab", "gemmlab")
    head = _committed_repository(checkout)
    assert git_commit(checkout / "runner") == head
    (checkout / "runner" / "__init__.py").write_text("# edited\n")
    assert git_commit(checkout / "runner") == head + "-dirty"


def test_a_package_inside_an_unrelated_repository_reports_no_commit(tmp_path):
    other = _project(tmp_path / "other", "someone-elses-project")
    _committed_repository(other)
    assert git_commit(other / "runner") is None


def test_an_untracked_gemmlab_tree_inside_another_repository_reports_no_commit(tmp_path):
    outer = tmp_path / "outer"
    outer.mkdir()
    (outer / "notes.txt").write_text("not gemmlab\n")
    _committed_repository(outer)
    unpacked = _project(outer / "gemmlab-0.1.0", "gemmlab")  # e.g. an unpacked sdist
    assert git_commit(unpacked / "runner") is None


def test_a_wheel_in_a_venv_inside_a_checkout_reports_no_commit(tmp_path):
    checkout = _project(tmp_path / "gemmlab", "gemmlab")
    _committed_repository(checkout)
    installed = checkout / ".venv" / "lib" / "python3" / "site-packages" / "runner"
    installed.mkdir(parents=True)
    assert git_commit(installed) is None


def test_the_environment_override_wins(tmp_path, monkeypatch):
    monkeypatch.setenv("GEMMLAB_GIT_COMMIT", "abc123")
    assert git_commit(tmp_path / "runner") == "abc123"
