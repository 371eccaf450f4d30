"""The presets ship inside the package: a plain (non-editable) wheel carries every preset file."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_the_wheel_carries_every_preset(tmp_path):
    subprocess.run([sys.executable, "-m", "pip", "wheel", str(ROOT), "--no-deps",
                    "-q", "-w", str(tmp_path)], check=True, capture_output=True, timeout=300)
    wheel = next(tmp_path.glob("palm_search-*.whl"))
    names = set(zipfile.ZipFile(wheel).namelist())
    presets = {p.relative_to(ROOT).as_posix() for p in ROOT.glob("simulator/*/presets/*.toml")}
    assert presets and presets <= names
    assert {"simulator/__init__.py", "spaces/__init__.py", "palm_search/cli.py"} <= names
