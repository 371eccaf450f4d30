"""PALM Algorithm 1: SRAM allocation of a stage's operators and their DRAM traffic (mesh only).

Fang et al., PALM, arXiv 2406.03868, §IV-C and Algorithm 1. Per device of a stage (operators
already split by tensor parallelism), with ``S`` the device's SRAM capacity and the stage sums
``Wt = sum(Op.Wt)``, ``WSG = sum(Op.Wt + optimizer states + gradients)``, ``ACT = sum(Op.I)``:

* ``WSG + ACT <= S``: **resident** (S_{WSG ACT} of §IV-C's text, missing from the printed
  algorithm): everything stays on chip, no DRAM traffic.
* ``Wt < S``: **activation_stream**, weights stay on chip; forward traffic ``Op.I + Op.O``.
* else ``ACT <= S``: **weight_stream**, activations stay on chip; forward traffic ``Op.Wt``.
* else per operator ``Phi1 = ceil(Op.Wt / S) Op.I``, ``Phi2 = ceil(Op.I / S) Op.Wt``;
  **weight_stationary** with ``Phi1 + Op.O`` if ``Phi1 < Phi2``, else **input_stationary** with
  ``Phi2 + Op.O``.

Deviation from the printed algorithm, on purpose: its second test reads ``WSG <= S``, which can
never hold once ``Wt >= S`` (``WSG >= Wt``) except at equality, and the ``ACT`` it sums is never
used. The text of §IV-C ("S_WSG, S_ACT: one of them stored on chip") and the authors' code
(``tile.py``, ``tile_dataflow``: ``elif act_size < sram_cap: WeightStream``) test the
activations, which is what we do. As printed, ``Phi`` counts only the re-streamed operand, not
the one pass over the stationary one; we keep that.

Backward and gradient update (the paper: "follows the same methodology", not printed). The
backward of an operator is two products, charged like Algorithm 1 charges a forward operator in
the stage's branch, with ``G`` the operator's gradient bytes (working precision):

* data gradient ``dX = dY W^T`` (input ``dY`` of ``Op.O`` bytes, weight ``Op.Wt``, output ``dX``
  of ``Op.I`` bytes): activation_stream ``Op.O + Op.I``; weight_stream ``Op.Wt``; stationary
  ``Phi(Op.O, Op.Wt) + Op.I``;
* weight gradient ``dW = X^T dY`` (only when ``Op.Wt > 0``; inputs ``X`` and ``dY``, output
  ``G``): activation_stream ``Op.I + Op.O`` (+ ``G`` written when ``WSG > S``); weight_stream
  ``G``; stationary ``Phi(Op.I + Op.O, G) + G``,

where ``Phi(x, w) = min(ceil(w/S) x, ceil(x/S) w)`` is Algorithm 1's WS/IS choice. Recomputed
operators add their forward traffic to the backward. The gradient update loads and stores the
fp32 states (PALM §IV-A: "full-precision weights load from DRAM and store back"):
``parameters x`` :func:`~simulator.workload.memory.optimizer_step_bytes_per_parameter`
(divided by ``dp`` with ZeRO >= 1), or nothing when ``WSG <= S`` (all states on chip).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

from simulator.strategy import Strategy
from simulator.workload.memory import StateSharding, optimizer_step_bytes_per_parameter, state_sharding
from simulator.workload.operators import Operator

SramStrategy = Literal["resident", "activation_stream", "weight_stream", "weight_stationary", "input_stationary"]

OperatorGroup = tuple[Sequence[Operator], int]
"""Operators repeated ``count`` times on a stage (e.g. one layer's operators x layers)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class StageTotals:
    """Algorithm 1's stage sums on one device (bytes).

    Attributes:
        weight_bytes: ``Wt``, the stage's weights read per microbatch (an embedding table's
            looked-up rows, not the table: :attr:`Operator.table_bytes`).
        wsg_bytes: ``WSG``, weights + optimizer states + gradients (ZeRO-aware).
        activation_bytes: ``ACT``, the operators' inputs.
        parameters: the stage's parameters (``Wt`` and embedding tables / bytes per element).
    """

    weight_bytes: float
    wsg_bytes: float
    activation_bytes: float
    parameters: float


@dataclass(frozen=True, slots=True, kw_only=True)
class OperatorAccess:
    """Algorithm 1's decision for one operator.

    Attributes:
        name: the operator's name.
        strategy: the SRAM strategy chosen.
        forward_dram_bytes: ``Op_Fd_Access_Size`` (bytes).
        backward_dram_bytes: DRAM traffic of its backward, recompute excluded (bytes).
    """

    name: str
    strategy: SramStrategy
    forward_dram_bytes: float
    backward_dram_bytes: float


@dataclass(frozen=True, slots=True, kw_only=True)
class SramPlan:
    """DRAM traffic of one device of a stage for one microbatch (update: per iteration).

    Attributes:
        forward_dram_bytes: forward pass (bytes).
        backward_dram_bytes: backward pass, recompute included (bytes; 0 for inference).
        update_dram_bytes: gradient update (bytes; 0 for inference).
        resident_bytes: bytes kept in SRAM: ``WSG`` or ``Wt`` (activation_stream), ``ACT``
            (weight_stream), the whole SRAM (stationary).
        strategies: the strategy of each distinct operator, in group order (Algorithm 1's
            names, or the loop orders of :mod:`simulator.workload.tiled_stage`).
        forward_multicast_bytes, backward_multicast_bytes: bytes of operands a tensor-parallel
            group reads once from DRAM and multicasts to its devices, per device, in the pass
            (0 under Algorithm 1).
        forward_replica_bytes, backward_replica_bytes: weight bytes the data-parallel replicas
            of a stage read once from DRAM and multicast to each other, per device, in the pass
            (0 under Algorithm 1).
    """

    forward_dram_bytes: float
    backward_dram_bytes: float
    update_dram_bytes: float
    resident_bytes: float
    strategies: tuple[str, ...]
    forward_multicast_bytes: float = 0.0
    backward_multicast_bytes: float = 0.0
    forward_replica_bytes: float = 0.0
    backward_replica_bytes: float = 0.0


@dataclass(frozen=True, slots=True, kw_only=True)
class PlanFields:
    """What a stage's DRAM planner takes of the strategy: whether it trains (a backward and an
    update), the working precision's bytes per element, ZeRO's sharding of the model states
    (:func:`~simulator.workload.memory.state_sharding`), the update's traffic per parameter
    (:func:`~simulator.workload.memory.optimizer_step_bytes_per_parameter`, bytes), the
    tensor-parallel degree and the data-parallel replicas that share one chip's weights (the
    tiled dataflow's multicast groups: :func:`replicas_per_chip`)."""

    training: bool
    bytes_per_element: float
    states: StateSharding
    update_bytes_per_parameter: float
    tp: int
    replicas_per_chip: int

    @classmethod
    def of(cls, strategy: Strategy, replicas_per_chip: int | None = None) -> PlanFields:
        """The fields of ``strategy``, its replicas sharing one chip's weights ``replicas_per_chip``
        (:func:`replicas_per_chip`; None: all ``dp`` of them, one chip)."""
        return cls(training=strategy.training, bytes_per_element=strategy.bytes_per_element,
                   states=state_sharding(strategy),
                   update_bytes_per_parameter=optimizer_step_bytes_per_parameter(strategy),
                   tp=strategy.tp, replicas_per_chip=replicas_per_chip or strategy.dp)


def replicas_per_chip(strategy: Strategy, cores_per_chip: int) -> int:
    """Data-parallel replicas of a stage that sit on one chip (die) of ``cores_per_chip`` cores
    and so can read their common weights once from its DRAM and multicast them over its NoC:
    as many whole replica groups (``tp x cp`` cores, placed contiguously) as the chip holds, at
    most ``dp``; 1 when a replica spans chips. Replicas on different chips each read their own
    copy from their own chip's DRAM, which holds it (every core's weights are in its chip's
    memory), as tt-metal's data parallelism over submeshes runs an independent replica of the
    model on each (tenstorrent/tt-metal ``tech_reports/LLMs/llms.md`` @0100dbfc §3.3.2, "Data
    Parallel": each submesh holds a full copy of the weights)."""
    group = strategy.tp * strategy.cp
    return max(1, min(strategy.dp, cores_per_chip // group))


def stage_totals(groups: Iterable[OperatorGroup], fields: PlanFields) -> StageTotals:
    """Algorithm 1, first loop: ``Wt``, ``WSG`` and ``ACT`` of the stage on one device.

    Training sums every operator's input into ``ACT`` as Algorithm 1 does (they are stashed for
    the backward). Inference stashes nothing: an operator's input can be freed once it has run,
    so ``ACT`` is the largest ``Op.I + Op.O`` of the stage (the live set of a sequential schedule).
    """
    groups = list(groups)
    weight = held = activation = 0.0
    for ops, count in groups:
        weight += count * sum(op.weight_bytes for op in ops)
        held += count * sum(op.parameter_bytes for op in ops)
        activation += count * sum(op.input_bytes for op in ops)
    if not fields.training:
        activation = max((op.input_bytes + op.output_bytes for ops, _ in groups for op in ops), default=0.0)
    parameters = held / fields.bytes_per_element
    wsg = fields.states.of(parameters).total_bytes
    return StageTotals(weight_bytes=weight, wsg_bytes=wsg, activation_bytes=activation, parameters=parameters)


def _phi(streamed: float, stationary: float, capacity: float) -> tuple[float, bool]:
    """``(min(Phi1, Phi2), Phi1 < Phi2)``: ``Phi1 = ceil(W/S) I`` (WS), ``Phi2 = ceil(I/S) W`` (IS)."""
    phi1 = math.ceil(stationary / capacity) * streamed
    phi2 = math.ceil(streamed / capacity) * stationary
    return (phi1, True) if phi1 < phi2 else (phi2, False)


def _backward(op: Operator, branch: str, totals: StageTotals, capacity: float, gradient: float) -> float:
    """Backward DRAM bytes of ``op`` (data gradient + weight gradient), see the module docstring."""
    if branch == "resident":
        return 0.0
    if branch == "activation_stream":
        spill = gradient if totals.wsg_bytes > capacity else 0.0
        data = op.output_bytes + op.input_bytes
        return data + ((op.input_bytes + op.output_bytes + spill) if gradient else 0.0)
    if branch == "weight_stream":
        return op.weight_bytes + gradient
    data = _phi(op.output_bytes, op.weight_bytes, capacity)[0] + op.input_bytes
    weight = (_phi(op.input_bytes + op.output_bytes, gradient, capacity)[0] + gradient) if gradient else 0.0
    return data + weight


def stage_branch(totals: StageTotals, capacity: float) -> str:
    """Algorithm 1's stage-wide test: ``resident``, ``activation_stream``, ``weight_stream`` or
    ``stationary``.

    ``resident`` is the strategy S_{WSG ACT} of PALM §IV-C's text ("weights, optimizer states,
    weight gradients and input/output activations ... statically stored in on-chip SRAM"),
    which the printed Algorithm 1 omits: when ``WSG + ACT`` fit, nothing goes to DRAM (stage
    inputs and outputs travel over the NoC as pipeline messages).
    """
    if totals.wsg_bytes + totals.activation_bytes <= capacity:
        return "resident"
    if totals.weight_bytes < capacity:
        return "activation_stream"
    if totals.activation_bytes <= capacity:
        return "weight_stream"
    return "stationary"


def operator_access(op: Operator, totals: StageTotals, capacity: float, fields: PlanFields) -> OperatorAccess:
    """Algorithm 1, second loop, for one operator (and its backward, see the module docstring).

    Args:
        op: the operator, split by tensor parallelism.
        totals: the stage sums from :func:`stage_totals`.
        capacity: SRAM capacity ``S`` of one device (bytes).
        fields: the strategy's mode (no backward for inference).
    """
    branch = stage_branch(totals, capacity)
    gradient = op.weight_bytes if fields.training else 0.0
    chosen: SramStrategy
    if branch == "resident":
        chosen, forward = "resident", 0.0
    elif branch == "activation_stream":
        chosen, forward = "activation_stream", op.input_bytes + op.output_bytes
    elif branch == "weight_stream":
        chosen, forward = "weight_stream", op.weight_bytes
    else:
        phi, stationary_weights = _phi(op.input_bytes, op.weight_bytes, capacity)
        chosen = "weight_stationary" if stationary_weights else "input_stationary"
        forward = phi + op.output_bytes
    backward = _backward(op, branch, totals, capacity, gradient) if fields.training else 0.0
    return OperatorAccess(name=op.name, strategy=chosen, forward_dram_bytes=forward,
                          backward_dram_bytes=backward)


def update_bytes(totals: StageTotals, capacity: float, fields: PlanFields) -> float:
    """Gradient-update traffic: fp32 states loaded and stored unless all of ``WSG`` is on chip."""
    if not fields.training or totals.wsg_bytes <= capacity:
        return 0.0
    shard = fields.states.optimizer_shards
    return totals.parameters / shard * fields.update_bytes_per_parameter


def _resident(totals: StageTotals, capacity: float) -> float:
    branch = stage_branch(totals, capacity)
    if branch == "resident":
        return totals.wsg_bytes + totals.activation_bytes
    if branch == "activation_stream":
        return totals.wsg_bytes if totals.wsg_bytes <= capacity else totals.weight_bytes
    return totals.activation_bytes if branch == "weight_stream" else capacity


def plan_stage(groups: Sequence[OperatorGroup], capacity: float, fields: PlanFields,
               recomputed: Sequence[OperatorGroup] = ()) -> SramPlan:
    """Algorithm 1 over a stage: SRAM strategies and DRAM traffic of one device.

    Args:
        groups: the stage's operators, each group repeated ``count`` times (identical layers).
        capacity: SRAM capacity of one device (bytes).
        fields: the strategy's precision, mode, model states and update (:class:`PlanFields`).
        recomputed: operators re-run in the backward (recompute); their forward traffic is
            added to the backward.

    Returns:
        The stage's :class:`SramPlan`.
    """
    totals = stage_totals(groups, fields)
    forward = backward = 0.0
    strategies: list[str] = []
    for ops, count in groups:
        for op in ops:
            access = operator_access(op, totals, capacity, fields)
            forward += count * access.forward_dram_bytes
            backward += count * access.backward_dram_bytes
            strategies.append(access.strategy)
    if fields.training:
        for ops, count in recomputed:
            backward += count * sum(operator_access(op, totals, capacity, fields).forward_dram_bytes
                                    for op in ops)
    return SramPlan(forward_dram_bytes=forward, backward_dram_bytes=backward,
                    update_dram_bytes=update_bytes(totals, capacity, fields),
                    resident_bytes=_resident(totals, capacity), strategies=tuple(strategies))
