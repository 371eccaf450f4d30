"""Instructions per simulated configuration, counted by valgrind's callgrind: a cost of the code
that the shared machine's speed does not change.

CPU time on this 2-core host varies by up to 2x within minutes (``simulator_speed.py`` prints
the spread); the instructions the interpreter executes for a simulation do not: with the hash
seed and address layout fixed and numpy's BLAS on one thread (``OPENBLAS_NUM_THREADS=1``: its
idle worker threads spin for a time that depends on scheduling, which moved the counts of a
process by up to 20 M), the same process gives the same count to within 0.1 M. For each case,
processes run under callgrind that simulate the case 0, 1 and ``1 + --runs`` times; the
differences are the first simulation's count (the machine's topology, flows and the plan's
costs built) and one more configuration's.

Cases: T-145B on ``wafer`` at TP 8 / DP 2 / PP 20 and PP 80 on a 10 x 8-die wafer (those of
issue 17's targets, as ``simulator_speed.py`` defines them), with the PP 80 case's count per
pipeline stage against PP 20's (linearity in the depth); Llama 3.1 405B at TP 8 / PP 16 /
DP 128 on 16,384 H100s (issue 37's first-simulation target, as ``datacenter_scale.py`` defines
it); and DeepSeek-V3 on 1,024 H100s (issue 35's target, as ``moe_targets.py`` defines it).
``--cases`` counts some of them. Needs valgrind (Debian's package); without it the script says
so and exits. About 15 minutes at ``--runs 3``.

Measured (``--runs 3``), before and after branch ``first``'s changes to the event run (each
stage's passes planned once per run, trains forgotten without an event of their own, the
phases two plans can meet paired once per run): Llama 3.1 405B first simulation 137.3 ->
133.7 M, again 91.3 -> 88.0 M; T-145B PP 20 again 52.7 -> 51.7 M, PP 80 189.6 -> 185.4 M.
Before and after branch ``speed`` (``--runs 2``; the sharing constraints by numpy over all
(flow, resource) pairs at once, the event run's small costs): Llama 3.1 405B first 133.9 ->
124.8 M, again 88.2 -> 86.4 M; DeepSeek-V3 first 204.2 -> 152.2 M, again 64.4 -> 62.7 M.
A first simulation's count also depends on whether a full pass of Python's cyclic garbage
collector falls inside it (T-145B PP 20: 255.4 M before, 254.9 and 184.8 M after two versions
of the branch that differ in a few allocations only), so compare repeats for the code's cost.

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

from datacenter_scale import _case as datacenter_case  # benchmarks/ is the script's directory
from moe_targets import _deepseek
from simulator_speed import TARGETS, _hardware, cases, target_case

from simulator import load_model, simulate

DATACENTER = -128
"""The case index standing for Llama 3.1 405B at DP 128 on 16,384 H100s (``datacenter_scale.py``)."""
DEEPSEEK = -1
"""The case index standing for DeepSeek-V3 on 1,024 H100s (``moe_targets.py``)."""


def simulate_times(index: int, runs: int) -> None:
    """Simulate case ``index`` of :func:`simulator_speed.cases` (:data:`DATACENTER`: the 405B
    case) ``runs`` times in this process, after loading it."""
    if index == DATACENTER:
        spec, machine, strategy = datacenter_case(-index)
    elif index == DEEPSEEK:
        spec, machine, strategy = _deepseek()
    else:
        model, hardware, strategy = cases()[index]
        spec, machine = load_model(model), _hardware(hardware)
    for _ in range(runs):
        simulate(spec, machine, strategy)


def instructions(index: int, runs: int) -> int:
    """Instructions callgrind counts in a process that loads case ``index`` and simulates it ``runs`` times."""
    command = ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", sys.executable, __file__,
               "--child", str(index), str(runs)]
    if shutil.which("setarch"):  # the same address layout in every process
        command = ["setarch", "-R", *command]
    with tempfile.TemporaryDirectory() as quiet:
        out = subprocess.run(command, capture_output=True, text=True, check=True, cwd=quiet,
                             env={**os.environ, "PYTHONHASHSEED": "0", "OPENBLAS_NUM_THREADS": "1"})
    match = re.search(r"Collected\s*:\s*(\d+)", out.stderr)
    if match is None:
        raise RuntimeError(f"callgrind printed no count: {out.stderr[-500:]}")
    return int(match.group(1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10, help="simulations counted per case")
    parser.add_argument("--cases", nargs="+", choices=("t145b", "llama405b", "deepseek"),
                        default=["t145b", "llama405b", "deepseek"], help="the cases counted")
    parser.add_argument("--child", nargs=2, type=int, help=argparse.SUPPRESS)  # case, runs: load, simulate them
    args = parser.parse_args()
    if args.child:
        simulate_times(*args.child)
        return
    if shutil.which("valgrind") is None:
        print("valgrind is not installed (Debian: apt-get install valgrind): instructions not counted")
        return
    if "t145b" in args.cases:
        per_configuration = {}
        for pp, hardware in TARGETS.items():
            first, again = first_and_again(target_case(pp), args.runs)
            per_configuration[pp] = again
            print(f"T-145B on {hardware} (TP 8, DP 2, PP {pp}): first simulation {first / 1e6:.1f} M instructions,"
                  f" again {again / 1e6:.1f} M per configuration (callgrind, {args.runs} runs)")
        print(f"PP 80 per pipeline stage: {(per_configuration[80] / 80) / (per_configuration[20] / 20):.2f}x PP 20's"
              f" instructions (at most 1: linear in the depth)")
    named = {"llama405b": (DATACENTER, "Llama 3.1 405B on 16,384 H100 (TP 8, PP 16, DP 128)"),
             "deepseek": (DEEPSEEK, "DeepSeek-V3 on 1,024 H100 (PP 16, DP 64, EP 64)")}
    for case in ("llama405b", "deepseek"):
        if case in args.cases:
            index, name = named[case]
            first, again = first_and_again(index, args.runs)
            print(f"{name}: first simulation {first / 1e6:.1f} M instructions, again {again / 1e6:.1f} M per"
                  f" configuration (callgrind, {args.runs} runs)")


def first_and_again(index: int, runs: int) -> tuple[float, float]:
    """Instructions of case ``index``'s first simulation in a process and of each of ``runs`` more."""
    loaded, once, more = (instructions(index, n) for n in (0, 1, 1 + runs))
    return once - loaded, (more - once) / runs


if __name__ == "__main__":
    main()
