"""Instructions per simulated configuration, counted by valgrind's callgrind: a cost of the code
that the shared machine's speed does not change.

CPU time on this 2-core host varies by up to 2x within minutes (``simulator_speed.py`` prints
the spread); the instructions the interpreter executes for a simulation do not (seen here: within
3% from run to run, with the hash seed and address layout fixed). For each case, two
processes run under callgrind: one simulates the case once (the warm-up that builds the cached
topology, as in ``simulator_speed.py``), the other once and then ``--runs`` more times; the
difference over ``--runs`` is one configuration's count. It also gives the PP 80 case's count
per pipeline stage against PP 20's: linearity in the depth, exactly.

Cases: T-145B on ``wafer`` at TP 8 / DP 2 / PP 20 and PP 80 on a 10 x 8-die wafer (those of
issue 17's targets, as ``simulator_speed.py`` defines them). Needs valgrind (Debian's
package); without it the script says so and exits. About 3 minutes.

Usage: ``python benchmarks/simulator_instructions.py [--runs 10]``.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile

from simulator_speed import TARGETS, _hardware, cases, target_case  # benchmarks/ is the script's directory

from simulator import load_model, simulate


def simulate_times(index: int, runs: int) -> None:
    """Simulate case ``index`` of :func:`simulator_speed.cases` ``1 + runs`` times in this process."""
    model, hardware, strategy = cases()[index]
    spec, machine = load_model(model), _hardware(hardware)
    for _ in range(1 + runs):
        simulate(spec, machine, strategy)


def instructions(index: int, runs: int) -> int:
    """Instructions callgrind counts in a process that simulates case ``index`` ``1 + runs`` times."""
    command = ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", sys.executable, __file__,
               "--child", str(index), str(runs)]
    if shutil.which("setarch"):  # the same address layout in every process
        command = ["setarch", "-R", *command]
    with tempfile.TemporaryDirectory() as quiet:
        out = subprocess.run(command, capture_output=True, text=True, check=True, cwd=quiet,
                             env={**os.environ, "PYTHONHASHSEED": "0"})
    match = re.search(r"Collected\s*:\s*(\d+)", out.stderr)
    if match is None:
        raise RuntimeError(f"callgrind printed no count: {out.stderr[-500:]}")
    return int(match.group(1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10, help="simulations counted per case")
    parser.add_argument("--child", nargs=2, type=int, help=argparse.SUPPRESS)  # case, runs: simulate them
    args = parser.parse_args()
    if args.child:
        simulate_times(*args.child)
        return
    if shutil.which("valgrind") is None:
        print("valgrind is not installed (Debian: apt-get install valgrind): instructions not counted")
        return
    per_configuration = {}
    for pp, hardware in TARGETS.items():
        index = target_case(pp)
        count = (instructions(index, args.runs) - instructions(index, 0)) / args.runs
        per_configuration[pp] = count
        print(f"T-145B on {hardware} (TP 8, DP 2, PP {pp}): {count / 1e6:.1f} M instructions per configuration "
              f"(callgrind, {args.runs} runs)")
    print(f"PP 80 per pipeline stage: {(per_configuration[80] / 80) / (per_configuration[20] / 20):.2f}x PP 20's "
          f"instructions (at most 1: linear in the depth)")


if __name__ == "__main__":
    main()
