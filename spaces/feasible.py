"""Plans that fit the devices' memory, found before the search proposes any (feasible first).

A *plan* is the part of a strategy device memory depends on: degrees, microbatch size, schedule,
recompute, sequence parallelism and ZeRO stage (activations: Korthikanti et al., MLSys'23, §4;
model states: Rajbhandari et al., SC'20, §3; microbatches in flight per schedule: Narayanan et
al., SC'21, §2.2). Placement, comm groups and the transfer strategy do not change it.
:func:`feasible_plans` checks plans with :func:`simulator.check_memory` (the simulator's own test,
no engine run; a serving plan's decode step and its batch's prefill both) and keeps those that
fit as a tree that the ``suggest_*`` steps of
:mod:`spaces.training` walk: each step offers only values that lead to a fitting plan, so the
search spends no simulation (and no sampler step) on a mapping over memory.

Pruning keeps the checks to a few hundred on T-145B / wafer (of 4,320 plans): memory grows with
the microbatch size (activations are proportional to it, model states do not depend on it) and
is least with full recompute, sequence parallelism and the highest ZeRO stage offered up to 2.
ZeRO-3 is a chain of its own: where it gathers each unit's weights every microbatch (a GPU's
HBM) it holds gathered units beside its shards, which can outweigh what it shards (two
data-parallel ranks, several chunks per device), so it need not save more than ZeRO-2. So for
each (degrees, schedule) and chain the sizes are tried in increasing order under the chain's
most-saving choice, and the first size that fits in no chain ends the sizes of that pair; under a
size whose most saving choice fits, all fit when the least saving one does, and otherwise a
choice that saves no more in any of the three than one that did not fit is not checked. Tests
check the pruned tree equals the brute-force one, and that it holds exactly the plans
:func:`simulator.simulate` finds feasible.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import product
from typing import cast

from simulator import (
    MEGATRON_CORE,
    RECOMPUTES,
    ZERO_STAGES,
    Hardware,
    InputError,
    ModelSpec,
    Stack,
    Strategy,
    check_memory,
)
from spaces import parallelism
from spaces.parallelism import ParallelDegrees, ScheduleChoice

Plan = tuple[str, int, str, str, bool, int]
"""``(degrees label, microbatch size, schedule label, recompute, sequence parallel, ZeRO stage)``."""

_SAVING = {"recompute": RECOMPUTES[::-1], "sequence_parallel": (True, False), "zero_stage": ZERO_STAGES[::-1]}
"""Choices from most to least memory saved."""


@dataclass(frozen=True, slots=True, kw_only=True)
class FeasiblePlans:
    """The plans that fit, as a tree, and what finding them took.

    Attributes:
        options: a prefix of a :data:`Plan` -> the values that extend it toward a fitting plan.
        plans: plans in the space.
        checked: plans checked against memory (the rest were pruned).
        fitting: plans that fit.
    """

    options: Mapping[tuple[object, ...], tuple[object, ...]]
    plans: int
    checked: int
    fitting: int

    def allowed(self, *prefix: object) -> tuple[object, ...]:
        """Values of the next plan field after ``prefix`` that lead to a fitting plan."""
        return self.options.get(tuple(prefix), ())


def plan_of(strategy: Strategy) -> Plan:
    """The plan of ``strategy``."""
    return (ParallelDegrees.of(strategy).label, strategy.microbatch_size,
            ScheduleChoice(strategy.schedule, strategy.num_chunks).label, strategy.recompute,
            strategy.sequence_parallel, strategy.zero_stage)


@dataclass(frozen=True, slots=True)
class _Choices:
    """Per plan field, the values the space offers (one when the field is fixed)."""

    model: ModelSpec
    searched: frozenset[str]
    base: Strategy
    microbatch_choices: Sequence[int] | None

    def microbatch_sizes(self, degrees: ParallelDegrees) -> list[int]:
        if "microbatch_size" not in self.searched:
            return [self.base.microbatch_size]
        return parallelism.enumerate_microbatch_sizes(
            self.model, degrees, global_batch_size=self.base.global_batch_size, choices=self.microbatch_choices)

    def schedules(self, degrees: ParallelDegrees, size: int) -> list[ScheduleChoice]:
        if "schedule" not in self.searched:
            return [ScheduleChoice(self.base.schedule, self.base.num_chunks)]
        return parallelism.enumerate_schedules(self.model, degrees, size, global_batch_size=self.base.global_batch_size)

    def memory_choices(self, degrees: ParallelDegrees) -> tuple[tuple[object, ...], ...]:
        """(recompute, sequence parallel, ZeRO) values, each most saving first."""
        offered = {"recompute": parallelism.enumerate_recompute(),
                   "sequence_parallel": parallelism.enumerate_sequence_parallel(self.model, degrees),
                   "zero_stage": parallelism.enumerate_zero_stages(degrees)}
        return tuple(tuple(v for v in _SAVING[name] if v in offered[name]) if name in self.searched
                     else (getattr(self.base, name),) for name in _SAVING)


@dataclass(frozen=True, slots=True)
class DegreePlans:
    """The plans of one set of degrees: those that fit, how many there are and were checked, and
    the tree of those that fit (:attr:`FeasiblePlans.options`, built where they were found)."""

    degrees: ParallelDegrees
    fitting: tuple[Plan, ...]
    plans: int
    checked: int
    options: Mapping[tuple[object, ...], tuple[object, ...]]


def feasible_plans(model: ModelSpec, hardware: Hardware, degrees: Sequence[ParallelDegrees], *,
                   searched: frozenset[str], fixed: Mapping[str, object],
                   microbatch_choices: Sequence[int] | None = None, prune: bool = True,
                   stack: Stack = MEGATRON_CORE) -> FeasiblePlans:
    """The plans over ``degrees`` (and the searched plan fields; fixed ones from ``fixed``) that
    fit the devices' memory under the software ``stack``; see the module docstring.

    Args:
        model, hardware: what is mapped, and onto what.
        degrees: the degrees the search may take (the fixed ones when ``degrees`` is not searched).
        searched: the searched dimensions (:data:`spaces.training.DIMENSIONS` names).
        fixed: ``Strategy`` fields not searched.
        microbatch_choices: allowed microbatch sizes (default: every divisor of ``B / dp``).
        prune: skip what the monotonicity of memory decides (False: check every plan).
        stack: the software stack the plans run under (its weight formats, ZeRO-3 and
            recompute behaviour change what a device holds).

    Raises:
        InputError: ``fixed`` does not make a valid ``Strategy``.
    """
    return plans_tree([degree_plans(model, hardware, d, searched=searched, fixed=fixed,
                                    microbatch_choices=microbatch_choices, prune=prune, stack=stack)
                       for d in degrees])


def degree_plans(model: ModelSpec, hardware: Hardware, degrees: ParallelDegrees, *, searched: frozenset[str],
                 fixed: Mapping[str, object], microbatch_choices: Sequence[int] | None = None,
                 prune: bool = True, stack: Stack = MEGATRON_CORE) -> DegreePlans:
    """:func:`feasible_plans` of one set of ``degrees``, as a list (:func:`plans_tree` joins them).

    Raises:
        InputError: ``fixed`` does not make a valid ``Strategy``.
    """
    choices = _Choices(model, searched, Strategy.from_dict(dict(fixed)), microbatch_choices)
    fitting: list[Plan] = []
    checked = 0
    memory = choices.memory_choices(degrees)
    pairs = [(schedule, size) for size in choices.microbatch_sizes(degrees)
             for schedule in choices.schedules(degrees, size)]
    for schedule in dict.fromkeys(schedule for schedule, _ in pairs):
        for size in (size for s, size in pairs if s == schedule):
            fields = {**fixed, **degrees._asdict(), "microbatch_size": size, "schedule": schedule.schedule,
                      "num_chunks": schedule.num_chunks}
            least_fits = False
            for chain in _zero_chains(memory):
                fits, tried, chain_fits = _fitting_memory_choices(model, hardware, fields, chain, prune, stack)
                # each choice is (recompute, sequence parallel, ZeRO stage): :meth:`_Choices.memory_choices`
                fitting += [cast(Plan, (degrees.label, size, schedule.label, *choice)) for choice in fits]
                checked += tried
                least_fits = least_fits or chain_fits
            if prune and not least_fits:
                break  # no chain's most saving choice fits: no larger microbatch will
    return DegreePlans(degrees, tuple(fitting), len(pairs) * len(list(product(*memory))), checked, _tree(fitting))


def plans_tree(parts: Sequence[DegreePlans]) -> FeasiblePlans:
    """The :class:`FeasiblePlans` of the ``parts`` together: their trees joined under the degrees
    that have a fitting plan, in the order :func:`_tree` gives them (a plan's ``str`` begins with
    its degrees label's ``('label', ``, so the parts sort as those prefixes do)."""
    fitting = [part for part in parts if part.fitting]
    labels = tuple(part.degrees.label for part in sorted(fitting, key=lambda part: f"({part.degrees.label!r}, "))
    options: dict[tuple[object, ...], tuple[object, ...]] = {(): labels}
    for part in fitting:
        options.update(item for item in part.options.items() if item[0])
    return FeasiblePlans(options=options, plans=sum(p.plans for p in parts), checked=sum(p.checked for p in parts),
                         fitting=sum(len(p.fitting) for p in parts))


def _zero_chains(memory: tuple[tuple[object, ...], ...]) -> list[tuple[tuple[object, ...], ...]]:
    """The memory choices (recompute, sequence parallel, ZeRO) split where memory need not fall:
    ZeRO-3 apart from the lower stages (see the module docstring)."""
    *others, zero = memory
    top = ZERO_STAGES[-1]
    if top not in zero or len(zero) == 1:
        return [memory]
    return [(*others, (top,)), (*others, tuple(z for z in zero if z != top))]


def _fitting_memory_choices(model: ModelSpec, hardware: Hardware, fields: dict[str, object],
                            memory: tuple[tuple[object, ...], ...],
                            prune: bool, stack: Stack) -> tuple[list[tuple[object, ...]], int, bool]:
    """The (recompute, sequence parallel, ZeRO) choices that fit with ``fields``, the checks made,
    and whether the most saving choice fits. With ``prune``: nothing fits when the most saving
    choice does not, all fit when the least saving one does, and otherwise a choice saving no
    more than one that did not fit, in each of the three, is not checked."""
    every = list(product(*(range(len(values)) for values in memory)))  # most saving first

    def fits(index: tuple[int, ...]) -> bool:
        choice = tuple(values[i] for values, i in zip(memory, index, strict=True))
        return _fits(model, hardware, {**fields, **dict(zip(_SAVING, choice, strict=True))}, stack)

    def chosen(indices: list[tuple[int, ...]]) -> list[tuple[object, ...]]:
        return [tuple(values[i] for values, i in zip(memory, index, strict=True)) for index in indices]

    if not prune:
        fitting = [index for index in every if fits(index)]
        return chosen(fitting), len(every), bool(fitting) and fitting[0] == every[0]
    if not fits(every[0]):
        return [], 1, False
    if len(every) == 1 or fits(every[-1]):
        return chosen(every), min(len(every), 2), True
    found, failed = [every[0]], [every[-1]]
    for index in every[1:-1]:
        if any(all(i >= f for i, f in zip(index, fail, strict=True)) for fail in failed):
            continue
        (found if fits(index) else failed).append(index)
    return chosen(found), len(found) + len(failed), True


def _fits(model: ModelSpec, hardware: Hardware, fields: dict[str, object], stack: Stack) -> bool:
    """Whether the plan fits; a serving plan (a decode step) with its batch's prefill too, which
    each of its trials also simulates (a serving search evaluates both)."""
    try:
        strategy = Strategy.from_dict(fields)
        passes = (strategy, strategy.with_fields(decode_context_length=0)) if strategy.decoding else (strategy,)
        return not any(check_memory(model, hardware, s, stack) for s in passes)
    except InputError:
        return False


def _tree(fitting: list[Plan]) -> dict[tuple[object, ...], tuple[object, ...]]:
    """Each prefix of a fitting plan -> its next values (first-seen order)."""
    tree: dict[tuple[object, ...], dict[object, None]] = {}
    for plan in sorted(fitting, key=str):
        for k in range(len(plan)):
            tree.setdefault(plan[:k], {})[plan[k]] = None
    return {prefix: tuple(values) for prefix, values in tree.items()}
