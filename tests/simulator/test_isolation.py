"""simulator/ stands alone: it imports neither optuna, typer, spaces nor palm_search."""

from __future__ import annotations

import subprocess
import sys


def test_simulator_imports_no_search_or_cli_package():
    code = (
        "import sys, simulator, simulator.api, simulator.engine\n"
        "bad = [m for m in ('optuna', 'typer', 'spaces', 'palm_search') if m in sys.modules]\n"
        "print(','.join(bad))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""
