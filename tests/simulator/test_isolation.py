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


PUBLIC_MODULES = {"simulator", "simulator.hardware", "simulator.workload", "simulator.network", "simulator.legality",
                  "simulator.config", "simulator.trace"}
"""The simulator's documented public modules (its ``__init__`` docstring)."""


def test_spaces_and_palm_search_import_the_simulator_through_its_public_modules():
    import ast
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    bypassing = []
    for path in sorted([*root.joinpath("spaces").rglob("*.py"), *root.joinpath("palm_search").rglob("*.py")]):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = ([node.module or ""] if isinstance(node, ast.ImportFrom)
                     else [a.name for a in node.names] if isinstance(node, ast.Import) else [])
            bypassing += [f"{path.relative_to(root)}:{node.lineno} {name}" for name in names
                          if name.split(".")[0] == "simulator" and name not in PUBLIC_MODULES]
    assert bypassing == []


def test_the_public_modules_export_what_they_list():
    import importlib

    for name in PUBLIC_MODULES:
        module = importlib.import_module(name)
        assert all(hasattr(module, export) for export in getattr(module, "__all__", ())), name
