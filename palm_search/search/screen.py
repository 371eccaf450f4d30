"""Multi-fidelity search: screen every point of the space cheaply, simulate the most promising.

With ``fidelity = "screen"`` (the default when the sampler is ``auto`` and the space has more
points than the budget but at most :data:`SCREEN_LIMIT`), every point that fits memory is
evaluated with the closed-form ``estimate`` (:meth:`simulator.engine.Engine.estimate`: no events,
a few ms), the points are ranked by estimated throughput, and the best ``trials - 1`` are
queued in that order for the study's event-driven network: the trial budget counts
simulations. This is successive halving with two rungs (Jamieson and Talwalkar, AISTATS 2016;
Li et al., Hyperband, JMLR 2018), the cheap rung covering the whole space, so the answer does
not depend on the seed or on the number of workers.

Each simulated trial keeps its estimate (user attribute ``screen_samples_per_s``), and
:func:`rank_agreement` gives the Spearman rank correlation between the two fidelities on the
run's own trials, so a user sees when the screen misleads.
"""

from __future__ import annotations

import time
from typing import Any

import optuna
import pandas as pd
from joblib import Parallel, delayed
from optuna.trial import TrialState

from palm_search.search.evaluate import estimate_points
from simulator import ModelSpec
from spaces import Candidate, placement_key

SCREEN_LIMIT = 20_000
"""Most points a screen estimates (about 2-3 ms each); a larger space is searched by TPE."""
ESTIMATE_KEY = "screen_samples_per_s"
"""The user attribute holding a trial's estimated samples/s."""
_CHUNK = 200
"""Points per worker task (a task's overhead is about one estimate)."""


def screen(model: ModelSpec, walk: list[tuple[dict, Candidate]], jobs: int,
           backend: str | None = None) -> tuple[list[tuple[dict, float]], float]:
    """Every point of the ``walk`` (its parameters and the candidate they build) with its
    estimate, best first (ties in the walk's order), and the wall time (s)."""
    started = time.perf_counter()
    points = [params for params, _ in walk]
    chunks = _chunks(walk)
    estimated = Parallel(n_jobs=jobs, backend=backend)(
        delayed(estimate_points)(model, [(walk[i][1].hardware, walk[i][1].strategy) for i in chunk])
        for chunk in chunks)
    values = [0.0] * len(points)
    for chunk, chunk_values in zip(chunks, estimated, strict=True):
        for i, value in zip(chunk, chunk_values, strict=True):
            values[i] = value
    order = sorted(range(len(points)), key=lambda i: -values[i])
    return [(points[i], values[i]) for i in order], time.perf_counter() - started


def _chunks(walk: list[tuple[dict, Candidate]]) -> list[list[int]]:
    """The walk's positions in worker tasks of about :data:`_CHUNK` points: those of one set of
    parallel degrees in one task where they fit in twice that (each worker builds a plan's stage
    costs and a placement's flows once), placements kept together."""
    def degrees(i: int) -> tuple[int, ...]:
        strategy = walk[i][1].strategy
        return strategy.tp, strategy.pp, strategy.dp, strategy.cp

    grouped = sorted(range(len(walk)), key=lambda i: (degrees(i), placement_key(walk[i][0])))
    chunks: list[list[int]] = [[]]
    for i in grouped:
        current = chunks[-1]
        if len(current) >= 2 * _CHUNK or (len(current) >= _CHUNK and degrees(i) != degrees(current[-1])):
            chunks.append(current := [])
        current.append(i)
    return [chunk for chunk in chunks if chunk]


def enqueue_screened(study: optuna.Study, ranked: list[tuple[dict, float]], count: int,
                     seconds: float) -> None:
    """Queue the ``count`` best screened points with a positive estimate, each with its
    estimate, and note the screen in the study's ``screen`` attribute."""
    best = [(params, value) for params, value in ranked if value > 0][:count]
    for params, value in best:
        study.enqueue_trial(params, user_attrs={ESTIMATE_KEY: value})
    study.set_user_attr("screen", {"points": len(ranked), "queued": len(best), "seconds": seconds})


def rank_agreement(trials: list[optuna.trial.FrozenTrial]) -> tuple[float, int] | None:
    """Spearman's rank correlation between estimated and simulated samples/s over the feasible
    completed trials that have both, and their number; None with fewer than 3."""
    pairs = [(t.user_attrs[ESTIMATE_KEY], t.user_attrs.get("samples_per_s", 0.0)) for t in trials
             if t.state == TrialState.COMPLETE and ESTIMATE_KEY in t.user_attrs and t.user_attrs.get("feasible")]
    if len(pairs) < 3:
        return None
    frame = pd.DataFrame(pairs, columns=["estimate", "simulated"])
    return spearman(frame["estimate"], frame["simulated"]), len(pairs)


def spearman(a: pd.Series, b: pd.Series) -> float:
    """Spearman's rank correlation: Pearson's on the ranks, ties averaged (no SciPy needed)."""
    rho: Any = a.rank().corr(b.rank())
    return float(rho)
