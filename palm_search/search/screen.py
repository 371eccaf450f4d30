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
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from itertools import count
from typing import Any, NamedTuple, overload

import numpy as np
import optuna
import pandas as pd
from joblib import Parallel, delayed
from optuna.trial import TrialState

from palm_search.search.evaluate import ServingTarget, estimate_block
from palm_search.search.space import Block
from simulator import MEGATRON_CORE, ModelSpec, Stack

SCREEN_LIMIT = 2_000_000
"""Most points a screen estimates; a larger space is searched by TPE. The walk hands the workers
each set of degrees as its plans and layouts (:class:`~palm_search.search.space.Block`), not a
strategy per point, and the workers estimate their product as arrays
(:func:`simulator.estimate_product`): a point costs tens of microseconds once its plan and
placement are built (``benchmarks/datacenter_scale.py`` screens a real space of 1.2 million
points); the limit bounds the screen's memory (a float and an index per point)."""
SCREEN_PLANS = 40_000
"""Most plans (points but for their layout) a screen estimates; a space with more is searched by
TPE. Each plan's stage costs take 1-4 ms to build (a placement's flows 5-50 ms), whatever the
number of its points: 40,000 plans are one to two minutes on 2 cores, and a space of a point per
plan (Qwen3-30B-A3B on 1,024 H100s: 364,000) is left to the sampler."""
ESTIMATE_KEY = "screen_samples_per_s"
"""The user attribute holding a trial's estimated samples/s."""
_TASK_POINTS = 20_000
"""Most points per worker task (a task's overhead is a few ms, a point's estimate tens of us once
its plan and placement are built)."""
_TASK_PLANS = 400
"""Most plans per worker task (a plan's stage costs take 1-4 ms): a task lasts at most a second or
two, and a walk past the limits leaves little to finish."""


class Piece(NamedTuple):
    """A worker task's part of a walk: block ``block``'s plans ``plans`` under its layouts
    ``layouts`` (slices)."""

    block: int
    plans: slice
    layouts: slice

    @property
    def size(self) -> int:
        return (self.plans.stop - self.plans.start) * (self.layouts.stop - self.layouts.start)


class Ranked(Sequence[tuple[dict, float]]):
    """A screen's points with their estimates, best first (ties in the walk's order), each
    point's parameters made when asked for (a screen may hold millions).

    Attributes:
        values: the estimates in that order (``[points]``).
    """

    def __init__(self, blocks: list[Block], order: np.ndarray, values: np.ndarray) -> None:
        self.blocks, self.order, self.values = blocks, order, values
        self.starts = np.cumsum([0] + [len(b) for b in blocks])

    def __len__(self) -> int:
        return len(self.order)

    @overload
    def __getitem__(self, k: int) -> tuple[dict, float]: ...

    @overload
    def __getitem__(self, k: slice) -> list[tuple[dict, float]]: ...

    def __getitem__(self, k: int | slice) -> tuple[dict, float] | list[tuple[dict, float]]:
        if isinstance(k, slice):
            return [self[i] for i in range(*k.indices(len(self)))]
        if not -len(self) <= k < len(self):
            raise IndexError(k)
        point = int(self.order[k])
        b = int(np.searchsorted(self.starts, point, side="right")) - 1
        return self.blocks[b].params(point - int(self.starts[b])), float(self.values[k])

    def positive(self) -> int:
        """How many points have a positive estimate (the first ones)."""
        return int(np.count_nonzero(self.values > 0))


@dataclass
class Screening:
    """The screen of a walk: its blocks of points in the walk's order, each worker task's part of
    them, and the tasks' estimates while the workers compute them (None when nothing is
    estimated: a resumed study queued its points already)."""

    blocks: list[Block]
    pieces: list[Piece]
    running: Iterator[np.ndarray] | None
    started_s: float
    done: tuple[Ranked, float] | None = None
    on_progress: Callable[[int, int], None] | None = None
    """Called as the estimates come in with the points estimated and those walked so far (the
    walk may still be going on)."""

    @property
    def points(self) -> int:
        return sum(len(b) for b in self.blocks)

    def ranked(self) -> tuple[Ranked, float]:
        """Every point with its estimate, best first (ties in the walk's order), and the wall time
        of the walk and the estimates (s); the estimates are collected once."""
        if self.done is None:
            self.done = self._ranked()
        return self.done

    def _ranked(self) -> tuple[Ranked, float]:
        starts = np.cumsum([0] + [len(b) for b in self.blocks])
        values = np.zeros(int(starts[-1]))
        estimated = 0
        for piece, piece_values in zip(self.pieces, self.running or (), strict=True):
            width = len(self.blocks[piece.block].layouts)
            rows = np.arange(piece.plans.start, piece.plans.stop)[:, None] * width
            positions = starts[piece.block] + rows + np.arange(piece.layouts.start, piece.layouts.stop)[None, :]
            values[positions.reshape(-1)] = piece_values.reshape(-1)
            estimated += piece.size
            if self.on_progress is not None:
                self.on_progress(estimated, int(starts[-1]))
        order = np.argsort(-values, kind="stable")
        return Ranked(self.blocks, order, values[order]), time.perf_counter() - self.started_s


def start_screen(model: ModelSpec, blocks: Iterable[Block], limit: int, jobs: int,
                 backend: str | None = None, target: ServingTarget | None = None,
                 stack: Stack = MEGATRON_CORE) -> Screening | None:
    """Start estimating every point of the walk's ``blocks`` under the study's ``stack`` on
    ``jobs`` workers while the walk goes on, or None when it has more than ``limit`` points or
    :data:`SCREEN_PLANS` plans.

    A thread walks and queues each task as soon as it is made; joblib sends a task whenever a
    worker is free, :data:`_AHEAD` per worker ahead, so past the limit at most that many tasks are
    left to finish (and none to abort). With one job the walk is made first (nothing overlaps).

    Raises:
        Exception: what the walk raised (InputError excepted: the walk skips such points).
    """
    started, walked, pieces = time.perf_counter(), [], []
    over = False

    def tasks() -> Iterator[tuple[Piece, Any]]:
        nonlocal over
        points = planned = 0
        for block in blocks:
            points, planned = points + len(block), planned + len(block.plans)
            if points > limit or planned > SCREEN_PLANS:
                over = True
                return
            walked.append(block)
            for piece in _pieces(len(walked) - 1, len(block.plans), len(block.layouts)):
                plans = [strategy for _, strategy in block.plans[piece.plans]]
                layouts = [values for _, values in block.layouts[piece.layouts]]
                yield piece, delayed(estimate_block)(model, block.hardware, plans, layouts, target, stack)

    if jobs == 1:
        made = list(tasks())
        pieces.extend(piece for piece, _ in made)
        running = Parallel(n_jobs=1, return_as="generator")(task for _, task in made)
        return None if over else Screening(walked, pieces, running, started)
    queued: queue.Queue = queue.Queue()
    walker = _Walker(tasks(), queued)
    walker.start()
    running = Parallel(n_jobs=jobs, backend=backend, return_as="generator", batch_size=1,
                       pre_dispatch=f"{_AHEAD}*n_jobs")(_largest_first(queued, pieces))
    walker.join()
    if walker.error is not None or over:
        list(running)  # the few tasks sent finish; nothing is aborted
    if walker.error is not None:
        raise walker.error
    return None if over else Screening(walked, pieces, running, started)


_AHEAD = 2
"""Tasks sent ahead per worker while the walk goes on."""


def _largest_first(queued: queue.Queue, pieces: list[Piece]) -> Iterator[Any]:
    """The walk's tasks, each as joblib asks for the next: of those the walk has made and not yet
    sent, the one with the most points (longest processing time first, Graham, SIAM J. Appl.
    Math. 1969; ties in the walk's order), so the screen ends on its smallest tasks and no worker
    waits long for the other's last one. Each task's piece goes to ``pieces`` in the order sent,
    which is the order joblib returns the results in."""
    pending: list[tuple[int, int, Piece, Any]] = []
    received, walking = count(), True
    while walking or pending:
        try:
            while walking:
                item = queued.get(block=not pending)
                if item is _END:
                    walking = False
                else:
                    heapq.heappush(pending, (-item[0].size, next(received), *item))
        except queue.Empty:
            pass
        if pending:
            _, _, piece, task = heapq.heappop(pending)
            pieces.append(piece)
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


def _pieces(block: int, plans: int, layouts: int) -> Iterator[Piece]:
    """Block ``block`` (``plans`` x ``layouts`` points) in worker tasks of at most
    :data:`_TASK_POINTS` points and :data:`_TASK_PLANS` plans, of even sizes: all its plans under
    a slice of its layouts (each placement's flows are then built by one worker), slices of its
    plans too when its plans alone exceed a task. Blocks are not merged: the small ones end the
    screen (they are sent last, :func:`_largest_first`)."""
    rows = _even(plans, _TASK_PLANS)
    columns = _even(layouts, max(_TASK_POINTS // rows, 1))
    for first_layout in range(0, layouts, columns):
        for first_plan in range(0, plans, rows):
            yield Piece(block, slice(first_plan, min(first_plan + rows, plans)),
                        slice(first_layout, min(first_layout + columns, layouts)))


def _even(n: int, most: int) -> int:
    """The size of the fewest equal pieces of at most ``most`` that cut ``n``."""
    return math.ceil(n / math.ceil(n / most))


def enqueue_screened(study: optuna.Study, ranked: Sequence[tuple[dict, float]], count: int,
                     seconds: float) -> None:
    """Queue the first ``count`` screened points with a positive estimate (``ranked``'s order),
    each with its estimate, and note the screen in the study's ``screen`` attribute with its
    ``margin`` (:func:`certified_margin`); only the queued points' parameters are asked for."""
    values = ranked.values if isinstance(ranked, Ranked) else np.array([value for _, value in ranked], dtype=float)
    positive = np.flatnonzero(values > 0)
    queued = positive[:count]
    for k in queued.tolist():
        params, value = ranked[k]
        study.enqueue_trial(params, user_attrs={ESTIMATE_KEY: value})
    study.set_user_attr("screen", {"points": len(ranked), "queued": len(queued), "seconds": seconds,
                                   "margin": certified_margin(values[queued].tolist(),
                                                              values[positive[count:]].tolist())})


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


def serving_front_first(ranked: Sequence[tuple[dict, float]]) -> list[tuple[dict, float]]:
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
