"""A whole training :class:`~simulator.strategy.Strategy` from one Optuna trial.

Dimensions (``searched`` names) and the ``Strategy`` fields each decides:

=====================  =====================================================
``degrees``            ``tp``, ``pp``, ``dp``
``microbatch_size``    ``microbatch_size``
``schedule``           ``schedule``, ``num_chunks``
``recompute``          ``recompute``
``sequence_parallel``  ``sequence_parallel``
``zero_stage``         ``zero_stage``
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

import optuna

from simulator.errors import InputError
from simulator.hardware.spec import Hardware
from simulator.strategy import TRANSFER_STRATEGIES, Strategy
from simulator.workload.spec import ModelSpec
from spaces import groups, parallelism, partition, placement
from spaces.parallelism import ParallelDegrees

DIMENSIONS: dict[str, tuple[str, ...]] = {
    "degrees": ("tp", "pp", "dp"),
    "microbatch_size": ("microbatch_size",),
    "schedule": ("schedule", "num_chunks"),
    "recompute": ("recompute",),
    "sequence_parallel": ("sequence_parallel",),
    "zero_stage": ("zero_stage",),
    "groups": ("group_layout", "group_order"),
    "placement": ("placement", "stage_devices"),
    "partition": ("partition", "stage_layers"),
    "transfer_strategy": ("transfer_strategy",),
}
"""Searchable dimensions and the ``Strategy`` fields each sets."""


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


def candidate_degrees(model: ModelSpec, hardware: Hardware, fixed: Mapping[str, object], *,
                      microbatch_choices: Sequence[int] | None = None,
                      max_tp: int | None = None) -> list[ParallelDegrees]:
    """The fixed list behind categorical ``degrees``: legal triples matching fixed tp/pp/dp and
    having at least one microbatch size."""
    batch = fixed.get("global_batch_size")
    found = parallelism.enumerate_degrees(model, hardware, max_tp=max_tp, global_batch_size=batch)
    return [d for d in found
            if all(fixed.get(k, v) == v for k, v in d._asdict().items())
            and parallelism.enumerate_microbatch_sizes(model, d, global_batch_size=batch,
                                                       choices=microbatch_choices)]


def _plan(trial: optuna.trial.Trial, model: ModelSpec, hardware: Hardware, fields: dict,
          searched: set[str], microbatch_choices: Sequence[int] | None, max_tp: int | None) -> ParallelDegrees:
    """Draw degrees, microbatch and schedule into ``fields``; return the degrees."""
    batch = fields.get("global_batch_size")
    if "degrees" in searched:
        choices = candidate_degrees(model, hardware, fields, microbatch_choices=microbatch_choices, max_tp=max_tp)
        fields.update(parallelism.suggest_degrees(trial, choices)._asdict())
    degrees = ParallelDegrees(fields.get("tp", 1), fields.get("pp", 1), fields.get("dp", 1))
    if "microbatch_size" in searched:
        fields["microbatch_size"] = parallelism.suggest_microbatch_size(
            trial, model, degrees, global_batch_size=batch, choices=microbatch_choices)
    if "schedule" in searched:
        choice = parallelism.suggest_schedule(trial, model, degrees, fields.get("microbatch_size", 1),
                                              global_batch_size=batch)
        fields.update(schedule=choice.schedule, num_chunks=choice.num_chunks)
    return degrees


def _memory_and_layout(trial: optuna.trial.Trial, model: ModelSpec, hardware: Hardware, fields: dict,
                       searched: set[str], degrees: ParallelDegrees, custom: Mapping | None) -> None:
    """Draw recompute, sequence parallelism, ZeRO, groups, placement, transfer strategy into ``fields``."""
    if "recompute" in searched:
        fields["recompute"] = parallelism.suggest_recompute(trial)
    if "sequence_parallel" in searched:
        fields["sequence_parallel"] = parallelism.suggest_sequence_parallel(trial, model, degrees)
    if "zero_stage" in searched:
        fields["zero_stage"] = parallelism.suggest_zero_stage(trial, degrees)
    if "groups" in searched:
        fields.update(groups.suggest_group_layout(trial).fields())
    if "placement" in searched:
        fields.update(placement.suggest_placement(trial, hardware, degrees, custom))
    if "transfer_strategy" in searched and degrees.pp > 1:
        fields["transfer_strategy"] = trial.suggest_categorical("transfer_strategy", list(TRANSFER_STRATEGIES))


def suggest_training_strategy(trial: optuna.trial.Trial, model: ModelSpec, hardware: Hardware, *,
                              fixed: Mapping[str, object], searched: set[str],
                              custom_placements: Mapping | None = None,
                              microbatch_choices: Sequence[int] | None = None,
                              max_tp: int | None = None) -> Strategy:
    """A full training ``Strategy`` drawn from ``trial`` over the ``searched`` dimensions.

    Args:
        trial: an Optuna trial (``study.ask()`` or inside an objective).
        model: the model.
        hardware: the machine.
        fixed: ``Strategy`` field values for what is not searched (e.g. ``{"precision": "bf16"}``).
        searched: names from :data:`DIMENSIONS`.
        custom_placements: validated named placements (:func:`spaces.placement.custom_placements`).
        microbatch_choices: allowed microbatch sizes (default: every divisor of ``B / dp``).
        max_tp: largest tensor-parallel degree when ``degrees`` is searched.

    Returns:
        The strategy (always constructible; memory feasibility is the simulator's answer).

    Raises:
        InputError: unknown dimension or field, a field both fixed and searched, no legal degrees,
            or fixed values that do not make a valid ``Strategy``.
    """
    check_dimensions(fixed, searched)
    fields = dict(fixed)
    degrees = _plan(trial, model, hardware, fields, searched, microbatch_choices, max_tp)
    _memory_and_layout(trial, model, hardware, fields, searched, degrees, custom_placements)
    draft = Strategy.from_dict(fields)
    if "partition" in searched:
        fields.update(partition.suggest_partition(trial, model, hardware, draft))
        return Strategy.from_dict(fields)
    return draft
