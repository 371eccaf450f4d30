"""The screen's estimate of many strategies at once (:func:`estimate_many`): what
:func:`simulator.api.estimate_samples_per_s` gives each, with the closed form
(:mod:`simulator.timing.vectorised`) evaluated over arrays of all their (plan, placement) pairs
instead of over one pair per strategy. Each plan's stage costs and memory check, and each
placement's flows, are worked out once per call however many strategies share them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from operator import attrgetter
from typing import Any, NamedTuple

import numpy as np

from simulator import legality
from simulator.api import PLACEMENT_FIELDS, _memory
from simulator.errors import InputError
from simulator.hardware.spec import Hardware
from simulator.network.topology import topology_of
from simulator.placement import place
from simulator.replicas import simulated_replicas
from simulator.stacks.spec import MEGATRON_CORE, Stack
from simulator.strategy import Strategy, strategy_fields
from simulator.timing.flows import machine_flows, uses_all_to_all
from simulator.timing.vectorised import FlowTable, PlanTable, flow_table, iterations, plan_table
from simulator.workload.spec import ModelSpec

STAGES_PER_ARRAY = 20_480
"""Most (pair, virtual stage) rows evaluated in one set of arrays (a row holds about 400 bytes of
them): 256 pairs of 80 virtual stages, 4,096 of 5."""
_PLAN_FIELDS = attrgetter(*strategy_fields(where=False))
"""A strategy's fields its stage costs, memory and legality but the devices' read (not ``where``)."""
_PLACED_NAMES = (*(name for name in strategy_fields(placed=True) if name != "zero_stage"), "transfer_strategy")
_PLACED_FIELDS = attrgetter(*_PLACED_NAMES)
"""A strategy's fields its flows read: its placement's and the transfer strategy. Not ``zero_stage``:
:func:`~simulator.placement.place` and :func:`~simulator.replicas.simulated_replicas` read the
ZeRO shards (:attr:`Strategy.zero_shards`: ``shard_group_size`` or ``dp * cp``), never the stage,
so the plans of one placement differing in their ZeRO stage share its flows (built once, not four
times; the tests compare every estimate with the strategy's alone)."""


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
    values: list[float] = estimate_product(model, hardware, strategies, ({},), stack)[:, 0].tolist()
    return values


def estimate_product(model: ModelSpec, hardware: Hardware, plans: Sequence[Strategy],
                     layouts: Sequence[Mapping[str, Any]], stack: Stack = MEGATRON_CORE) -> np.ndarray:
    """:func:`estimate_many` of every plan under every layout: entry ``(p, l)`` is the estimate of
    ``plans[p].with_fields(**layouts[l])`` (0 where that strategy exceeds memory or breaks a rule,
    or the fields contradict each other), without building a strategy per pair: each plan's
    stage costs and memory are worked out once (they read no ``where`` field), each distinct
    placement's flows once (:data:`_PLACED_FIELDS`: the layout's, and the plan's degrees and
    ZeRO shards), and the rules that read a layout (:func:`legality.check_plan`'s devices) once per
    placement. A layout holds ``where`` fields only (groups, placement, transfer strategy...),
    an empty one none (each plan as it is). Shape ``[len(plans), len(layouts)]``.

    Raises:
        ValueError: a layout sets a field the stage costs read (not ``where``).
    """
    changed = {name for layout in layouts for name in layout}
    if changed - set(PLACEMENT_FIELDS):
        raise ValueError(f"layouts may set only `where` fields, got {sorted(changed - set(PLACEMENT_FIELDS))}")
    values = np.zeros((len(plans), len(layouts)))
    plan_tables: list[PlanTable] = []
    flow_tables: list[FlowTable] = []
    found: dict[tuple[object, ...], _Plan | None] = {}
    placed: dict[tuple[object, ...], list[int]] = {}
    flow_index: dict[tuple[object, ...], int] = {}
    every = set.intersection(*(set(layout) for layout in layouts)) if layouts else set()
    kept = tuple(name for name in _PLACED_NAMES if name not in every)  # the plan's, in some layout
    of_plan: list[tuple[_Plan, list[int]] | None] = []
    for strategy in plans:
        key = _PLAN_FIELDS(strategy)
        plan = found[key] if key in found else found.setdefault(key, _plan(model, hardware, strategy, stack,
                                                                            plan_tables))
        if plan is None:
            of_plan.append(None)
            continue
        where = (tuple(getattr(strategy, name) for name in kept), plan.all_to_all)
        if where not in placed:
            placed[where] = [_placed_table(model, hardware, strategy, layout, plan.all_to_all, flow_index,
                                           flow_tables) for layout in layouts]
        of_plan.append((plan, placed[where]))
    groups: dict[tuple[int, int, bool, bool], list[np.ndarray]] = {}
    for p, planned in enumerate(of_plan):
        if planned is None:
            continue
        plan, tables = planned
        columns = np.flatnonzero(np.array(tables) >= 0)
        rows = np.empty((len(columns), 5), dtype=np.int64)
        rows[:, 0], rows[:, 1], rows[:, 2] = p * len(layouts) + columns, plan.table, np.array(tables)[columns]
        rows[:, 3], rows[:, 4] = plan.num_microbatches, plan.samples
        groups.setdefault(plan.group, []).append(rows)
    flat = values.reshape(-1)
    for (_, virtual, training, defers), parts in groups.items():
        pairs = np.concatenate(parts)
        pairs = pairs[np.argsort(pairs[:, 2], kind="stable")]  # a placement's pairs together: one busiest_s each
        size = max(STAGES_PER_ARRAY // virtual, 1)
        for start in range(0, len(pairs), size):
            part = pairs[start:start + size]
            makespans = iterations(plan_tables, flow_tables, part[:, 1], part[:, 2], part[:, 3], training,
                                   defers).makespan_s
            flat[part[:, 0]] = part[:, 4] / makespans
    return values


def _placed_table(model: ModelSpec, hardware: Hardware, plan: Strategy, layout: Mapping[str, Any], all_to_all: bool,
                  index: dict[tuple[object, ...], int], tables: list[FlowTable]) -> int:
    """The index in ``tables`` of the flows of ``plan`` under ``layout`` (each distinct
    placement's built once, :func:`_flow_table`), -1 where the layout contradicts the plan's
    fields or breaks a rule of the devices (:func:`legality.check_plan`, whose other rules
    the plan passed), or the machine has no such placement."""
    try:
        strategy = plan.with_fields(**layout) if layout else plan
        legality.check_plan(model, hardware, strategy)
    except InputError:
        return -1
    where = (_PLACED_FIELDS(strategy), all_to_all)
    if where not in index:
        index[where] = _flow_table(hardware, strategy, all_to_all, tables, index)
    return index[where]


def _plan(model: ModelSpec, hardware: Hardware, strategy: Strategy, stack: Stack,
          tables: list[PlanTable]) -> _Plan | None:
    """The plan of ``strategy`` (its table appended to ``tables``), None over memory or where it
    breaks a rule (:class:`InputError`) that reads no ``where`` field (its placement's are
    :func:`_placed_table`'s)."""
    try:
        m, costs, memory_bytes, in_flight = _memory(model, hardware, replace(strategy, **PLACEMENT_FIELDS), stack)
    except InputError:
        return None
    if legality.memory_shortfall(hardware, memory_bytes, in_flight, strategy.devices_per_stage):
        return None
    tables.append(plan_table(costs))
    group = (strategy.pp, len(costs), strategy.training, legality.schedule_of(strategy).defers_weight_gradients)
    return _Plan(len(tables) - 1, m, strategy.microbatch_size * strategy.dp * m, group, uses_all_to_all(costs))


def _flow_table(hardware: Hardware, strategy: Strategy, all_to_all: bool, tables: list[FlowTable],
                index: dict[tuple[object, ...], int]) -> int:
    """The index in ``tables`` of the table of ``strategy``'s flows (:func:`simulator.api._prepare`'s
    placement and the engine's flows; appended unless ``index`` holds the same placement's, which
    layouts that differ in fields but place the stages alike share), -1 where the machine has no
    such placement."""
    topology = topology_of(hardware)
    try:
        placements = place(topology, strategy, simulated_replicas(topology, strategy))
    except InputError:
        return -1
    placed = (placements, strategy.transfer_strategy, all_to_all)
    if placed not in index:
        made = machine_flows(topology, placements, hardware.calibration, strategy.transfer_strategy, all_to_all)
        tables.append(flow_table(*made, placements, strategy.transfer_strategy))
        index[placed] = len(tables) - 1
    return index[placed]
