"""The screen of a hardware space too big to screen whole: an Optuna sampler proposes the chips.

With ``screen_chips = K`` (fewer than the space's chips), the first rung screens the mappings of K
distinct chips that a sampler proposes instead of every chip (a proposal over the area or power
budget is costed in microseconds and does not count): TPE (Bergstra et al., NeurIPS 2011; Optuna's
multivariate TPE) for one objective, NSGA-II (Deb et al., IEEE TEC 2002) for a front, each told
the chip's estimated objective and, through Optuna 5's constraint (``Trial.set_constraint``, > 0:
over a budget or no mapping fits), whether it is feasible, so it learns where the feasible chips
are. Proposals are asked in batches of
:data:`BATCH` whatever the number of workers, so a seed gives the same chips for any ``--jobs``.
"""

from __future__ import annotations

from collections.abc import Callable

import optuna
from joblib import Parallel, delayed

from palm_search.codesign.evaluate import ChipScreen, chip_space, costed_out, objective_values, screen_chip
from palm_search.codesign.spec import CodesignSpec
from spaces.hardware import suggest_hardware

BATCH = 8
"""Chips asked per batch (told together, screened in parallel)."""
MAX_ASKS_PER_CHIP = 20
"""Proposals allowed per chip of the budget: a sampler that keeps proposing screened chips stops
the screen early rather than loop."""


def sampled_screens(spec: CodesignSpec, jobs: int, tell: Callable[[int, int], None]) -> list[ChipScreen]:
    """The chips proposed, in order, until ``spec.screen_chips`` of them had their mappings
    screened (chips over a budget are costed in microseconds and do not count);
    ``tell(done, total)`` after each batch."""
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    space = chip_space(spec)
    budget = min(spec.screen_chips, space.size)
    study = optuna.create_study(directions=spec.directions, sampler=_sampler(spec))
    seen: dict[tuple, ChipScreen] = {}
    screened = asks = 0
    with Parallel(n_jobs=jobs) as parallel:
        while screened < budget and len(seen) < space.size and asks < MAX_ASKS_PER_CHIP * budget:
            trials = [study.ask() for _ in range(min(BATCH, budget - screened))]
            asks += len(trials)
            proposals = [suggest_hardware(t, space) for t in trials]
            fresh = list({_key(p): p for p in proposals if _key(p) not in seen}.values())
            cheap = {_key(p): costed_out(spec, p) for p in fresh}
            seen.update({k: v for k, v in cheap.items() if v is not None})
            costly = [p for p in fresh if cheap[_key(p)] is None]
            for params, screen in zip(costly, parallel(delayed(screen_chip)(spec, p) for p in costly), strict=True):
                seen[_key(params)] = screen
            screened += len(costly)
            for trial, params in zip(trials, proposals, strict=True):
                screen = seen[_key(params)]
                trial.set_constraint("infeasible", 1.0 if screen.reason else 0.0)
                study.tell(trial, _estimated(spec, screen))
            tell(screened, budget)
    return list(seen.values())


def _key(params: dict) -> tuple:
    return tuple(sorted(params.items()))


def _estimated(spec: CodesignSpec, screen: ChipScreen) -> list[float]:
    """The objective(s) the sampler is told: the estimated score (0 when infeasible), with the
    chip's area or power on a front."""
    return objective_values(spec, screen.samples_per_s, screen)


def _sampler(spec: CodesignSpec) -> optuna.samplers.BaseSampler:
    if len(spec.directions) > 1:
        return optuna.samplers.NSGAIISampler(seed=spec.seed)
    return optuna.samplers.TPESampler(seed=spec.seed, multivariate=True,
                                      n_startup_trials=min(10, max(spec.screen_chips // 4, 2)))
