"""Degrees of parallelism, microbatch size, pipeline schedule, recompute, sequence parallelism, ZeRO.

The rules of a legal plan live in :mod:`simulator.legality` (Megatron-LM, Narayanan et al., SC'21,
§2-3); this module enumerates with its predicates: ``tp * pp * dp`` devices, ``tp`` dividing the
model, ``pp`` at most the partitionable units, ``dp`` and ``b`` dividing the global batch ``B``, and
interleaving with Megatron's even layers per chunk and ``m % pp == 0``. The search proposes only
what the simulator accepts (a property test checks).

Suggestions never change a categorical's choices between trials (Optuna 5): ``degrees`` is one
categorical over a fixed list of labels like ``"8x20x2"``; the microbatch size is suggested under
``microbatch_size|dp=<dp>`` (its choices depend on ``dp`` only); the schedule under ``schedule`` or
``schedule|only=...`` naming its valid subset (see :mod:`spaces._choices`). Sequence parallelism
is suggested only when ``tp > 1`` (and taken without suggesting under an expert tensor-parallel
degree below ``tp``, which needs it), ZeRO only when ``dp > 1``.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from functools import lru_cache
from typing import NamedTuple, TypeVar, cast

import optuna

from simulator import RECOMPUTES, ZERO_STAGES, Hardware, InputError, ModelSpec
from simulator.legality import (
    context_parallel_legal,
    divisors,
    expert_parallel_legal,
    global_batch,
    interleaving_legal,
    megatron_interleaving,
    partition_units,
    sequence_parallel_legal,
    tp_divides,
)
from spaces._choices import Choice, conditional_name, suggest_among

CHUNK_CHOICES: tuple[int, ...] = (2, 4)
"""Model chunks per device tried with the interleaved schedule (Narayanan et al. SC'21 Fig. 12)."""


CONTEXT_PARALLEL_CHOICES: tuple[int, ...] = (1, 2, 4, 8, 16)
"""Context-parallel degrees the search tries where they are legal (Llama 3 trained its 128K
context with 16: Dubey et al. 2024, §3.3.2, Table 4)."""


EXPERT_PARALLEL_CHOICES: tuple[int, ...] = (1, 2, 4, 8, 16, 32, 64)
"""Expert-parallel degrees the search tries where they divide the experts and ``dp * cp``
(DeepSeek-V3 trained with 64: its technical report, arXiv 2412.19437, §3.2)."""


class ParallelDegrees(NamedTuple):
    """Tensor, pipeline, data, context, expert and expert tensor parallel degrees; ``tp * cp *
    pp * dp`` devices (``ep`` of them carved from the ``dp * cp`` replicas, or from the stage's
    ``tp * cp * dp`` ranks when ``etp`` is 1: :attr:`simulator.Strategy.etp`); and how the
    tensor-parallel group divides the attention (:attr:`simulator.Strategy.attention_split`).
    ``etp`` None is ``tp`` (:meth:`of` writes an ``etp`` equal to ``tp`` as None)."""

    tp: int
    pp: int
    dp: int
    cp: int = 1
    ep: int = 1
    etp: int | None = None
    attention_split: str = "heads"

    @property
    def label(self) -> str:
        """``"TPxPPxDP"``, the categorical value Optuna stores (e.g. ``"8x20x2"``),
        ``"TPxPPxDPxCP"`` with context parallelism (``"8x1x16x4"``), a suffix ``eEP`` with
        expert parallelism (``"1x1x16e16"``), ``tETP`` with an expert tensor-parallel degree
        other than ``tp`` (``"2x1x8e16t1"``) and ``u`` with the attention split by users
        (``"64x1x1u"``)."""
        return f"{self.tp}x{self.pp}x{self.dp}" + (f"x{self.cp}" if self.cp > 1 else "") \
            + (f"e{self.ep}" if self.ep > 1 else "") \
            + (f"t{self.etp}" if self.etp not in (None, self.tp) else "") \
            + ("u" if self.attention_split == "users" else "")

    @classmethod
    def parse(cls, label: str) -> ParallelDegrees:
        """Inverse of :attr:`label`.

        Raises:
            InputError: not three or four positive integers joined by ``x``, then optionally
                ``e`` and one, then optionally ``t`` and one, then optionally ``u``.
        """
        users = label.endswith("u")
        rest, _, etp = label.removesuffix("u").partition("t")
        degrees, _, expert = rest.partition("e")
        parts = degrees.split("x")
        if len(parts) not in (3, 4) or not all(p.isdigit() and int(p) > 0 for p in [*parts, expert or "1",
                                                                                    etp or "1"]):
            raise InputError(f"degrees: expected 'TPxPPxDP[xCP][eEP][tETP][u]' like '8x20x2', got {label!r}")
        cp = int(parts[3]) if len(parts) == 4 else 1
        return cls.of({"tp": int(parts[0]), "pp": int(parts[1]), "dp": int(parts[2]), "cp": cp,
                       "ep": int(expert or 1), "etp": int(etp) if etp else None,
                       "attention_split": "users" if users else "heads"})

    @classmethod
    def of(cls, plan: object) -> ParallelDegrees:
        """The degrees of ``plan``: a :class:`simulator.Strategy` (or anything with its degree
        fields as attributes), or a mapping of ``Strategy`` fields (a degree it lacks takes its
        default here; ``tp``, ``pp``, ``dp`` have none: KeyError, as a missing argument). An
        ``etp`` equal to ``tp`` becomes None (the same layout, :attr:`simulator.Strategy.etp`)."""
        if isinstance(plan, Mapping):
            values = {name: plan[name] for name in cls._fields if name in plan}
        else:
            values = {name: getattr(plan, name) for name in cls._fields}
        if values.get("etp") == values["tp"]:
            values["etp"] = None
        return cls(**values)


class ScheduleChoice(NamedTuple):
    """A pipeline schedule and its model chunks per device (1 except interleaved)."""

    schedule: str
    num_chunks: int = 1

    @property
    def label(self) -> str:
        """``"1f1b"``, or ``"interleaved-1f1b:4"`` with chunks."""
        return self.schedule if self.num_chunks == 1 else f"{self.schedule}:{self.num_chunks}"

    @classmethod
    def parse(cls, label: str) -> ScheduleChoice:
        """Inverse of :attr:`label`."""
        name, _, chunks = label.partition(":")
        return cls(name, int(chunks) if chunks else 1)


def schedule_choices(chunk_choices: Sequence[int] = CHUNK_CHOICES) -> tuple[ScheduleChoice, ...]:
    """The fixed list: GPipe, 1F1B, interleaved 1F1B with each of ``chunk_choices``, then ZB-H1."""
    interleaved = tuple(ScheduleChoice("interleaved-1f1b", v) for v in chunk_choices)
    return (ScheduleChoice("gpipe"), ScheduleChoice("1f1b"), *interleaved, ScheduleChoice("zb-h1"))


def enumerate_degrees(model: ModelSpec, hardware: Hardware, *, devices: int | None = None,
                      max_tp: int | None = None, global_batch_size: int | None = None,
                      attention_splits: Sequence[str] = ("heads",)) -> list[ParallelDegrees]:
    """Every legal ``(tp, pp, dp, cp, ep, etp)`` using exactly ``devices`` devices, sorted by (tp,
    pp, dp), context parallelism (:data:`CONTEXT_PARALLEL_CHOICES`) where the machine runs
    attention fused and ``2 cp`` splits the sequence (:func:`simulator.legality.check_workload`),
    expert parallelism (:data:`EXPERT_PARALLEL_CHOICES`) and expert tensor parallelism ``tp`` or
    1 (:func:`_expert_tp_choices`) for a Mixture-of-Experts model.

    Args:
        model: the model (heads, hidden, layers, batch).
        hardware: the machine; ``devices`` defaults to all of its devices.
        devices: devices to use, ``tp * pp * dp``.
        max_tp: largest tensor-parallel degree (e.g. GPUs per node on a cluster).
        global_batch_size: ``B`` if not the model's.
        attention_splits: the attention splits to offer (``users`` only for inference, where
            ``tp`` need not divide the heads; :func:`simulator.legality.tp_divides`).

    Raises:
        InputError: ``devices`` is below 1 or above the machine's.
    """
    devices = hardware.num_devices if devices is None else devices
    if not 1 <= devices <= hardware.num_devices:
        raise InputError(f"degrees: `devices` must be in 1..{hardware.num_devices}, got {devices}")
    batch, units = global_batch(model, global_batch_size), partition_units(model)
    found = []
    for split in attention_splits:
        for tp in divisors(devices):
            if not tp_divides(model, tp, split) or (max_tp is not None and tp > max_tp):
                continue
            for pp in divisors(devices // tp):
                for cp in _context_parallel_choices(model, hardware, devices // (tp * pp)):
                    dp = devices // (tp * pp * cp)
                    if pp <= units and batch % dp == 0:
                        found += [ParallelDegrees(tp, pp, dp, cp, ep, etp, split)
                                  for etp in _expert_tp_choices(model, tp)
                                  for ep in _expert_parallel_choices(model, dp * cp * tp // (etp or tp))]
    return found


def _expert_tp_choices(model: ModelSpec, tp: int) -> tuple[int | None, ...]:
    """Expert tensor-parallel degrees (:attr:`simulator.Strategy.etp`): ``tp`` (None) always, and
    1 for a Mixture-of-Experts model where ``1 < tp`` and sequence parallelism is legal (an
    ``etp`` below ``tp`` needs it: :func:`simulator.legality.check_plan`). Megatron-Bridge's H100
    MoE recipes run both (``expert_tensor_parallel_size`` 1 under TP 2 for Qwen3-235B-A22B)."""
    return (None, 1) if model.is_moe and tp > 1 and sequence_parallel_legal(model, tp) else (None,)


def _expert_parallel_choices(model: ModelSpec, ranks: int) -> list[int]:
    """The :data:`EXPERT_PARALLEL_CHOICES` dividing the ``ranks`` expert-parallel groups are
    carved from (``dp * cp``, or ``tp * cp * dp / etp``: :attr:`simulator.Strategy.etp`) and legal
    for the model (:func:`simulator.legality.expert_parallel_legal`: 1 only for a dense model)."""
    return [ep for ep in EXPERT_PARALLEL_CHOICES if ranks % ep == 0 and expert_parallel_legal(model, ep)]


def _context_parallel_choices(model: ModelSpec, hardware: Hardware, devices: int) -> list[int]:
    """The :data:`CONTEXT_PARALLEL_CHOICES` that divide ``devices`` and are legal for the model
    on the machine (:func:`simulator.legality.context_parallel_legal`; 1 always)."""
    return [cp for cp in CONTEXT_PARALLEL_CHOICES
            if devices % cp == 0 and context_parallel_legal(model, hardware, cp)]


def enumerate_microbatch_sizes(model: ModelSpec, degrees: ParallelDegrees, *,
                               global_batch_size: int | None = None,
                               choices: Sequence[int] | None = None) -> list[int]:
    """Microbatch sizes ``b`` with ``(B / dp) % b == 0``, increasing; only ``choices`` if given.

    Returns an empty list when ``dp`` does not divide ``B`` or no ``choices`` entry fits.
    """
    batch = global_batch(model, global_batch_size)
    if batch % degrees.dp:
        return []
    sizes = divisors(batch // degrees.dp)
    return sizes if choices is None else [b for b in sizes if b in set(choices)]


def enumerate_schedules(model: ModelSpec, degrees: ParallelDegrees, microbatch_size: int, *,
                        global_batch_size: int | None = None,
                        chunk_choices: Sequence[int] = CHUNK_CHOICES) -> list[ScheduleChoice]:
    """The schedules of :func:`schedule_choices` legal for these degrees and microbatch.

    Interleaved 1F1B with ``v`` chunks needs ``pp > 1``, ``units % (pp v) == 0`` and
    ``m % pp == 0`` with ``m = B / (b dp)`` (Narayanan et al. SC'21 §2.2.2). ZB-H1 needs
    ``pp > 1``: on one stage it is 1F1B without a bubble to fill.
    """
    batch = global_batch(model, global_batch_size)
    m = batch // (microbatch_size * degrees.dp)
    units, pp = partition_units(model), degrees.pp

    def legal(choice: ScheduleChoice) -> bool:
        if choice.schedule == "zb-h1":
            return pp > 1
        if choice.num_chunks == 1:
            return True
        return megatron_interleaving(units, pp, choice.num_chunks) and interleaving_legal(pp, m)

    return [c for c in schedule_choices(chunk_choices) if legal(c)]


def enumerate_recompute() -> tuple[str, ...]:
    """Activation recomputation: none, selective, full (Korthikanti et al., MLSys'23)."""
    return RECOMPUTES


def enumerate_sequence_parallel(model: ModelSpec, degrees: ParallelDegrees) -> tuple[bool, ...]:
    """``(False, True)`` when sequence parallelism means something (transformer, ``tp > 1``,
    ``tp`` divides the sequence; Korthikanti et al. §4.2.2), ``(True,)`` with an expert
    tensor-parallel degree below ``tp`` (which needs it: :func:`simulator.legality.check_plan`),
    else ``(False,)``."""
    if degrees.tp > 1 and sequence_parallel_legal(model, degrees.tp):
        return (True,) if degrees.etp not in (None, degrees.tp) else (False, True)
    return (False,)


def enumerate_zero_stages(degrees: ParallelDegrees) -> tuple[int, ...]:
    """ZeRO stages 0-3 when ``dp > 1``; only 0 otherwise (nothing to shard); 0-2 with expert
    parallelism or an expert tensor-parallel degree below ``tp`` (:class:`simulator.Strategy`
    does not model ZeRO-3 of experts, whose replicas are then not the ``dp * cp`` ranks)."""
    if degrees.dp == 1:
        return (0,)
    return ZERO_STAGES[:-1] if degrees.ep > 1 or degrees.etp is not None else ZERO_STAGES


SHARD_GROUPS: tuple[str, ...] = ("all", "node")
"""ZeRO-3's shard groups the search offers: all data-parallel ranks, or those of one node with
the shards replicated across nodes (FSDP ``HYBRID_SHARD`` as its paper runs it, shard within a
host and replicate across hosts: Zhao et al., VLDB'23, §3.2.2; MiCS, Zhang et al., VLDB'22)."""


def node_shard_group_size(degrees: ParallelDegrees, hardware: Hardware) -> int | None:
    """The ranks of one node holding the same weights, ``devices_per_node / tp``, where ZeRO-3
    gathers per microbatch (devices holding their weights:
    :func:`simulator.workload.stages.zero3_collectives`) and that splits the ``dp * cp`` such
    ranks into two or more groups of two or more; None otherwise."""
    if hardware.memory.sram_dataflow() is not None:
        return None
    size, replicas = hardware.network.devices_per_node // degrees.tp, degrees.dp * degrees.cp
    return size if 2 <= size < replicas and replicas % size == 0 else None


def suggest_degrees(trial: optuna.trial.Trial, choices: Sequence[ParallelDegrees]) -> ParallelDegrees:
    """One of ``choices`` (a fixed list, e.g. :func:`enumerate_degrees`) as categorical ``degrees``.

    Raises:
        InputError: ``choices`` is empty.
    """
    if not choices:
        raise InputError("degrees: no legal (tp, pp, dp) for this model, machine and constraints")
    return ParallelDegrees.parse(trial.suggest_categorical("degrees", list(_labels(tuple(choices)))))


@lru_cache(maxsize=64)
def _labels(choices: tuple[ParallelDegrees, ...]) -> tuple[str, ...]:
    """The labels of ``choices`` (a search asks the same list every trial)."""
    return tuple(d.label for d in choices)


def suggest_microbatch_size(trial: optuna.trial.Trial, model: ModelSpec, degrees: ParallelDegrees, *,
                            global_batch_size: int | None = None, choices: Sequence[int] | None = None,
                            allowed: Collection[object] | None = None) -> int:
    """A microbatch size under ``microbatch_size|dp=<dp>`` (its choices depend on ``dp`` only),
    among ``allowed`` if given (then named by the subset, :func:`spaces._choices.subset_name`).

    Raises:
        InputError: no size is legal (``dp`` does not divide ``B``, or ``choices`` excludes all).
    """
    sizes = enumerate_microbatch_sizes(model, degrees, global_batch_size=global_batch_size, choices=choices)
    if not sizes:
        raise InputError(f"microbatch_size: none of {choices} divides B/dp for dp = {degrees.dp}")
    name = conditional_name("microbatch_size", dp=degrees.dp)
    return int(suggest_among(trial, name, sizes, sizes if allowed is None else allowed))  # type: ignore[arg-type]


def suggest_schedule(trial: optuna.trial.Trial, model: ModelSpec, degrees: ParallelDegrees,
                     microbatch_size: int, *, global_batch_size: int | None = None,
                     chunk_choices: Sequence[int] = CHUNK_CHOICES,
                     allowed: Collection[object] | None = None) -> ScheduleChoice:
    """A legal schedule (among the labels ``allowed``, if given) under ``schedule`` or
    ``schedule|only=<valid subset>``."""
    universe = [c.label for c in schedule_choices(chunk_choices)]
    valid = [c.label for c in enumerate_schedules(model, degrees, microbatch_size,
                                                  global_batch_size=global_batch_size,
                                                  chunk_choices=chunk_choices)
             if allowed is None or c.label in allowed]
    return ScheduleChoice.parse(str(suggest_among(trial, "schedule", universe, valid)))


_C = TypeVar("_C", bound=Choice)


def _suggest_some(trial: optuna.trial.Trial, name: str, options: Sequence[_C],
                  allowed: Collection[object] | None) -> _C:
    """One of ``options`` (those ``allowed``, if given) under :func:`spaces._choices.subset_name`;
    a single option is returned without suggesting."""
    valid = [o for o in options if allowed is None or o in allowed]
    # suggest_among returns one of ``valid``, so a value of the options' type
    return valid[0] if len(valid) == 1 else cast(_C, suggest_among(trial, name, options, valid))


def suggest_recompute(trial: optuna.trial.Trial, allowed: Collection[object] | None = None) -> str:
    """Categorical ``recompute`` over none, selective, full (those ``allowed``, if given)."""
    return str(_suggest_some(trial, "recompute", enumerate_recompute(), allowed))


def suggest_sequence_parallel(trial: optuna.trial.Trial, model: ModelSpec, degrees: ParallelDegrees,
                              allowed: Collection[object] | None = None) -> bool:
    """Categorical ``sequence_parallel`` when meaningful (see :func:`enumerate_sequence_parallel`)
    and not decided by ``allowed``; the one option without suggesting otherwise."""
    return bool(_suggest_some(trial, "sequence_parallel", enumerate_sequence_parallel(model, degrees), allowed))


def suggest_zero_stage(trial: optuna.trial.Trial, degrees: ParallelDegrees,
                       allowed: Collection[object] | None = None) -> int:
    """Categorical ``zero_stage`` (0-3) when ``dp > 1`` and not decided by ``allowed``; the one
    option without suggesting otherwise. Named by the subset of all the stages
    (:data:`simulator.ZERO_STAGES`) offered (:func:`enumerate_zero_stages`: 0-2 with expert
    parallelism, ``zero_stage|without=3``), so each name keeps one list of choices."""
    offered = enumerate_zero_stages(degrees)
    return int(_suggest_some(trial, "zero_stage", ZERO_STAGES, [s for s in offered if allowed is None or s in allowed]))


def suggest_shard_group(trial: optuna.trial.Trial, node_size: int | None, node_fits: bool) -> int | None:
    """``shard_group_size`` for ZeRO-3 under categorical ``shard_group`` (:data:`SHARD_GROUPS`):
    None (all ranks) or ``node_size``, offered when there is one and it fits memory."""
    valid = [g for g in SHARD_GROUPS if g == "all" or (node_size and node_fits)]
    return node_size if _suggest_some(trial, "shard_group", SHARD_GROUPS, valid) == "node" else None
