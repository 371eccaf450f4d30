"""Steady-state extrapolation against full runs, over random mappings.

Draws ``--mappings`` feasible training mappings at random (seeded) of T-18B to T-145B on the
``wafer``, ``a100-cluster`` and ``h100-cluster`` presets (pp 4-40, more microbatches than twice
the pipeline depth, so that ``simulate`` extrapolates), and simulates each with the default
extrapolation and, where the full run stays short (``m * pp`` at most ``--full-limit``), with
``steady_state=False``. Prints the relative error of each extrapolation, the largest, and the
microbatches simulated: what backs :data:`simulator.api.SHORT_WINDOW`.

Usage: ``python benchmarks/steady_state.py [--mappings 40] [--seed 1] [--full-limit 3000]``.
"""

from __future__ import annotations

import argparse
import random

import pandas as pd

from simulator import InputError, Strategy, load_hardware, load_model, simulate

HARDWARE = ("wafer", "a100-cluster", "h100-cluster")
MODELS = ("T-18B", "T-39B", "T-76B", "T-145B")


def draw(rng: random.Random) -> tuple[str, str, Strategy]:
    """A random (model, hardware, strategy), not checked."""
    strategy = Strategy(tp=rng.choice([1, 2, 4, 8, 16]), pp=rng.choice([4, 5, 8, 10, 16, 20, 40]),
                        dp=rng.choice([1, 2, 4, 8]), microbatch_size=rng.choice([1, 2, 4]),
                        recompute=rng.choice(["full", "selective", "none"]), zero_stage=rng.choice([0, 1, 2]),
                        global_batch_size=rng.choice([256, 512, 1024]), placement=rng.choice(["s-shape", "line"]),
                        p2p_blocking=rng.choice([False, True]))
    return rng.choice(MODELS), rng.choice(HARDWARE), strategy


def measure(model: str, hardware: str, strategy: Strategy, full_limit: int) -> dict | None:
    """The row of one mapping, or None when it is not legal, does not fit or is not extrapolated."""
    spec, machine = load_model(model), load_hardware(hardware)
    try:
        result = simulate(spec, machine, strategy)
    except InputError:
        return None
    if not result.feasible or not result.extrapolated:
        return None
    row = dict(model=model, hardware=hardware, tp=strategy.tp, pp=strategy.pp, dp=strategy.dp,
               microbatches=result.num_microbatches, simulated=result.simulated_microbatches,
               iteration_s=result.iteration_time_s)
    if result.num_microbatches * strategy.pp <= full_limit:
        full = simulate(spec, machine, strategy, steady_state=False).iteration_time_s
        row.update(full_s=full, error=result.iteration_time_s / full - 1)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mappings", type=int, default=40)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--full-limit", type=int, default=3000, help="largest microbatches x stages run in full")
    args = parser.parse_args()
    rng, rows = random.Random(args.seed), []
    while len(rows) < args.mappings:
        row = measure(*draw(rng), args.full_limit)
        if row is not None:
            rows.append(row)
    table = pd.DataFrame(rows)
    print(table.to_string(index=False, float_format=lambda x: f"{x:.5g}"))
    compared = table.dropna(subset=["error"])
    print(f"{len(compared)} of {len(table)} mappings run in full: largest |error| "
          f"{compared.error.abs().max():.3%}, median {compared.error.abs().median():.3%}; "
          f"microbatches simulated: median {table.simulated.median():.0f} of {table.microbatches.median():.0f}")


if __name__ == "__main__":
    main()
