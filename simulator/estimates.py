"""The screen's estimate of many strategies at once (:func:`estimate_many`): what
:func:`simulator.api.estimate_samples_per_s` gives each, with the closed form evaluated over
arrays of (plan, placement) pairs (:mod:`simulator.timing.vectorised`) instead of once per
strategy. Each plan's stage costs and memory check, and each placement's flows, are worked out
once per call however many strategies share them.
"""

from __future__ import annotations

from collections.abc import Sequence
from operator import attrgetter
from typing import NamedTuple

import numpy as np

from simulator import legality
from simulator.api import _memory
from simulator.errors import InputError
from simulator.hardware.spec import Hardware
from simulator.network.topology import topology_of
from simulator.placement import place
from simulator.replicas import simulated_replicas
from simulator.stacks.spec import MEGATRON_CORE, Stack
from simulator.strategy import Strategy, strategy_fields
from simulator.timing.flows import machine_flows, uses_all_to_all
from simulator.timing.vectorised import FlowTable, PlanTable, makespans_s
from simulator.workload.spec import ModelSpec

PAIRS_PER_ARRAY = 256
"""Most pairs evaluated in one set of arrays (a pair of 80 virtual stages holds about 30 kB of them)."""
_PLAN_FIELDS = attrgetter(*strategy_fields(where=False))
"""A strategy's fields its stage costs, memory and legality but the devices' read (not ``where``)."""
_PLACED_FIELDS = attrgetter(*strategy_fields(placed=True), "transfer_strategy")
"""A strategy's fields its flows read: its placement's and the transfer strategy."""
_PLANS: dict[int, tuple[object, PlanTable]] = {}
"""Tables of stage costs by their ``id`` (held, so the id stays theirs)."""
_FLOWS: dict[int, tuple[object, FlowTable]] = {}
"""Tables of an engine's flows by the ``id`` of :func:`machine_flows`' answer (held)."""
_KEPT = 128
"""Tables of each kind kept (as many as :func:`machine_flows` keeps flows: the objects they hold
stay alive, and a large machine's flows are large)."""


class _Plan(NamedTuple):
    """What a call works out once per plan: its table's index, microbatches, samples per
    iteration and the group of plans evaluated together; None when it exceeds memory."""

    table: int
    num_microbatches: int
    samples: int
    group: tuple[int, int, bool, bool]
    all_to_all: bool


def estimate_many(model: ModelSpec, hardware: Hardware, strategies: Sequence[Strategy],
                  stack: Stack = MEGATRON_CORE) -> list[float]:
    """The closed-form samples/s of each strategy (:func:`simulator.api.estimate_samples_per_s`,
    to rounding: 1e-12 relative), 0 where it exceeds memory or breaks a rule of a legal plan
    (where that function raises :class:`InputError`). Shapes: one value per strategy, in order."""
    values = [0.0] * len(strategies)
    plans: dict[tuple[object, ...], _Plan | None] = {}
    plan_tables: list[PlanTable] = []
    flow_index: dict[tuple[object, ...], int | None] = {}
    flow_tables: list[FlowTable] = []
    groups: dict[tuple[int, int, bool, bool], list[tuple[int, int, int, int, int]]] = {}
    for k, strategy in enumerate(strategies):
        try:
            legality.check_plan(model, hardware, strategy)
        except InputError:
            continue
        key = _PLAN_FIELDS(strategy)
        plan = plans[key] if key in plans else plans.setdefault(key, _plan(model, hardware, strategy, stack,
                                                                             plan_tables))
        if plan is None:
            continue
        where = (_PLACED_FIELDS(strategy), plan.all_to_all)
        table = flow_index[where] if where in flow_index else flow_index.setdefault(
            where, _flow_table(hardware, strategy, plan.all_to_all, flow_tables))
        if table is not None:
            groups.setdefault(plan.group, []).append((k, plan.table, table, plan.num_microbatches, plan.samples))
    for (_, _, training, defers), pairs in groups.items():
        for start in range(0, len(pairs), PAIRS_PER_ARRAY):
            part = np.array(pairs[start:start + PAIRS_PER_ARRAY])
            makespans = makespans_s(plan_tables, flow_tables, part[:, 1], part[:, 2], part[:, 3], training, defers)
            for k, value in zip(part[:, 0].tolist(), (part[:, 4] / makespans).tolist(), strict=True):
                values[k] = value
    return values


def _plan(model: ModelSpec, hardware: Hardware, strategy: Strategy, stack: Stack,
          tables: list[PlanTable]) -> _Plan | None:
    """The plan of ``strategy`` (its table appended to ``tables``), None over memory or where its
    stage costs break a rule (:class:`InputError`)."""
    try:
        m, costs, memory_bytes, in_flight = _memory(model, hardware, strategy, stack)
    except InputError:
        return None
    if legality.memory_shortfall(hardware, memory_bytes, in_flight, strategy.devices_per_stage):
        return None
    kept = _PLANS.get(id(costs))
    if kept is None or kept[0] is not costs:
        if len(_PLANS) >= _KEPT:
            _PLANS.clear()
        kept = _PLANS[id(costs)] = (costs, PlanTable.of(costs))
    tables.append(kept[1])
    group = (strategy.pp, len(costs), strategy.training, legality.schedule_of(strategy).defers_weight_gradients)
    return _Plan(len(tables) - 1, m, strategy.microbatch_size * strategy.dp * m, group, uses_all_to_all(costs))


def _flow_table(hardware: Hardware, strategy: Strategy, all_to_all: bool, tables: list[FlowTable]) -> int | None:
    """The index in ``tables`` of the table of ``strategy``'s flows (:func:`simulator.api._prepare`'s
    placement and the engine's flows; appended), None where the machine has no such placement."""
    topology = topology_of(hardware)
    try:
        placements = place(topology, strategy, simulated_replicas(topology, strategy))
    except InputError:
        return None
    made = machine_flows(topology, placements, hardware.calibration, strategy.transfer_strategy, all_to_all)
    kept = _FLOWS.get(id(made))
    if kept is None or kept[0] is not made:
        if len(_FLOWS) >= _KEPT:
            _FLOWS.clear()
        kept = _FLOWS[id(made)] = (made, FlowTable.of(*made, placements, strategy.transfer_strategy))
    tables.append(kept[1])
    return len(tables) - 1
