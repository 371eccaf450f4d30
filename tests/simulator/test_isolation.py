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


def test_the_simulation_functions_load_on_first_use():
    code = (
        "import sys, simulator\n"
        "before = 'simulator.api' in sys.modules\n"
        "from simulator import simulate\n"
        "import simulator.api\n"
        "print(before, simulate is simulator.api.simulate,"
        " simulator.simulate_timeline is simulator.api.simulate_timeline,"
        " set(simulator.__all__) <= set(dir(simulator)))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "True", "True", "True"]
