"""A whole training :class:`~spaces.candidate.Candidate` (hardware and strategy) from one Optuna trial.

Dimensions (``searched`` names) and the ``Strategy`` fields each decides:

=====================  =====================================================
``degrees``            ``tp``, ``pp``, ``dp``, ``cp``
``microbatch_size``    ``microbatch_size``
``schedule``           ``schedule``, ``num_chunks``
``recompute``          ``recompute``
``sequence_parallel``  ``sequence_parallel``
``zero_stage``         ``zero_stage``, ``shard_group_size`` (hybrid sharding, GPUs only)
``groups``             ``group_layout``, ``group_order``
``placement``          ``placement``, ``stage_devices``
``partition``          ``partition``, ``stage_layers``
``transfer_strategy``  ``transfer_strategy``
=====================  =====================================================

Fields of dimensions not searched come from ``fixed`` (or the ``Strategy`` defaults). Fixed
``tp`` / ``pp`` / ``dp`` also restrict a searched ``degrees``. Dimensions are drawn in the order
above, so every later choice list is a fixed function of a parameter name (see :mod:`spaces._choices`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import optuna

from simulator.api import check_memory
from simulator.errors import InputError
from simulator.hardware.spec import Hardware
from simulator.strategy import TRANSFER_STRATEGIES, Strategy
from simulator.workload.spec import ModelSpec
from spaces import groups, parallelism, partition, placement
from spaces.candidate import Candidate
from spaces.feasible import FeasiblePlans, plan_of
from spaces.parallelism import ParallelDegrees

DIMENSIONS: dict[str, tuple[str, ...]] = {
    "degrees": ("tp", "pp", "dp", "cp"),
    "microbatch_size": ("microbatch_size",),
    "schedule": ("schedule", "num_chunks"),
    "recompute": ("recompute",),
    "sequence_parallel": ("sequence_parallel",),
    "zero_stage": ("zero_stage", "shard_group_size"),
    "groups": ("group_layout", "group_order"),
    "placement": ("placement", "stage_devices"),
    "partition": ("partition", "stage_layers"),
    "transfer_strategy": ("transfer_strategy",),
}
"""Searchable dimensions and the ``Strategy`` fields each sets."""
PLACEMENT_DIMENSIONS = ("degrees", "groups", "placement", "transfer_strategy")
"""The dimensions that decide which devices a mapping's stages and groups use (and so its flows)."""


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
    devices (default: all), matching fixed tp/pp/dp and having at least one microbatch size.

    Raises:
        InputError: a device count outside 1..the machine's devices.
    """
    batch = fixed.get("global_batch_size")
    found = [d for n in sorted(set(device_counts or [hardware.num_devices]))
             for d in parallelism.enumerate_degrees(model, hardware, devices=n, max_tp=max_tp, global_batch_size=batch)]
    return [d for d in found
            if all(fixed.get(k, v) == v for k, v in d._asdict().items())
            and parallelism.enumerate_microbatch_sizes(model, d, global_batch_size=batch,
                                                       choices=microbatch_choices)]


def degree_choices(space: SearchedSpace, hardware: Hardware,
                   fixed: Mapping[str, object]) -> tuple[ParallelDegrees, ...]:
    """The fixed list behind categorical ``degrees`` on ``hardware``: :func:`candidate_degrees`
    under the space's options, only those leading to a plan that fits memory (``space.plans``)."""
    choices = candidate_degrees(space.model, hardware, fixed, microbatch_choices=space.microbatch_choices,
                                max_tp=space.max_tp, device_counts=space.device_counts)
    return tuple(d for d in choices if space.plans is None or d.label in space.plans.allowed())


def _degrees_of(candidate: Candidate) -> ParallelDegrees:
    strategy = candidate.strategy
    return ParallelDegrees(strategy.tp, strategy.pp, strategy.dp, strategy.cp)


def _allowed(space: SearchedSpace, candidate: Candidate, fields: int) -> tuple[object, ...] | None:
    """The values of the next plan field that lead to a plan fitting memory, after the first
    ``fields`` of the candidate's plan; None when the space does not pre-screen memory."""
    return None if space.plans is None else space.plans.allowed(*plan_of(candidate.strategy)[:fields])


def _suggest_degrees(trial: optuna.trial.Trial, space: SearchedSpace, candidate: Candidate,
                     fixed: Mapping[str, object]) -> Candidate:
    """Degrees, microbatch size and schedule."""
    model, strategy = space.model, candidate.strategy
    if "degrees" in space.searched:
        choices = space.degree_choices or degree_choices(space, candidate.hardware, fixed)
        candidate = candidate.with_fields(**parallelism.suggest_degrees(trial, choices)._asdict())
    degrees, batch = _degrees_of(candidate), strategy.global_batch_size
    if "microbatch_size" in space.searched:
        candidate = candidate.with_fields(microbatch_size=parallelism.suggest_microbatch_size(
            trial, model, degrees, global_batch_size=batch, choices=space.microbatch_choices,
            allowed=_allowed(space, candidate, 1)))
    if "schedule" in space.searched:
        choice = parallelism.suggest_schedule(trial, model, degrees, candidate.strategy.microbatch_size,
                                              global_batch_size=batch, allowed=_allowed(space, candidate, 2))
        candidate = candidate.with_fields(schedule=choice.schedule, num_chunks=choice.num_chunks)
    return candidate


def _suggest_memory(trial: optuna.trial.Trial, space: SearchedSpace, candidate: Candidate) -> Candidate:
    """Recompute, sequence parallelism and ZeRO."""
    degrees, searched = _degrees_of(candidate), space.searched
    if "recompute" in searched:
        candidate = candidate.with_fields(recompute=parallelism.suggest_recompute(
            trial, _allowed(space, candidate, 3)))
    if "sequence_parallel" in searched:
        candidate = candidate.with_fields(sequence_parallel=parallelism.suggest_sequence_parallel(
            trial, space.model, degrees, _allowed(space, candidate, 4)))
    if "zero_stage" in searched:
        candidate = candidate.with_fields(zero_stage=parallelism.suggest_zero_stage(
            trial, degrees, _allowed(space, candidate, 5)))
        if candidate.strategy.zero_stage == 3:
            candidate = _suggest_shard_group(trial, space, candidate, degrees)
    return candidate


def _suggest_shard_group(trial: optuna.trial.Trial, space: SearchedSpace, candidate: Candidate,
                         degrees: ParallelDegrees) -> Candidate:
    """Hybrid sharding within a node, offered when the node splits ``dp`` and the hybrid plan fits
    memory (checked here: the feasible plans hold full sharding, which takes less)."""
    size = parallelism.node_shard_group_size(degrees, candidate.hardware)
    hybrid = candidate.strategy.with_fields(shard_group_size=size) if size else None
    fits = hybrid is not None and not check_memory(space.model, candidate.hardware, hybrid)
    return candidate.with_fields(shard_group_size=parallelism.suggest_shard_group(trial, size, fits))


def _suggest_layout(trial: optuna.trial.Trial, space: SearchedSpace, candidate: Candidate) -> Candidate:
    """Comm-group layout, placement, transfer strategy and layer partition."""
    degrees, searched = _degrees_of(candidate), space.searched
    if "groups" in searched:
        candidate = candidate.with_fields(**groups.suggest_group_layout(trial).fields())
    if "placement" in searched:
        candidate = candidate.with_fields(**placement.suggest_placement(
            trial, candidate.hardware, degrees, space.custom_placements))
    if "transfer_strategy" in searched and degrees.pp > 1:
        candidate = candidate.with_fields(
            transfer_strategy=trial.suggest_categorical("transfer_strategy", list(TRANSFER_STRATEGIES)))
    if "partition" in searched:
        candidate = candidate.with_fields(**partition.suggest_partition(
            trial, space.model, candidate.hardware, candidate.strategy))
    return candidate


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
    candidate = Candidate(hardware=hardware, strategy=Strategy.from_dict(dict(fixed)))
    candidate = _suggest_degrees(trial, space, candidate, fixed)
    candidate = _suggest_memory(trial, space, candidate)
    return _suggest_layout(trial, space, candidate)
