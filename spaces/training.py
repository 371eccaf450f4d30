"""A whole training :class:`~spaces.candidate.Candidate` (hardware and strategy) from one Optuna trial.

The dimensions (``searched`` names) and the ``Strategy`` fields each decides are the fields'
``dimension`` metadata (:func:`simulator.search_dimensions`, :data:`DIMENSIONS`): ``degrees``
(``tp``, ``pp``, ``dp``, ``cp``, ``ep``, ``etp``, ``attention_split``), ``microbatch_size``,
``schedule`` (with ``num_chunks``), ``recompute``, ``sequence_parallel``, ``zero_stage`` (with
``shard_group_size``, hybrid sharding, GPUs only), ``partition`` (with ``stage_layers``),
``placement`` (with ``stage_devices``, and ``wafer_stages`` on several wafers), ``groups``
(``group_layout``, ``group_order``) and ``transfer_strategy``.

Fields of dimensions not searched come from ``fixed`` (or the ``Strategy`` defaults). Fixed
``tp`` / ``pp`` / ``dp`` also restrict a searched ``degrees``. Dimensions are drawn in one fixed
order (degrees, microbatch size, schedule, recompute, sequence parallelism, ZeRO, groups,
placement, transfer strategy, partition), so every later choice list is a fixed function of a
parameter name (see :mod:`spaces._choices`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any, cast

import optuna

from simulator import (
    ATTENTION_SPLITS,
    TRANSFER_STRATEGIES,
    ZERO_STAGES,
    Hardware,
    InputError,
    ModelSpec,
    Strategy,
    check_memory,
    is_inference,
    search_dimensions,
    strategy_fields,
)
from spaces import groups, parallelism, partition, placement
from spaces.candidate import Candidate
from spaces.feasible import FeasiblePlans, plan_of
from spaces.parallelism import ParallelDegrees

DIMENSIONS: dict[str, tuple[str, ...]] = search_dimensions()
"""Searchable dimensions and the ``Strategy`` fields each sets (the fields' ``dimension`` metadata)."""
PLACEMENT_DIMENSIONS = tuple(name for name, names in DIMENSIONS.items()
                             if set(names) & {*strategy_fields(placed=True), *strategy_fields(where=True)})
"""The dimensions that decide which devices a mapping's stages and groups use, or how they talk (a
field :func:`simulator.placement.place` reads, or one marked ``where``): a placement's flows."""


def placement_key(params: Mapping[str, object]) -> tuple[str, ...]:
    """The values of a point's placement dimensions (parameter names are ``dimension`` or
    ``dimension|conditions``), to keep points of one placement together."""
    return tuple(f"{name}={value}" for name, value in sorted(params.items())
                 if name.split("|", 1)[0] in PLACEMENT_DIMENSIONS)


def check_dimensions(fixed: Mapping[str, object], searched: set[str]) -> None:
    """Reject unknown dimensions or fields, and fields both fixed and searched (degrees excepted).

    Raises:
        InputError: naming the offending key.
    """
    unknown = sorted(searched - set(DIMENSIONS))
    if unknown:
        raise InputError(f"search: unknown dimension {unknown[0]!r} (known: {list(DIMENSIONS)})")
    fields = set(Strategy.__dataclass_fields__)
    for key in fixed:
        if key not in fields:
            raise InputError(f"search: unknown fixed field {key!r} (known: {sorted(fields)})")
        owner = next((d for d, f in DIMENSIONS.items() if key in f), None)
        if owner in searched and owner != "degrees":
            raise InputError(f"search: `{key}` is both fixed and searched (dimension {owner!r})")


@dataclass(frozen=True, slots=True, kw_only=True)
class SearchedSpace:
    """What a study searches and how.

    Attributes:
        model: the model.
        searched: names from :data:`DIMENSIONS`.
        custom_placements: validated named placements (:func:`spaces.placement.custom_placements`).
        microbatch_choices: allowed microbatch sizes (default: every divisor of ``B / dp``).
        max_tp: largest tensor-parallel degree when ``degrees`` is searched.
        device_counts: devices a mapping may use (``tp * pp * dp``), e.g. 128 of a 13 x 10 grid
            whose 130 cores factor badly; empty: all of the machine's. Stages are cut from the
            start of the placement's device order, so a mapping uses part of the grid.
        plans: the plans that fit memory (:func:`spaces.feasible.feasible_plans`); each memory
            dimension then offers only values leading to one. None: every legal value.
        degree_choices: the list behind categorical ``degrees`` when computed once for the
            space's machine (:func:`degree_choices`); None computes it per trial.
    """

    model: ModelSpec
    searched: frozenset[str]
    custom_placements: Mapping[str, tuple[tuple[int, ...], ...]] | None = None
    microbatch_choices: Sequence[int] | None = None
    max_tp: int | None = None
    device_counts: Sequence[int] = ()
    plans: FeasiblePlans | None = None
    degree_choices: tuple[ParallelDegrees, ...] | None = None


def candidate_degrees(model: ModelSpec, hardware: Hardware, fixed: Mapping[str, object], *,
                      microbatch_choices: Sequence[int] | None = None, max_tp: int | None = None,
                      device_counts: Sequence[int] = ()) -> list[ParallelDegrees]:
    """The fixed list behind categorical ``degrees``: legal triples on each of ``device_counts``
    devices (default: all), matching the fixed degrees (an ``etp`` equal to ``tp`` matches
    ``tp``'s, :meth:`ParallelDegrees.of`) and having at least one microbatch size.

    Raises:
        InputError: a device count outside 1..the machine's devices.
    """
    # the ``Strategy`` field ``global_batch_size`` (int | None); ``fixed`` maps fields to objects
    batch = cast("int | None", fixed.get("global_batch_size"))
    splits = ATTENTION_SPLITS if is_inference(fixed.get("mode")) and model.is_causal else ("heads",)
    found = [d for n in sorted(set(device_counts or [hardware.num_devices]))
             for d in parallelism.enumerate_degrees(model, hardware, devices=n, max_tp=max_tp, global_batch_size=batch,
                                                    attention_splits=splits)]
    pinned = {k: fixed[k] for k in ParallelDegrees._fields if k in fixed}
    return [d for d in found
            if ParallelDegrees.of({**d._asdict(), **pinned}) == d
            and parallelism.enumerate_microbatch_sizes(model, d, global_batch_size=batch,
                                                       choices=microbatch_choices)]


def degree_choices(space: SearchedSpace, hardware: Hardware,
                   fixed: Mapping[str, object]) -> tuple[ParallelDegrees, ...]:
    """The fixed list behind categorical ``degrees`` on ``hardware``: :func:`candidate_degrees`
    under the space's options, only those leading to a plan that fits memory (``space.plans``)."""
    choices = candidate_degrees(space.model, hardware, fixed, microbatch_choices=space.microbatch_choices,
                                max_tp=space.max_tp, device_counts=space.device_counts)
    return tuple(d for d in choices if space.plans is None or d.label in space.plans.allowed())


_DEFAULTS: dict[str, object] = {f.name: f.default for f in fields(Strategy)}
"""Each ``Strategy`` field's default, for the fields a draft has not set."""


class _Draft:
    """The ``Strategy`` fields a trial has decided so far, as attributes (a field not decided
    holds its default): the steps set fields and the strategy is built and checked once, at the
    end, or where a step needs a whole one (8 fields drawn, 1 strategy built)."""

    def __init__(self, hardware: Hardware, fixed: Mapping[str, object]) -> None:
        self.__dict__.update(_DEFAULTS)
        self.__dict__.update(fixed)
        self.hardware = hardware

    def set(self, **values: object) -> None:
        """Decide ``values`` (``Strategy`` fields)."""
        self.__dict__.update(values)

    def strategy(self) -> Strategy:
        """The strategy of the fields so far.

        Raises:
            InputError: they do not make a valid ``Strategy``.
        """
        return Strategy.from_dict({name: self.__dict__[name] for name in _DEFAULTS})

    def __getattr__(self, name: str) -> Any:  # the fields, set in __init__; for type checkers
        raise AttributeError(name)


def _degrees_of(draft: _Draft) -> ParallelDegrees:
    return ParallelDegrees.of(draft)


def _allowed(space: SearchedSpace, draft: _Draft, count: int) -> tuple[object, ...] | None:
    """The values of the next plan field that lead to a plan fitting memory, after the first
    ``count`` of the draft's plan; None when the space does not pre-screen memory."""
    return None if space.plans is None else space.plans.allowed(*plan_of(draft)[:count])  # type: ignore[arg-type]


def _suggest_degrees(trial: optuna.trial.Trial, space: SearchedSpace, draft: _Draft,
                     fixed: Mapping[str, object]) -> None:
    """Degrees, microbatch size and schedule."""
    model, batch = space.model, draft.global_batch_size
    if "degrees" in space.searched:
        choices = space.degree_choices or degree_choices(space, draft.hardware, fixed)
        draft.set(**parallelism.suggest_degrees(trial, choices)._asdict())
    degrees = _degrees_of(draft)
    if "microbatch_size" in space.searched:
        draft.set(microbatch_size=parallelism.suggest_microbatch_size(
            trial, model, degrees, global_batch_size=batch, choices=space.microbatch_choices,
            allowed=_allowed(space, draft, 1)))
    if "schedule" in space.searched:
        choice = parallelism.suggest_schedule(trial, model, degrees, draft.microbatch_size,
                                              global_batch_size=batch,
                                              allowed=_allowed(space, draft, 2))
        draft.set(schedule=choice.schedule, num_chunks=choice.num_chunks)


def _suggest_memory(trial: optuna.trial.Trial, space: SearchedSpace, draft: _Draft) -> None:
    """Recompute, sequence parallelism and ZeRO."""
    degrees, searched = _degrees_of(draft), space.searched
    if "recompute" in searched:
        draft.set(recompute=parallelism.suggest_recompute(trial, _allowed(space, draft, 3)))
    if "sequence_parallel" in searched:
        draft.set(sequence_parallel=parallelism.suggest_sequence_parallel(
            trial, space.model, degrees, _allowed(space, draft, 4)))
    if "zero_stage" in searched:
        draft.set(zero_stage=parallelism.suggest_zero_stage(trial, degrees, _allowed(space, draft, 5)))
        if draft.zero_stage == ZERO_STAGES[-1]:  # weights sharded (shards_weights): hybrid sharding applies
            _suggest_shard_group(trial, space, draft, degrees)


def _suggest_shard_group(trial: optuna.trial.Trial, space: SearchedSpace, draft: _Draft,
                         degrees: ParallelDegrees) -> None:
    """Hybrid sharding within a node, offered when the node splits ``dp`` and the hybrid plan fits
    memory (checked here: the feasible plans hold full sharding, which takes less)."""
    size = parallelism.node_shard_group_size(degrees, draft.hardware)
    fits = size is not None and not check_memory(space.model, draft.hardware,
                                                 draft.strategy().with_fields(shard_group_size=size))
    draft.set(shard_group_size=parallelism.suggest_shard_group(trial, size, fits))


def _suggest_layout(trial: optuna.trial.Trial, space: SearchedSpace, draft: _Draft) -> None:
    """Comm-group layout, placement, transfer strategy and layer partition."""
    degrees, searched = _degrees_of(draft), space.searched
    if "groups" in searched:
        draft.set(**groups.suggest_group_layout(trial).fields())
    if "placement" in searched:
        draft.set(**placement.suggest_placement(trial, draft.hardware, degrees, space.custom_placements))
    if "transfer_strategy" in searched and degrees.pp > 1:
        draft.set(transfer_strategy=trial.suggest_categorical("transfer_strategy", list(TRANSFER_STRATEGIES)))
    if "partition" in searched:
        draft.set(**partition.suggest_partition(trial, space.model, draft.hardware, draft.strategy()))


def suggest_candidate(trial: optuna.trial.Trial, space: SearchedSpace, hardware: Hardware, *,
                      fixed: Mapping[str, object]) -> Candidate:
    """A whole training candidate drawn from ``trial`` over the ``space``'s searched dimensions.

    Args:
        trial: an Optuna trial (``study.ask()`` or inside an objective).
        space: the model and what is searched.
        hardware: the machine.
        fixed: ``Strategy`` field values for what is not searched (e.g. ``{"precision": "bf16"}``).

    Returns:
        The candidate (its strategy always constructible; memory feasibility is the simulator's answer).

    Raises:
        InputError: unknown dimension or field, a field both fixed and searched, no legal degrees,
            or fixed values that do not make a valid ``Strategy``.
    """
    check_dimensions(fixed, set(space.searched))
    Strategy.from_dict(dict(fixed))
    draft = _Draft(hardware, fixed)
    _suggest_degrees(trial, space, draft, fixed)
    _suggest_memory(trial, space, draft)
    _suggest_layout(trial, space, draft)
    return Candidate(hardware=hardware, strategy=draft.strategy())
