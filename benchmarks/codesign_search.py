"""Co-design search against exhaustive enumeration, on hardware spaces small enough to enumerate.

For each seed, a hardware space is drawn around a 2 x 2-die wafer (``wafer-tiled`` cut to 64
cores): three SRAM sizes, three matrix-engine peaks and two DRAM bandwidths per die, 18 chips under
the base chip's area and power (TSMC N7 file). Two models (T-1.7B, T-3.6B) are mapped on each
(degrees x recompute; the mapping space of each chip and model is enumerated).

* **exhaustive**: every mapping of every chip within the budgets is simulated event-driven; the
  optimum is the chip with the best mean over the models of each one's best samples/s (PHAZE).
* **codesign**: ``palm-search codesign``'s search (every chip screened in closed form, the best
  ``--trials`` chips' best ``--refine`` mappings per model simulated). It draws nothing at random.
* **sampled**: the same with a sampled screen (``screen_chips``: multivariate TPE seeded with the
  seed proposes chips until ``--screen-share`` (default half) of the chips within the budgets had
  their mappings screened; chips over a budget cost nothing and do not count).

Printed per seed: hardware x mapping points, the exhaustive optimum, what each search found,
whether it is the optimum (its mean samples/s equal to the optimum's), and the simulations it
spent as a share of the points. Each seed draws a different space.

Usage: ``python benchmarks/codesign_search.py [--seeds 10] [--jobs 2] [--trials 4] [--refine 2]
[--screen-share 0.5]``.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd
from joblib import Parallel, delayed

from palm_search.codesign.evaluate import chip_space, simulate_mapping, simulated_samples_per_s
from palm_search.codesign.search import run_codesign
from palm_search.codesign.spec import CodesignSpec
from palm_search.search.space import candidate_builder, enumerate_candidates
from simulator import InputError, hardware_to_toml, load_hardware, load_model
from spaces.hardware import HardwareSpace, build_hardware

MODELS = ("T-1.7B", "T-3.6B")
SRAM_MB = (1.0, 1.875, 2.5, 3.75, 5.0, 7.5)
TFLOP_PER_S = (4, 8, 12, 16, 24, 32)
DRAM_GB_PER_S = (64, 128, 256, 512)


def base_file(directory: Path) -> Path:
    """The 2 x 2-die wafer the spaces are drawn around, as a hardware file."""
    tiled = load_hardware(str(Path(__file__).resolve().parents[1] / "studies" / "hardware" / "wafer-tiled.toml"))
    small = build_hardware(HardwareSpace(tiled, {"dies": ("2x2",)}), {"hw.dies": "2x2"})
    path = directory / "wafer-2x2.toml"
    path.write_text(hardware_to_toml(small))
    return path


def drawn_spec(seed: int, base: Path, trials: int, refine: int) -> CodesignSpec:
    """The co-design study of ``seed``'s space."""
    rng = np.random.default_rng(seed)
    def pick(values: tuple, k: int) -> tuple:
        return tuple(sorted(rng.choice(values, size=k, replace=False).tolist()))
    choices = {"sram_MB_per_core": pick(SRAM_MB, 3), "TFLOP_per_s_per_core": pick(TFLOP_PER_S, 3),
               "dram_bandwidth_GB_per_s": pick(DRAM_GB_PER_S, 2)}
    return CodesignSpec(models=MODELS, hardware=str(base), hardware_choices=choices, trials=trials, refine=refine,
                        searched=("degrees", "recompute"), microbatch_sizes=(1,),
                        fixed={"placement": "s-shape", "optimizer": "adam", "precision": "fp16"})


def exhaustive(spec: CodesignSpec, feasible: list[dict], jobs: int) -> tuple[float, int]:
    """The optimum (mean samples/s) over the ``feasible`` chips with every mapping simulated, and
    the hardware x mapping points."""
    tasks = []
    for i, params in enumerate(feasible):
        hardware = build_hardware(chip_space(spec), params)
        for name in spec.models:
            try:
                walk = enumerate_candidates(candidate_builder(spec.mapping_spec(name), load_model(name), hardware),
                                            100_000) or []
            except InputError:
                walk = []
            tasks += [(i, name, candidate.strategy.to_dict()) for _, candidate in walk]
    records = Parallel(n_jobs=jobs)(delayed(simulate_mapping)(spec, feasible[i], name, s) for i, name, s in tasks)
    best: dict[tuple[int, str], float] = {}
    for (i, name, _), record in zip(tasks, records, strict=True):
        best[(i, name)] = max(best.get((i, name), 0.0), simulated_samples_per_s(record))
    scores = [np.mean([best.get((i, n), 0.0) for n in spec.models]) if all(best.get((i, n)) for n in spec.models)
              else 0.0 for i in range(len(feasible))]
    return float(max(scores, default=0.0)), len(tasks)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--trials", type=int, default=4, help="chips refined by the search")
    parser.add_argument("--refine", type=int, default=2, help="mappings simulated per model and refined chip")
    parser.add_argument("--screen-share", type=float, default=0.5,
                        help="share of the chips within the budgets that the sampled search screens")
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as directory:
        base = base_file(Path(directory))
        for seed in range(args.seeds):
            spec = drawn_spec(seed, base, args.trials, args.refine)
            started = time.perf_counter()
            run = run_codesign(spec, args.jobs)
            search_s = time.perf_counter() - started
            in_budget = sum(not c.screen.reason.startswith(("area", "power")) for c in run.chips)
            sample = max(1, round(args.screen_share * in_budget))
            sampled = run_codesign(spec.replace(screen_chips=sample, seed=seed), args.jobs)
            feasible = [c.screen.params for c in run.chips if not c.screen.reason.startswith(("area", "power"))]
            started = time.perf_counter()
            optimum, points = exhaustive(spec, feasible, args.jobs)
            best, sampled_best = run.best(), sampled.best()
            found = best.samples_per_s if best else 0.0
            sampled_found = sampled_best.samples_per_s if sampled_best else 0.0
            rows.append({"seed": seed, "chips": len(run.chips), "in budget": len(feasible), "points": points,
                         "optimum": optimum, "found": found, "found/optimum": found / optimum if optimum else 0.0,
                         "hit": found >= optimum * (1 - 1e-9), "simulations": run.simulations,
                         "simulated share": run.simulations / points if points else 0.0,
                         "search s": search_s, "exhaustive s": time.perf_counter() - started,
                         "sampled hit": sampled_found >= optimum * (1 - 1e-9),
                         "sampled simulations": sampled.simulations})
            row = rows[-1]
            print(f"seed {seed}: {row['in budget']} of {row['chips']} chips in budget, {points} points;"
                  f" optimum {optimum:.4g}, found {found:.4g} ({'hit' if row['hit'] else 'MISS'}) with"
                  f" {run.simulations} simulations ({row['simulated share']:.1%}); search {search_s:.1f} s,"
                  f" exhaustive {row['exhaustive s']:.1f} s; sampled screen of {sample} chips:"
                  f" {sampled_found:.4g} ({'hit' if row['sampled hit'] else 'MISS'}) with"
                  f" {sampled.simulations} simulations", flush=True)
    frame = pd.DataFrame(rows)
    print(f"\noptimum found in {int(frame['hit'].sum())} of {len(frame)} spaces; simulations "
          f"{frame['simulations'].mean():.0f} per space ({frame['simulated share'].mean():.1%} of "
          f"{frame['points'].mean():.0f} hardware x mapping points on average, max"
          f" {frame['simulated share'].max():.1%});"
          f" search {frame['search s'].mean():.1f} s vs exhaustive {frame['exhaustive s'].mean():.1f} s per space")
    print(f"sampled screen of {args.screen_share:.0%} of the chips in budget: optimum found in"
          f" {int(frame['sampled hit'].sum())} of"
          f" {len(frame)} spaces, {frame['sampled simulations'].mean():.0f} simulations per space")


if __name__ == "__main__":
    main()
