"""What a built wheel carries: every config and kernel source, in a package setuptools knows."""

import fnmatch

import pytest

from runner.config.paths import checkout_root

tomllib = pytest.importorskip("tomllib")  # Python >= 3.11

CHECKOUT = checkout_root()
pytestmark = pytest.mark.skipif(CHECKOUT is None, reason="needs the checkout's pyproject.toml")


def _setuptools_table() -> dict:
    return tomllib.loads((CHECKOUT / "pyproject.toml").read_text())["tool"]["setuptools"]


@pytest.mark.parametrize("data_package", ["runner.conf", "runner.kernels"])
def test_every_data_file_is_package_data_of_a_listed_package(data_package):
    table = _setuptools_table()
    root = CHECKOUT / table["package-dir"][data_package]
    patterns = table["package-data"]["*"]
    files = [path for path in root.rglob("*") if path.is_file()]
    assert files
    for path in files:
        relative = path.parent.relative_to(root)
        package = ".".join([data_package, *relative.parts])
        assert package in table["packages"], f"{path}: add {package} to [tool.setuptools] packages"
        assert any(fnmatch.fnmatch(path.name, pattern) for pattern in patterns), \
            f"{path}: no [tool.setuptools.package-data] pattern carries it into the wheel"
