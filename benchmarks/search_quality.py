"""Search quality and speed: best mapping found against the exhaustive optimum, over seeds.

Two spaces of T-145B on ``wafer``:

* ``vb``: the enumerable PALM §V-B study (``studies/palm-vb-t145b-wafer.toml``: TP x DP at
  PP 20, ZeRO, comm groups, placement). Its optimum comes from the exhaustive sampler; TPE and
  random search then run ``--vb-trials`` trials per seed.
* ``default``: the space of ``palm-search optimize --model T-145B --hw wafer`` (degrees,
  microbatch, schedule, recompute, sequence parallelism, ZeRO, groups, placement; 11,268 points
  fit memory), searched per seed as the command does (the screen, then 50 simulations), and with
  ``--fidelity full`` (TPE proposing ``--trials`` simulations). Its optimum is
  ``--default-optimum`` (default 0.4042 samples/s under ``sharing``, ZB-H1's best, found by the
  screen; 1F1B's, 0.4027, was certified with every point within 5% of the best estimate
  simulated, ``benchmarks/fidelity.py --certify 0.05``, before ZB-H1 joined the space).

For each run: best samples/s, best / optimum, the simulations it took to come within 1% of the
optimum (``-`` if never), and wall time on this machine (``--jobs`` workers).

Usage: ``python benchmarks/search_quality.py [--seeds 10] [--jobs 2] [--spaces vb default]``.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import pandas as pd
from optuna.trial import TrialState

from palm_search.search.baseline import choose_baseline
from palm_search.search.driver import Search, open_search, optimize, run_baseline
from palm_search.search.run_control import Executor
from palm_search.search.study import StudySpec, load_study

VB_STUDY = Path(__file__).resolve().parents[1] / "studies" / "palm-vb-t145b-wafer.toml"


def searched(spec: StudySpec, run_dir: Path, jobs: int) -> Search:
    """The study searched as ``palm-search optimize`` does (its local workers started while the
    study opens, baseline first), without pictures."""
    executor = Executor("loky", None, jobs)
    try:
        executor.warm_up(jobs)
        search = open_search(spec, run_dir=run_dir, jobs=jobs)
        baseline, _ = choose_baseline(spec, search.model, search.hardware)
        run_baseline(search, baseline)
        optimize(search)
    finally:
        executor.close()
    return search


def run(spec: StudySpec, jobs: int) -> tuple[list[float], float]:
    """Samples/s of each non-baseline trial in order (0 when infeasible), and the wall time (s)."""
    with tempfile.TemporaryDirectory() as run_dir:
        started = time.perf_counter()
        search = searched(spec, Path(run_dir), jobs)
        wall = time.perf_counter() - started
        values = [t.values[0] if t.state == TrialState.COMPLETE and t.user_attrs.get("feasible") else 0.0
                  for t in search.study.trials if not t.user_attrs.get("baseline")]
    return values, wall


def row(space: str, sampler: str, seed: int, values: list[float], wall: float, optimum: float | None) -> dict:
    best = max(values, default=0.0)
    within = next((i + 1 for i, v in enumerate(values) if optimum and v >= 0.99 * optimum), None)
    return {"space": space, "sampler": sampler, "seed": seed, "trials": len(values), "best": best,
            "best_over_optimum": best / optimum if optimum else float("nan"),
            "simulations_to_1pct": within if within is not None else "-", "wall_s": wall}


def vb_rows(seeds: int, trials: int, jobs: int) -> list[dict]:
    spec = load_study(VB_STUDY)
    values, wall = run(spec.replace(sampler="exhaustive", trials=100_000, name="vb-exhaustive"), jobs)
    optimum = max(values)
    rows = [row("vb", f"exhaustive ({len(values)} points)", 0, values, wall, optimum)]
    for sampler in ("tpe", "random"):
        for seed in range(seeds):
            named = spec.replace(sampler=sampler, trials=trials, seed=seed, name=f"vb-{sampler}-{seed}")
            values, wall = run(named, jobs)
            rows.append(row("vb", sampler, seed, values, wall, optimum))
    return rows


def default_rows(seeds: int, trials: int, jobs: int, optimum: float) -> list[dict]:
    rows = []
    for fidelity, budget in (("screen", None), ("full", trials)):
        for seed in range(seeds):
            spec = StudySpec(model="T-145B", hardware="wafer", trials=budget, seed=seed, fidelity=fidelity)
            values, wall = run(spec, jobs)
            rows.append(row("default", "screen + 50" if fidelity == "screen" else f"tpe ({trials})", seed, values,
                            wall, optimum))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--trials", type=int, default=300, help="TPE trials per seed on the default space")
    parser.add_argument("--vb-trials", type=int, default=60, help="trials per seed on the PALM §V-B space")
    parser.add_argument("--default-optimum", type=float, default=0.4042, help="samples/s of the default optimum")
    parser.add_argument("--spaces", nargs="+", default=["vb", "default"], choices=["vb", "default"])
    args = parser.parse_args()
    rows = []
    if "vb" in args.spaces:
        rows += vb_rows(args.seeds, args.vb_trials, args.jobs)
    if "default" in args.spaces:
        rows += default_rows(args.seeds, args.trials, args.jobs, args.default_optimum)
    table = pd.DataFrame(rows)
    print(table.to_string(index=False, float_format=lambda x: f"{x:.4g}"))
    for (space, sampler), group in table.groupby(["space", "sampler"]):
        hits = (group.best_over_optimum >= 0.99).sum()
        print(f"{space} {sampler}: within 1% of the optimum in {hits} of {len(group)} runs, "
              f"median best/optimum {group.best_over_optimum.median():.4f}, median wall {group.wall_s.median():.1f} s")


if __name__ == "__main__":
    main()
