"""Multi-fidelity search: screen every point of the space cheaply, simulate the most promising.

With ``fidelity = "screen"`` (the default when the sampler is ``auto`` and the space has more
points than the budget but at most :data:`SCREEN_LIMIT`), every point that fits memory is
evaluated with the closed-form ``estimate`` (:meth:`simulator.engine.Engine.estimate`: no events;
a task's points together, :func:`simulator.estimate_many`), the points are ranked by estimated
throughput, and the best ``trials - 1`` are queued in that order for the study's event-driven
network: the trial budget counts simulations. This is successive halving with two rungs
(Jamieson and Talwalkar, AISTATS 2016; Li et al., Hyperband, JMLR 2018), the cheap rung covering
the whole space, so the answer does not depend on the seed or on the number of workers.

Each simulated trial keeps its estimate (user attribute ``screen_samples_per_s``), and
:func:`rank_agreement` gives the Spearman rank correlation between the two fidelities on the
run's own trials, how far apart those trials' simulations are and the largest gap between an
estimate and its simulation, so a user sees when the screen misleads.
"""

from __future__ import annotations

import heapq
import math
import queue
import threading
import time
import warnings
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from itertools import count, groupby
from typing import Any

import optuna
import pandas as pd
from joblib import Parallel, delayed
from optuna.trial import TrialState

from palm_search.search.evaluate import ServingTarget, estimate_points
from simulator import ModelSpec
from spaces import Candidate, ParallelDegrees, placement_key

SCREEN_LIMIT = 60_000
"""Most points a screen estimates; a larger space is searched by TPE. The default space (T-145B on
the wafer, 11,268 points) is walked and estimated in about 10 s on 2 cores (0.9 ms a point, most
of it each placement's flows built once; ``benchmarks/datacenter_scale.py``), so a screen at the
limit takes about a minute, as one of 20,000 points did at the former 2-3 ms a point."""
ESTIMATE_KEY = "screen_samples_per_s"
"""The user attribute holding a trial's estimated samples/s."""
_TASK_POINTS = 400
"""Most points per worker task (a task's overhead is a few ms, its points' estimates 0.1-1 ms each)."""


@dataclass
class Screening:
    """The screen of a walk: its points in the walk's order, the walk's positions in each worker
    task, and the tasks' estimates while the workers compute them (None when nothing is estimated:
    a resumed study queued its points already)."""

    points: list[dict]
    chunks: list[list[int]]
    running: Iterator[list[float]] | None
    started_s: float
    done: tuple[list[tuple[dict, float]], float] | None = None

    def ranked(self) -> tuple[list[tuple[dict, float]], float]:
        """Every point with its estimate, best first (ties in the walk's order), and the wall time
        of the walk and the estimates (s); the estimates are collected once."""
        if self.done is None:
            self.done = self._ranked()
        return self.done

    def _ranked(self) -> tuple[list[tuple[dict, float]], float]:
        values = [0.0] * len(self.points)
        for chunk, chunk_values in zip(self.chunks, self.running or (), strict=True):
            for i, value in zip(chunk, chunk_values, strict=True):
                values[i] = value
        order = sorted(range(len(self.points)), key=lambda i: -values[i])
        return [(self.points[i], values[i]) for i in order], time.perf_counter() - self.started_s


def start_screen(model: ModelSpec, walk: Iterable[tuple[dict, Candidate]], limit: int, jobs: int,
                 backend: str | None = None, target: ServingTarget | None = None) -> Screening | None:
    """Start estimating every point of the ``walk`` (its parameters and the candidate they build)
    on ``jobs`` workers while the walk goes on, or None when it has more than ``limit`` points.

    A thread walks and queues each task as soon as it is made; joblib sends a task whenever a
    worker is free, :data:`_AHEAD` per worker ahead, so past the limit at most that many tasks are
    left to finish (and none to abort). With one job the walk is made first (nothing overlaps).

    Raises:
        Exception: what the walk raised (InputError excepted: the walk skips such points).
    """
    started, points, chunks = time.perf_counter(), [], []
    over = False

    def numbered() -> Iterator[tuple[int, dict, Candidate]]:
        nonlocal over
        for params, candidate in walk:
            if len(points) == limit:
                over = True
                return
            points.append(params)
            yield len(points) - 1, params, candidate

    def tasks() -> Iterator[tuple[list[int], Any]]:
        for chunk in _chunks(numbered()):
            plans = [(c.hardware, c.strategy) for _, _, c in chunk]
            yield [i for i, _, _ in chunk], delayed(estimate_points)(model, plans, target)

    if jobs == 1:
        made = list(tasks())
        chunks.extend(positions for positions, _ in made)
        running = Parallel(n_jobs=1, return_as="generator")(task for _, task in made)
        return None if over else Screening(points, chunks, running, started)
    queued: queue.Queue = queue.Queue()
    walker = _Walker(tasks(), queued)
    walker.start()
    running = Parallel(n_jobs=jobs, backend=backend, return_as="generator", batch_size=1,
                       pre_dispatch=f"{_AHEAD}*n_jobs")(_largest_first(queued, chunks))
    walker.join()
    if walker.error is not None or over:
        list(running)  # the few tasks sent finish; nothing is aborted
    if walker.error is not None:
        raise walker.error
    return None if over else Screening(points, chunks, running, started)


_AHEAD = 2
"""Tasks sent ahead per worker while the walk goes on."""


def _largest_first(queued: queue.Queue, chunks: list[list[int]]) -> Iterator[Any]:
    """The walk's tasks, each as joblib asks for the next: of those the walk has made and not yet
    sent, the one with the most points (longest processing time first, Graham, SIAM J. Appl.
    Math. 1969; ties in the walk's order), so the screen ends on its smallest tasks and no worker
    waits long for the other's last one. Each task's walk positions go to ``chunks`` in the
    order sent, which is the order joblib returns the results in."""
    pending: list[tuple[int, int, list[int], Any]] = []
    received, walking = count(), True
    while walking or pending:
        try:
            while walking:
                item = queued.get(block=not pending)
                if item is _END:
                    walking = False
                else:
                    heapq.heappush(pending, (-len(item[0]), next(received), *item))
        except queue.Empty:
            pass
        if pending:
            _, _, positions, task = heapq.heappop(pending)
            chunks.append(positions)
            yield task


_END = object()
"""Marks the end of the walk's tasks in the queue."""

# joblib's note when a screen under way is dropped (Ctrl-C): its tasks are meant to go unused
warnings.filterwarnings("ignore", category=UserWarning,
                        message=r"\d+ tasks (have been successfully executed|which were still being processed)")


class _Walker(threading.Thread):
    """Puts the ``tasks`` the walk makes in the ``queued`` queue, then :data:`_END`; keeps the
    walk's exception, if any, in ``error``."""

    def __init__(self, tasks: Iterator[Any], queued: queue.Queue) -> None:
        super().__init__(name="screen-walk", daemon=True)
        self.tasks, self.queued = tasks, queued
        self.error: Exception | None = None

    def run(self) -> None:
        try:
            for task in self.tasks:
                self.queued.put(task)
        except Exception as error:  # noqa: BLE001 - raised again in the caller's thread
            self.error = error
        finally:
            self.queued.put(_END)


def _chunks(walk: Iterable[tuple[int, dict, Candidate]]) -> Iterator[list[tuple[int, dict, Candidate]]]:
    """The walk's numbered points in worker tasks: each set of parallel degrees (consecutive in a
    walk, whose first choice they are) is one task, or pieces of equal size when it has more than
    :data:`_TASK_POINTS` points, sorted by placement (each worker builds a plan's stage costs and a
    placement's flows once). Sets are not merged: the small ones end the screen (they are sent
    last, :func:`_largest_first`)."""
    for _, same in groupby(walk, key=lambda point: ParallelDegrees.of(point[2].strategy)):
        points = sorted(same, key=lambda point: placement_key(point[1]))
        size = math.ceil(len(points) / math.ceil(len(points) / _TASK_POINTS))
        for start in range(0, len(points), size):
            yield points[start:start + size]


def enqueue_screened(study: optuna.Study, ranked: list[tuple[dict, float]], count: int,
                     seconds: float) -> None:
    """Queue the ``count`` best screened points with a positive estimate, each with its
    estimate, and note the screen in the study's ``screen`` attribute with its ``margin``
    (:func:`certified_margin`)."""
    positive = [(params, value) for params, value in ranked if value > 0]
    best = positive[:count]
    for params, value in best:
        study.enqueue_trial(params, user_attrs={ESTIMATE_KEY: value})
    study.set_user_attr("screen", {"points": len(ranked), "queued": len(best), "seconds": seconds,
                                   "margin": certified_margin([v for _, v in best], [v for _, v in positive[count:]])})


def certified_margin(queued: list[float], left: list[float]) -> float:
    """The margin below the best estimate within which every point is queued: ``1 - l / b``
    with ``b`` the best estimate and ``l`` the best of those ``left`` out (1 when none is left:
    every point with a positive estimate is queued; 0 when nothing is queued). Once the queued
    points are simulated, every point whose estimate is within that fraction of the best was
    simulated (the certificate of ``benchmarks/fidelity.py --certify``, for this run's budget)."""
    if not queued:
        return 0.0
    top = max(queued + left)
    return 1.0 - max(left) / top if left else 1.0


def serving_front_first(ranked: list[tuple[dict, float]]) -> list[tuple[dict, float]]:
    """Serving points (parameters with ``users``, estimated system tokens/s) in non-dominated
    layers of (system tokens/s, tokens/s per user = tokens/s / users), the Pareto front of the
    estimates first (Deb et al., NSGA-II, IEEE TEC 2002: non-dominated sorting; two objectives,
    so each layer is one sweep), each layer by tokens/s: a budget smaller than the space then
    simulates the estimated front across all numbers of users, not only the highest tokens/s."""
    left = [(params, value) for params, value in ranked if value > 0]
    layers: list[tuple[dict, float]] = []
    while left:
        front, rest, best_per_user = [], [], -1.0
        for params, value in sorted(left, key=lambda p: (-p[1], -p[1] / p[0]["users"])):
            per_user = value / params["users"]
            (front if per_user > best_per_user else rest).append((params, value))
            best_per_user = max(best_per_user, per_user)
        layers += front
        left = rest
    return layers + [(params, value) for params, value in ranked if value <= 0]


@dataclass(frozen=True)
class RankAgreement:
    """How the screen's estimates compare with the simulations of the same trials.

    Attributes:
        spearman: Spearman's rank correlation between estimated and simulated samples/s; None
            when it is undefined (the estimates, or the simulations, all tie).
        compared: trials compared.
        simulated_span: (largest - smallest) / largest of the simulated samples/s: how far apart
            the compared trials are (ranks among trials a fraction of a percent apart are
            near-ties, and a low ``spearman`` among them says little).
        largest_gap: largest ``|estimate / simulated - 1|`` of a trial.
    """

    spearman: float | None
    compared: int
    simulated_span: float
    largest_gap: float


def rank_agreement(trials: list[optuna.trial.FrozenTrial]) -> RankAgreement | None:
    """The screen's agreement with the simulations over the feasible completed trials that have
    both an estimate and a positive simulated samples/s; None with fewer than 3."""
    pairs = [(t.user_attrs[ESTIMATE_KEY], t.user_attrs.get("samples_per_s", 0.0)) for t in trials
             if t.state == TrialState.COMPLETE and ESTIMATE_KEY in t.user_attrs and t.user_attrs.get("feasible")
             and t.user_attrs.get("samples_per_s", 0.0) > 0]
    if len(pairs) < 3:
        return None
    frame = pd.DataFrame(pairs, columns=["estimate", "simulated"])
    estimate, simulated = frame["estimate"], frame["simulated"]
    rho = spearman(estimate, simulated)
    return RankAgreement(spearman=None if math.isnan(rho) else rho, compared=len(pairs),
                         simulated_span=float(1 - simulated.min() / simulated.max()),
                         largest_gap=float((estimate / simulated - 1).abs().max()))


def spearman(a: pd.Series, b: pd.Series) -> float:
    """Spearman's rank correlation: Pearson's on the ranks, ties averaged (no SciPy needed); NaN
    when either series is constant (its ranks have no variance)."""
    rho: Any = a.rank().corr(b.rank())
    return float(rho)
