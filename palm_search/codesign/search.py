"""The co-design search: every chip of the space screened, the most promising refined.

1. **Screen** (:func:`palm_search.codesign.evaluate.screen_chip`, in parallel joblib workers): every
   chip of the hardware space (or the ``screen_chips`` a sampler proposes:
   :mod:`palm_search.codesign.sampled`) is costed; chips over the area or power budget are
   infeasible with the reason. Each model's mappings are estimated in closed form on every other
   chip. A chip's estimated score is PHAZE's: the mean over the models of each one's best samples/s.
2. **Refine**: the ``trials`` chips best by the estimated objective (for a Pareto objective: by
   non-dominated rank, Deb et al. NSGA-II 2002, then throughput) have each model's ``refine``
   best-estimated mappings simulated with the event-driven network; a chip's score is then the mean
   of each model's best simulated samples/s.

Screening every chip draws nothing at random; a sampled screen is seeded and asks fixed batches;
either way the same study gives the same answer for any number of workers. The budget
``trials x models x refine`` counts simulations.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from joblib import Parallel, delayed

from palm_search.codesign.evaluate import (
    ChipScreen,
    budgets,
    chip_space,
    objective_values,
    screen_chip,
    simulate_mapping,
    simulated_samples_per_s,
)
from palm_search.codesign.sampled import sampled_screens
from palm_search.codesign.spec import CodesignSpec
from simulator import InputError
from spaces.hardware import enumerate_hardware

CHIP_LIMIT = 2_000
"""Most chips a study screens (each costs its models' mapping screens, about 0.5-4 s)."""

Progress = Callable[[str, int, int], None]
"""``(phase, done, total)``: progress of the screen and of the refining simulations."""


@dataclass
class Chip:
    """One chip of the space after the search.

    Attributes:
        screen: its first rung (area, power, estimates, shortlist).
        simulated: model -> the evaluation record of its best simulated mapping, with its
            ``strategy`` (empty: not refined).
        simulations: event-driven simulations spent on it.
    """

    screen: ChipScreen
    simulated: dict[str, dict] = field(default_factory=dict)
    simulations: int = 0

    @property
    def refined(self) -> bool:
        """Whether its mappings were simulated."""
        return bool(self.simulated)

    @property
    def samples_per_s(self) -> float:
        """Mean over the models of the best simulated samples/s (0 when not refined or a model has
        no feasible mapping)."""
        values = [simulated_samples_per_s(r) for r in self.simulated.values()]
        return sum(values) / len(values) if values and all(values) else 0.0


@dataclass
class CodesignRun:
    """A finished co-design search.

    Attributes:
        spec: the study.
        chips: every chip of the space, in the space's order.
        base: the base chip (no ``hw.*`` parameter), screened and refined as the reference
            whatever its budget.
        area_budget_m2, power_budget_W: the budgets applied.
        screen_s, refine_s: wall time of each rung (s).
    """

    spec: CodesignSpec
    chips: list[Chip]
    base: Chip
    area_budget_m2: float
    power_budget_W: float
    screen_s: float
    refine_s: float

    @property
    def simulations(self) -> int:
        """Event-driven simulations spent, the base chip's included."""
        return sum(c.simulations for c in self.chips) + self.base.simulations

    @property
    def estimated_mappings(self) -> int:
        """Mappings estimated in closed form, the base chip's included."""
        return sum(c.screen.mappings for c in self.chips) + self.base.screen.mappings

    def best(self) -> Chip | None:
        """The refined chip with the best objective (ties: the smaller, then the less
        power-hungry chip, then the space's first)."""
        scored = [c for c in self.chips if c.samples_per_s > 0]
        return max(scored, key=lambda c: (objective_values(self.spec, c.samples_per_s, c.screen)[0],
                                          -c.screen.area_m2, -c.screen.power_W), default=None)


def run_codesign(spec: CodesignSpec, jobs: int, progress: Progress = lambda *_: None) -> CodesignRun:
    """Screen every chip of the study's space and refine the best (module docstring).

    Raises:
        InputError: a bad base chip or space, more than :data:`CHIP_LIMIT` chips, or no chip that
            fits the budgets and the models.
    """
    space = chip_space(spec)
    sampled = 0 < spec.screen_chips < space.size
    if space.size > CHIP_LIMIT and not sampled:
        raise InputError(f"codesign: the hardware space has {space.size:,} chips, more than {CHIP_LIMIT:,} to"
                         " screen each; give `screen_chips` (a sampler proposes that many) or fewer choices")
    area_budget, power_budget = budgets(spec)
    started = time.perf_counter()
    if sampled:
        chips = [Chip(s) for s in sampled_screens(spec, jobs, lambda done, total: progress("screen", done, total))]
        base = Chip(screen_chip(spec, {}, budgeted=False))
    else:
        tasks = [delayed(screen_chip)(spec, p) for p in enumerate_hardware(space)]
        tasks.append(delayed(screen_chip)(spec, {}, budgeted=False))
        *chips, base = [Chip(screen) for screen in _parallel(jobs, "screen", tasks, progress)]
    screen_s = time.perf_counter() - started
    chosen = choose(spec, [c.screen for c in chips])
    if not chosen:
        reasons = sorted({c.screen.reason for c in chips})
        raise InputError(f"codesign: none of the {len(chips)} chips fits the budgets and every model"
                         f" ({'; '.join(reasons[:3])})")
    refined = [chips[i] for i in chosen] + [base]
    simulations = [(chip, name, strategy) for chip in refined for name, strategies in chip.screen.shortlist.items()
                   for strategy in strategies]
    started = time.perf_counter()
    records = _parallel(jobs, "refine", [delayed(simulate_mapping)(spec, chip.screen.params, name, strategy)
                                         for chip, name, strategy in simulations], progress)
    for (chip, name, strategy), record in zip(simulations, records, strict=True):
        chip.simulations += 1
        best = chip.simulated.get(name)
        if best is None or simulated_samples_per_s(record) > simulated_samples_per_s(best):
            chip.simulated[name] = {**record, "strategy": strategy}
    return CodesignRun(spec, chips, base, area_budget, power_budget, screen_s, time.perf_counter() - started)


def _parallel(jobs: int, phase: str, tasks: list, progress: Progress) -> list:
    """The tasks' results in order, ``progress`` told as they finish."""
    results = []
    for result in Parallel(n_jobs=jobs, return_as="generator")(tasks):
        results.append(result)
        progress(phase, len(results), len(tasks))
    return results


def choose(spec: CodesignSpec, screens: list[ChipScreen]) -> list[int]:
    """Indices of the ``spec.trials`` feasible chips to refine: best estimated objective first
    (a front: lower non-dominated rank first, then higher throughput); ties: the smaller chip,
    then the space's order."""
    feasible = [i for i, s in enumerate(screens) if not s.reason and s.samples_per_s > 0]
    values = {i: objective_values(spec, screens[i].samples_per_s, screens[i]) for i in feasible}
    if len(spec.directions) == 1:
        order = sorted(feasible, key=lambda i: (-values[i][0], screens[i].area_m2))
    else:
        rank = dict(zip(feasible, front_ranks([(values[i][0], values[i][1]) for i in feasible]), strict=True))
        order = sorted(feasible, key=lambda i: (rank[i], -values[i][0], screens[i].area_m2))
    return order[:spec.trials]


def front_ranks(points: list[tuple[float, float]]) -> list[int]:
    """Non-dominated rank of each ``(maximised, minimised)`` point: 0 for the Pareto front, 1 for
    the front of the rest, ... (Deb et al., IEEE TEC 2002)."""
    rank = [-1] * len(points)
    left = set(range(len(points)))
    level = 0
    while left:
        front = {i for i in left if not any(_dominates(points[j], points[i]) for j in left if j != i)}
        for i in front:
            rank[i] = level
        left -= front
        level += 1
    return rank


def _dominates(a: tuple[float, float], b: tuple[float, float]) -> bool:
    """``a`` is no worse than ``b`` in both (first up, second down) and better in one."""
    return a[0] >= b[0] and a[1] <= b[1] and (a[0] > b[0] or a[1] < b[1])
