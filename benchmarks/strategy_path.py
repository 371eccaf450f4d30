"""A strategy's way through one simulation (issue 33's zig-zag metric), measured instead of read.

Every function of ``simulator/`` that is called with a :class:`simulator.Strategy` among its
arguments is recorded once, at its first call (a profile hook), in the order the simulation first
reaches it: the order a reader following the strategy from :func:`simulator.simulate` meets
them. Consecutive functions of one module make one *stop*; a *return* is a stop in a module the
way had already left. Printed: functions, stops, modules, returns, each module's visits; with
``--no-methods`` the strategy's own methods (``Strategy.training``...) are left out; ``-v``
lists the stops.

Usage: ``python benchmarks/strategy_path.py [--model T-1.7B] [--hw wafer] [--no-methods] [-v]``
(the strategy is TP 2 / PP 2 / DP 2, global batch 16, every other field at its default).
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path
from types import FrameType
from typing import Any

import simulator
from simulator import Strategy, load_hardware, load_model, simulate

ROOT = Path(simulator.__file__).parent


def strategy_path(model: str, hw: str, methods: bool) -> list[tuple[str, str]]:
    """``(module path, function name)`` of each simulator function the strategy reaches, in order
    of first call."""
    seen: set[object] = set()
    order: list[tuple[str, str]] = []

    def profile(frame: FrameType, event: str, arg: Any) -> None:
        code = frame.f_code
        if event != "call" or code in seen or not code.co_filename.startswith(str(ROOT)):
            return
        names = code.co_varnames[:code.co_argcount + code.co_kwonlyargcount]
        if not methods and names[:1] == ("self",):
            names = names[1:]
        if any(isinstance(frame.f_locals.get(n), Strategy) for n in names):
            seen.add(code)
            order.append((str(Path(code.co_filename).relative_to(ROOT.parent)), code.co_name))

    loaded_model, hardware = load_model(model), load_hardware(hw)
    strategy = Strategy(tp=2, pp=2, dp=2, global_batch_size=16)
    sys.setprofile(profile)
    try:
        simulate(loaded_model, hardware, strategy)
    finally:
        sys.setprofile(None)
    return order


def stops_of(order: list[tuple[str, str]]) -> list[tuple[str, list[str]]]:
    """Consecutive functions of one module grouped into stops."""
    stops: list[tuple[str, list[str]]] = []
    for module, name in order:
        if stops and stops[-1][0] == module:
            stops[-1][1].append(name)
        else:
            stops.append((module, [name]))
    return stops


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="T-1.7B")
    parser.add_argument("--hw", default="wafer")
    parser.add_argument("--no-methods", action="store_true", help="leave out the Strategy's own methods")
    parser.add_argument("-v", action="store_true", help="list the stops")
    args = parser.parse_args()
    order = strategy_path(args.model, args.hw, methods=not args.no_methods)
    stops = stops_of(order)
    modules = [module for module, _ in stops]
    returns = sum(module in modules[:i] for i, module in enumerate(modules))
    print(f"functions {len(order)}, stops {len(stops)}, modules {len(set(modules))}, returns {returns}")
    print("visits: " + ", ".join(f"{module} {n}" for module, n in Counter(modules).most_common()))
    if args.v:
        for module, names in stops:
            print(f"  {module}: {', '.join(names)}")


if __name__ == "__main__":
    main()
