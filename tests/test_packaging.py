"""The wheel: it carries every preset and the validation data, lists every package of the tree,
and, installed into a fresh environment, runs ``palm-search validate`` from any directory."""

from __future__ import annotations

import subprocess
import sys
import sysconfig
import tomllib
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> tuple[Path, str]:
    """The wheel, and what building it printed."""
    folder = tmp_path_factory.mktemp("wheel")
    out = subprocess.run([sys.executable, "-m", "pip", "wheel", str(ROOT), "--no-deps", "-q", "-w", str(folder)],
                         check=True, capture_output=True, text=True, timeout=300)
    return next(folder.glob("palm_search-*.whl")), out.stdout + out.stderr


@pytest.fixture(scope="module")
def wheel(built) -> Path:
    return built[0]


@pytest.fixture(scope="module")
def wheel_build_output(built) -> str:
    return built[1]


def test_the_wheel_carries_every_preset_and_the_validation_data(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    presets = {p.relative_to(ROOT).as_posix() for p in ROOT.glob("simulator/*/presets/*.toml")}
    data = {"palm_search/validation_data/" + p.relative_to(ROOT / "studies/validation").as_posix()
            for p in ROOT.glob("studies/validation/*/*/*") if p.suffix in (".csv", ".md")}
    assert presets and presets <= names
    assert data and data <= names
    assert {"simulator/__init__.py", "spaces/__init__.py", "palm_search/commands/cli.py"} <= names


def test_pyproject_lists_every_package_of_the_tree():
    """Every code package, and every data folder Python could import (setuptools warns of one it
    is not told to ship at every install), is listed."""
    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    tree = {p.parent.relative_to(ROOT).as_posix().replace("/", ".")
            for top in ("simulator", "spaces", "palm_search") for p in (ROOT / top).rglob("__init__.py")}
    data = {p.parent.relative_to(ROOT).as_posix().replace("/", ".") for p in ROOT.glob("simulator/*/*/*.toml")}
    validation = {"palm_search.validation_data." + p.parent.relative_to(ROOT / "studies/validation").as_posix()
                  .replace("/", ".") for p in ROOT.glob("studies/validation/*/*/data.csv")}
    importable = {name for name in data | validation if all(part.isidentifier() for part in name.split("."))}
    assert data and validation and listed == tree | importable | {"palm_search.validation_data"}


def test_installing_warns_of_no_unlisted_folder(wheel_build_output):
    assert "Package would be ignored" not in wheel_build_output


def test_the_installed_wheel_validates_from_any_directory(wheel, tmp_path):
    """A fresh venv sees the test environment's dependencies (a .pth line) but not the checkout."""
    fresh = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(fresh)], check=True, timeout=120)
    site = Path(sysconfig.get_path("purelib", vars={"base": str(fresh), "platbase": str(fresh)}))
    (site / "deps.pth").write_text(sysconfig.get_path("purelib") + "\n")
    subprocess.run([sys.executable, "-m", "pip", "--python", str(fresh / "bin" / "python"), "install",
                    "--no-deps", "-q", str(wheel)], check=True, capture_output=True, timeout=300)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    done = subprocess.run([str(fresh / "bin" / "palm-search"), "validate", "--suite", "palm-table5", "--json"],
                          cwd=elsewhere, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "ResNet-50" in done.stdout
    where = subprocess.run([str(fresh / "bin" / "python"), "-c", "import palm_search; print(palm_search.__file__)"],
                           cwd=elsewhere, capture_output=True, text=True, check=True).stdout
    assert where.startswith(str(fresh))
