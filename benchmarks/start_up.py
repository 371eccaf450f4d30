"""Start-up of the ``palm-search`` command, and what a whole small ``simulate`` costs.

Runs, ``--repeats`` times each and alternating, as a user types them (fresh processes, wall
time): ``palm-search --version`` (the interpreter and everything the command line imports before
it runs a command: issue 17's start-up, at most 0.3 s), ``palm-search simulate --model T-145B
--hw wafer --json`` (start-up, loading, one simulation and its JSON), and ``python -c pass`` (the
interpreter alone, the floor). Prints each median and minimum, and which of optuna, pandas (the
search's) and rich (tables) ``simulate --json`` loaded: none should be.

Usage: ``python benchmarks/start_up.py [--repeats 10]``.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

BIN = Path(sys.executable).parent
COMMANDS = {
    "python -c pass": [sys.executable, "-c", "pass"],
    "palm-search --version": [str(BIN / "palm-search"), "--version"],
    "palm-search simulate --model T-145B --hw wafer --json": [
        str(BIN / "palm-search"), "simulate", "--model", "T-145B", "--hw", "wafer", "--json"],
}
UNNEEDED_MODULES = ("optuna", "pandas", "rich")
LOADED = ("import sys\nfrom palm_search.commands.cli import main\ntry:\n    main()\nexcept SystemExit:\n    pass\n"
          f"print(sorted(set({UNNEEDED_MODULES!r}) & set(sys.modules)), file=sys.stderr)")


def wall_s(command: list[str]) -> float:
    started = time.perf_counter()
    subprocess.run(command, check=True, capture_output=True)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=10, help="runs of each command, alternating")
    args = parser.parse_args()
    times: dict[str, list[float]] = {name: [] for name in COMMANDS}
    for _ in range(args.repeats):
        for name, command in COMMANDS.items():
            times[name].append(wall_s(command))
    for name, runs in times.items():
        print(f"{name}: median {1e3 * statistics.median(runs):.0f} ms, min {1e3 * min(runs):.0f} ms wall"
              f" ({args.repeats} runs)")
    simulate = [sys.executable, "-c", LOADED, "simulate", "--model", "T-145B", "--hw", "wafer", "--json"]
    loaded = subprocess.run(simulate, check=True, capture_output=True, text=True).stderr.strip().splitlines()[-1]
    print(f"target: start-up (palm-search --version) {1e3 * statistics.median(times['palm-search --version']):.0f} ms"
          f" median wall (at most 300 ms); optuna, pandas or rich loaded by simulate --json: {loaded}")


if __name__ == "__main__":
    main()
