"""Screening fidelity: does the closed-form ``estimate`` rank mappings as the simulation does?

Draws ``--points`` mappings at random (seeded) from the default space of
``palm-search optimize --model T-145B --hw wafer`` (every point fits memory: the space is
pre-screened), evaluates each with ``estimate`` and with the event-driven backends, and prints
the Spearman rank correlation of samples/s between them, the median ratio, where the
simulation's best point ranks under the estimate, and the time per evaluation.

With ``--certify MARGIN`` it then estimates every point and simulates (sharing) every point
whose estimate is within MARGIN of the best estimate: the best of those is the space's optimum
unless a simulation exceeds its estimate by more than MARGIN, which the random draw measures
(``simulated / estimate`` at most ...); it prints that optimum and its rank under the estimate.

Usage: ``python benchmarks/fidelity.py [--points 200] [--seed 0] [--jobs 2] [--certify 0.05]``.
"""

from __future__ import annotations

import argparse
import random
import time

import pandas as pd
from joblib import Parallel, delayed
from optuna.trial import FixedTrial

from palm_search.search.screen import SCREEN_LIMIT, spearman, start_screen
from palm_search.search.space import DegreeWalk, candidate_builder, enumerate_candidates
from palm_search.search.study import StudySpec
from simulator import load_hardware, load_model, simulate

NETWORKS = ("estimate", "sharing", "contention")


def evaluate(params: dict) -> dict:
    """Samples/s and seconds per evaluation of one point under every network."""
    model, hardware = load_model("T-145B"), load_hardware("wafer")
    strategy = candidate_builder(SPEC, model, hardware)(FixedTrial(params)).strategy
    out: dict = {}
    for network in NETWORKS:
        started = time.process_time()
        out[network] = simulate(model, hardware, strategy, network=network).samples_per_s
        out[f"{network}_s"] = time.process_time() - started
    return out


SPEC = StudySpec(model="T-145B", hardware="wafer")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--points", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--certify", type=float, default=0.0, help="margin (e.g. 0.05); 0: skip")
    args = parser.parse_args()
    build = candidate_builder(SPEC, load_model("T-145B"), load_hardware("wafer"))
    walk = enumerate_candidates(build, limit=1_000_000) or []
    points = [params for params, _ in walk]
    chosen = random.Random(args.seed).sample(points, min(args.points, len(points)))
    rows = pd.DataFrame(Parallel(n_jobs=args.jobs)(delayed(evaluate)(p) for p in chosen))
    print(f"default space: {len(points)} points fit memory; {len(rows)} drawn (seed {args.seed})")
    for network in NETWORKS[1:]:
        ratio = (rows["estimate"] / rows[network]).median()
        best = rows[network].idxmax()
        rank = int(rows["estimate"].rank(ascending=False)[best])
        over = (rows[network] / rows["estimate"]).max()
        print(f"estimate vs {network}: Spearman {spearman(rows['estimate'], rows[network]):.3f}, median"
              f" estimate/{network} {ratio:.3f}, {network}/estimate at most {over:.4f}, {network}'s best"
              f" ranks {rank} of {len(rows)} by estimate")
    times = {n: rows[f"{n}_s"].median() * 1e3 for n in NETWORKS}
    print("median CPU per evaluation: " + ", ".join(f"{n} {t:.1f} ms" for n, t in times.items()))
    if args.certify:
        certify(args.certify, args.jobs)


def certify(margin: float, jobs: int) -> None:
    """Screen the default space as ``optimize`` does (its walk's blocks) and simulate every point
    whose estimate is within ``margin`` of the best estimate."""
    model, hardware = load_model("T-145B"), load_hardware("wafer")
    screening = start_screen(model, DegreeWalk(SPEC, model, hardware).blocks(), SCREEN_LIMIT, jobs)
    assert screening is not None  # the default space is under the screen's limits
    ranked, seconds = screening.ranked()
    top = ranked[0][1]
    near = ranked[:int((ranked.values >= (1 - margin) * top).sum())]
    simulated = Parallel(n_jobs=jobs)(delayed(evaluate)(p) for p, _ in near)
    best = max(range(len(near)), key=lambda i: simulated[i]["sharing"])
    print(f"certify: {len(ranked)} points estimated in {seconds:.1f} s; {len(near)} within {margin:.0%} of the"
          f" best estimate ({top:.4f}) simulated: optimum {simulated[best]['sharing']:.4f} samples/s, rank"
          f" {best + 1} by estimate: {near[best][0]}")


if __name__ == "__main__":
    main()
