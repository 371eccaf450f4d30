"""The closed form over arrays of plans: :class:`~simulator.timing.closed_form.ClosedForm`'s
estimate of many (plan, placement) pairs at once, numpy over the pairs and their virtual stages
instead of a Python call per pass (the screen of a search; times in s, bytes per edge).

Every time the closed form takes is linear in the bytes it moves: a step of ``x`` bytes per edge
lasts ``latency + x * seconds_per_byte`` (PALM Eq. 2), a ring collective of ``S`` bytes
``steps * (latency + S / n * seconds_per_byte)``, a two-level one the sum of its levels', and
each moves bytes in proportion to ``S``. So each route of a stage (its TP, DP, CP, EP groups...)
is summed up once per placement by three numbers per collective kind, ``A + B * S`` seconds and
``MU * S`` bytes per edge (:class:`FlowTable`), each plan's passes by the collectives' counts and
byte sums per route and kind (:class:`PlanTable`), and a pass's time alone (PALM Eq. 2 without
contention: its segments' compute, what compute does not hide of their DRAM stream, their
collectives, then ZeRO-3's exposed ones) is one expression over arrays of pairs and stages, as
is the pipeline's closed form and the busiest resource's busy time over them. The values equal
:meth:`ClosedForm.estimate`'s to rounding (a test compares them over a real space to 1e-12).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from simulator.costs import Collective, PassCost, StageCost
from simulator.network.collectives import Flow
from simulator.placement import StagePlacement
from simulator.timing.flows import FlowIndex, StageFlows, all_flows

KINDS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all")
"""Collective kinds, the last axis of a route's coefficients."""
TP, TP_ALL_TO_ALL, DP, CP, EP, ITERATION, EXPERT_DP, DRAM, NEXT, PREVIOUS = range(10)
"""A stage's routes (rows of its bytes and occupancy): its collectives' groups (the TP all-to-all
is the TP ring's where the stage has no all-pairs flow; the iteration's the DP one's without
hybrid sharding), its DRAM stream and its sends to the next and previous stages."""
ROUTES = 10
COLLECTIVE_ROUTES = 7
GROUPS = ("tp", "overlapped", "replica", "cp", "ep", "exposed_dp")
"""A pass's collectives (:class:`~simulator.costs.PassCost` fields) in the order they are timed."""
_ROUTE_OF = np.array([[TP, TP, TP, TP_ALL_TO_ALL], [TP, TP, TP, TP_ALL_TO_ALL], [DP] * 4, [CP] * 4, [EP] * 4, [DP] * 4])
"""The route each group's collective of each kind runs on (:meth:`Machine.collectives_time`)."""
_ROUTE_ONE_HOT = np.eye(ROUTES)[_ROUTE_OF]
_GROUP_ONE_HOT = np.repeat(np.eye(len(GROUPS)), len(_ROUTE_OF[0]), axis=0)
"""Each flattened (group, kind) column's group."""
PASSES = ("forward", "backward", "backward_input", "backward_weight", "optimizer_step")
FORWARD, BACKWARD, BACKWARD_INPUT, BACKWARD_WEIGHT, OPTIMIZER_STEP = range(5)
SCALARS = ("compute_s", "segments", "dram_bytes", "overlap_s", "cp_overlap_s", "idle_s")
_PROBE_BYTES = 2.0 ** 40
"""Size at which a flow's time is read to find its slope (large, so its latency is lost in it
no more than rounding loses it; a power of two, so dividing by it is exact)."""


def _linear(flow: Flow, kind: str, scale: float = 1.0) -> tuple[float, float, float]:
    """``(A, B, MU)`` of a collective of ``kind`` on ``flow`` of ``scale * S`` bytes: it lasts
    ``A + B S`` s and moves ``MU S`` bytes per edge."""
    fixed, _ = flow.collective_time_s(kind, 0.0)
    probe, moved = flow.collective_time_s(kind, scale * _PROBE_BYTES)
    return fixed, (probe - fixed) / _PROBE_BYTES, moved / _PROBE_BYTES


@dataclass(frozen=True, slots=True)
class FlowTable:
    """A placement's flows as coefficients (``pp`` stages).

    Attributes:
        collectives: ``[pp, COLLECTIVE_ROUTES, len(KINDS), 3]``: ``(A, B, MU)`` of each route and kind.
        dram: ``[pp, 3]``: whether the stage streams DRAM, the stream's latency (s) and s per byte.
        sends: ``[pp, 2, 3]``: to the next and previous stage, whether a flow exists, its latency (s)
            and s per byte per edge.
        per_edge: ``[pp]``: bytes per edge of a send per byte (the TP degree with adapters, else 1).
        regroup: ``[pp, 3]``: ``(A, B, MU)`` of rebuilding a received activation of ``S`` bytes on
            the stage's TP route (zeros for TP 1).
        occupancy: s each resource is busy per byte per edge of each route
            (:class:`~simulator.timing.flows.FlowIndex`), the resources that can be the busiest.
    """

    collectives: np.ndarray
    dram: np.ndarray
    sends: np.ndarray
    per_edge: np.ndarray
    regroup: np.ndarray
    occupancy: Occupancy

    @classmethod
    def of(cls, stage_flows: list[StageFlows], p2p: dict[tuple[int, int], Flow], index: FlowIndex,
           placements: tuple[StagePlacement, ...], transfer_strategy: int) -> FlowTable:
        """The table of an engine's flows, p2p flows and their index
        (:func:`simulator.timing.flows.machine_flows`)."""
        pp = len(stage_flows)
        collectives = np.zeros((pp, COLLECTIVE_ROUTES, len(KINDS), 3))
        dram, sends, regroup = np.zeros((pp, 3)), np.zeros((pp, 2, 3)), np.zeros((pp, 3))
        routes: list[list[Flow | None]] = []
        linear: dict[int, list[tuple[float, float, float]]] = {}
        for i, flows in enumerate(stage_flows):
            own = [flows.tp, flows.tp_all_to_all or flows.tp, flows.dp, flows.cp, flows.ep, flows.iteration,
                   flows.expert_dp]
            for r, flow in enumerate(own):
                if flow is not None:
                    if id(flow) not in linear:
                        linear[id(flow)] = [_linear(flow, kind) for kind in KINDS]
                    collectives[i, r] = linear[id(flow)]
            if flows.dram is not None:
                dram[i] = (1.0, flows.dram.latency_s, flows.dram.seconds_per_byte)
            linked = [p2p.get((i, (i + 1) % pp)), p2p.get((i, (i - 1) % pp))]
            for d, flow in enumerate(linked):
                if flow is not None:
                    sends[i, d] = (1.0, flow.latency_s, flow.seconds_per_byte)
            regroup[i] = _regroup(flows.tp, transfer_strategy)
            routes.append([*own, flows.dram, *linked])
        per_edge = np.array([len(p.tp_groups[0]) if transfer_strategy == 2 else 1 for p in placements], dtype=float)
        return cls(collectives, dram, sends, per_edge, regroup, _occupancy(routes, all_flows(stage_flows, p2p), index))


def _regroup(tp: Flow, transfer_strategy: int) -> tuple[float, float, float]:
    """:meth:`Machine.regroup_cost` of ``S`` bytes received as ``(A, B, MU)``."""
    size = tp.group_size
    if size <= 1:
        return 0.0, 0.0, 0.0
    if transfer_strategy == 1:
        return _linear(tp, "all_gather", size)
    return (size - 1) * tp.latency_s, size * tp.seconds_per_byte, float(size)


def _occupancy(routes: list[list[Flow | None]], flows: list[Flow], index: FlowIndex) -> Occupancy:
    """The resources' occupancy (:class:`FlowIndex`) of the flows ``routes`` run on (positions in
    ``flows``, the engine's flows), one column per resource that can be the busiest: resources
    with the same (flow, occupancy) entries are one column, and a column no larger than another
    in every row is left out (bytes moved are never negative, so it is never the only busiest)."""
    position = {id(flow): k for k, flow in enumerate(flows)}
    row_flow = np.array([-1 if f is None else position[id(f)] for stage in routes for f in stage])
    used = np.unique(row_flow[row_flow >= 0])
    kept = np.isin(index.flow, used)
    entries = np.argsort(index.slot[kept], kind="stable")  # by resource, then by flow (the index's order)
    slots, values = index.slot[kept][entries], index.occupancy[kept][entries]
    entry_flows = np.searchsorted(used, index.flow[kept][entries])
    if not len(slots):
        return Occupancy(np.zeros((len(row_flow), 0)))
    starts = np.flatnonzero(np.r_[True, slots[1:] != slots[:-1]])
    width = int(np.diff(np.r_[starts, len(slots)]).max())
    column = np.arange(len(slots)) - np.repeat(starts, np.diff(np.r_[starts, len(slots)]))
    resource = np.repeat(np.arange(len(starts)), np.diff(np.r_[starts, len(slots)]))
    keys = np.full((len(starts), 2 * width), -1.0)
    keys[resource, column], keys[resource, width + column] = entry_flows, values
    distinct = _distinct_rows(keys)
    chosen = keys[distinct]
    k, j = np.nonzero(chosen[:, :width] >= 0)
    per_flow = np.zeros((len(used), len(distinct)))
    per_flow[chosen[k, j].astype(int), k] = chosen[k, width + j]
    per_flow = _undominated(per_flow)
    on_row = np.zeros((len(row_flow), per_flow.shape[1]))
    rows = np.flatnonzero(row_flow >= 0)
    on_row[rows] = per_flow[np.searchsorted(used, row_flow[rows])]
    return Occupancy(on_row)


def _distinct_rows(keys: np.ndarray) -> np.ndarray:
    """The first of each set of equal rows of ``keys``, by a random projection of each row
    (rows projected alike checked equal; where two are not, by sorting the rows)."""
    projected = keys @ np.random.default_rng(0).random(keys.shape[1])
    _, distinct, inverse = np.unique(projected, return_index=True, return_inverse=True)
    if not (keys[distinct][inverse.reshape(-1)] == keys).all():
        _, distinct = np.unique(keys, axis=0, return_index=True)
    return np.asarray(distinct)


_DOMINATING = 8
"""Largest columns each column is compared with (:func:`_undominated`)."""


def _undominated(columns: np.ndarray) -> np.ndarray:
    """``columns`` ``[n, c]`` without those no larger in every row than one of the
    :data:`_DOMINATING` largest by sum (distinct columns: none dominates itself)."""
    if columns.shape[1] <= 1:
        return columns
    largest = np.argsort(-columns.sum(axis=0), kind="stable")[:_DOMINATING]
    dominated = np.zeros(columns.shape[1], dtype=bool)
    for t in largest:
        if not dominated[t]:
            below: np.ndarray = np.all(columns <= columns[:, t:t + 1], axis=0)
            below[t] = False
            dominated |= below
    return columns[:, ~dominated]


@dataclass(frozen=True, slots=True)
class Occupancy:
    """The busy time of a table's resources: ``per_row`` ``[pp * ROUTES, c]``, the seconds a
    candidate resource is busy per byte per edge moved on each route row (:class:`FlowIndex`'s
    occupancy of the row's flow; the rows of one flow alike)."""

    per_row: np.ndarray

    def busiest_s(self, moved: np.ndarray) -> np.ndarray:
        """The busiest resource's busy time (s) for each ``[K, pp * ROUTES]`` bytes per edge moved
        (:meth:`FlowIndex.busy_s`)."""
        if not self.per_row.shape[1]:
            return np.zeros(len(moved))
        busiest: np.ndarray = (moved @ self.per_row).max(axis=1)
        return busiest


def _sums(collectives: tuple[Collective, ...]) -> tuple[list[float], list[float]]:
    """Counts and byte sums (``count * size_bytes``) of ``collectives`` per kind."""
    counts, sizes = [0.0] * len(KINDS), [0.0] * len(KINDS)
    for c in collectives:
        k = KINDS.index(c.kind)
        counts[k] += c.count
        sizes[k] += c.count * c.size_bytes
    return counts, sizes


@dataclass(frozen=True, slots=True)
class PlanTable:
    """A plan's stage costs as arrays (``J = pp * num_chunks`` virtual stages, chunk-major).

    Attributes:
        scalars: ``[J, len(PASSES), len(SCALARS)]``.
        counts: ``[J, len(PASSES), len(GROUPS), len(KINDS)]``: collectives of each group and kind.
        sizes: the same, their bytes (``count * size_bytes``) summed.
        sends: ``[J, 2]``: activation and gradient bytes sent per microbatch.
        gradients: ``[J, 2, 2, len(KINDS)]``: counts and byte sums of the data-parallel and the
            expert-data-parallel collectives of the iteration.
    """

    scalars: np.ndarray
    counts: np.ndarray
    sizes: np.ndarray
    sends: np.ndarray
    gradients: np.ndarray

    @classmethod
    def of(cls, costs: tuple[StageCost, ...]) -> PlanTable:
        """The table of a plan's stage costs (each distinct pass summed up once: a plan's middle
        stages share theirs)."""
        distinct: dict[int, int] = {}
        passes: list[PassCost] = []
        for cost in costs:
            for p in PASSES:
                if id(getattr(cost, p)) not in distinct:
                    distinct[id(getattr(cost, p))] = len(passes)
                    passes.append(getattr(cost, p))
        which = np.array([[distinct[id(getattr(cost, p))] for p in PASSES] for cost in costs])
        scalars = np.array([_scalars(c) for c in passes])[which]
        summed = np.array([[_sums(c) for c in _groups(pass_cost)] for pass_cost in passes])[which]
        gradients = np.array([[_sums(cost.dp_collectives), _sums(cost.expert_dp_collectives)] for cost in costs])
        sends = np.array([[cost.activation_send_bytes, cost.gradient_send_bytes] for cost in costs], dtype=float)
        return cls(scalars, summed[..., 0, :], summed[..., 1, :], sends, gradients)


def _scalars(cost: PassCost) -> tuple[float, ...]:
    return cost.compute_s, cost.segments, cost.dram_bytes, cost.overlap_s, cost.cp_overlap_s, cost.idle_s


def _groups(cost: PassCost) -> tuple[tuple[Collective, ...], ...]:
    """A pass's collectives in :data:`GROUPS` order."""
    return (cost.tp_collectives, cost.overlapped_collectives, cost.replica_collectives, cost.cp_collectives,
            cost.ep_collectives, cost.exposed_dp_collectives)


def makespans_s(plans: list[PlanTable], tables: list[FlowTable], plan_of: np.ndarray, table_of: np.ndarray,
                num_microbatches: np.ndarray, training: bool, defers_weight_gradients: bool) -> np.ndarray:
    """The closed-form makespan (s) of each pair ``k``: plan ``plans[plan_of[k]]`` on the flows
    ``tables[table_of[k]]`` with ``num_microbatches[k]`` microbatches; every plan of the same
    virtual stages, every table of the same stages, all pairs training or not, deferring weight
    gradients (ZB-H1) or not (:meth:`ClosedForm.estimate`'s formula and its sources).

    Shapes: ``plan_of``, ``table_of``, ``num_microbatches`` and the result ``[K]``.
    """
    used, plan_of = np.unique(plan_of, return_inverse=True)
    plans = [plans[u] for u in used]
    used, table_of = np.unique(table_of, return_inverse=True)
    tables = [tables[u] for u in used]
    pp, virtual = len(tables[0].per_edge), len(plans[0].sends)
    chunks, stage = virtual // pp, np.arange(virtual) % pp
    scalars = np.stack([p.scalars for p in plans])[plan_of]
    # only the (group, kind) columns some pass uses: [K, J, passes, used]
    counts, sizes = (np.stack([getattr(p, f) for p in plans]).reshape(len(plans), virtual, len(PASSES), -1)
                     for f in ("counts", "sizes"))
    used = np.flatnonzero((counts != 0).any(axis=(0, 1, 2)) | (sizes != 0).any(axis=(0, 1, 2)))
    counts, sizes = counts[plan_of][..., used], sizes[plan_of][..., used]
    collectives = np.stack([t.collectives for t in tables])
    grouped = collectives[:, :, _ROUTE_OF, np.arange(len(KINDS))].reshape(len(tables), pp, -1, 3)
    grouped = grouped[:, :, used][table_of][:, stage]
    dram = np.stack([t.dram for t in tables])[table_of][:, stage]
    group_of, route_of = _GROUP_ONE_HOT[used], _ROUTE_ONE_HOT.reshape(-1, ROUTES)[used]

    def timed(p: int) -> tuple[np.ndarray, np.ndarray]:
        return _pass(scalars[:, :, p], counts[:, :, p], sizes[:, :, p], grouped, dram, group_of, route_of)

    m = num_microbatches.astype(float)
    time, moved = timed(FORWARD)
    sent, sent_moved = _sends(plans, tables, plan_of, table_of, stage, 0)
    time, moved = time + sent, moved + sent_moved
    deferred = np.zeros_like(time)
    if training and defers_weight_gradients:
        backward, backward_moved = timed(BACKWARD_INPUT)
        deferred, deferred_moved = timed(BACKWARD_WEIGHT)
        time, moved = time + backward, moved + backward_moved + deferred_moved
    elif training:
        backward, backward_moved = timed(BACKWARD)
        sent, sent_moved = _sends(plans, tables, plan_of, table_of, stage, 1)
        time, moved = time + backward + sent, moved + backward_moved + sent_moved
    per_stage, waiting = _by_stage(time + deferred, pp), _by_stage(deferred, pp)
    period = per_stage.max(axis=1)
    pipeline = m * period + (per_stage.sum(axis=1) - period) / chunks
    if waiting.any():  # deferred weight gradients fill 2 W of each other stage's fill and drain
        slowest = per_stage.argmax(axis=1)
        filled = np.maximum(per_stage - 2 * waiting, 0.0)
        filled[np.arange(len(filled)), slowest] = 0.0
        pipeline = np.where(waiting.any(axis=1), m * period + filled.sum(axis=1) / chunks, pipeline)
    moved = _by_stage(moved, pp) * m[:, None, None]
    if training:
        iteration = collectives[:, :, [ITERATION, EXPERT_DP]][table_of][:, stage]
        update, update_moved = _update(plans, plan_of, iteration, timed(OPTIMIZER_STEP))
        pipeline = pipeline + _by_stage(update, pp).max(axis=1)
        moved = moved + _by_stage(update_moved, pp)
    makespans: np.ndarray = np.maximum(pipeline, _busiest_s(tables, table_of, moved.reshape(len(moved), -1)))
    return makespans


def _pass(scalars: np.ndarray, counts: np.ndarray, sizes: np.ndarray, grouped: np.ndarray, dram: np.ndarray,
          group_of: np.ndarray, route_of: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Time alone ``[K, J]`` (s) of one pass of each virtual stage and the bytes per edge it moves
    on each route ``[K, J, ROUTES]`` (:meth:`ClosedForm._alone`: per segment its compute, what
    compute does not hide of its DRAM stream and its collectives, then ZeRO-3's exposed ones),
    its collectives ``[K, J, u]`` of ``u`` (group, kind) columns, each column's group and route
    ``[u, len(GROUPS)]`` and ``[u, ROUTES]`` (one-hot)."""
    compute, segments, dram_bytes, overlap, cp_overlap, idle = np.moveaxis(scalars, -1, 0)
    timed = (counts * grouped[..., 0] + sizes * grouped[..., 1]) @ group_of
    tp, overlapped, replica, cp, ep, exposed = np.moveaxis(timed, -1, 0)
    streams = (dram[..., 0] > 0) & (dram_bytes > 0)
    stream = np.where(streams, dram[..., 1] + dram_bytes / segments * dram[..., 2], 0.0)
    collective = (tp + np.maximum(overlapped - overlap, 0.0) + np.maximum(replica - compute, 0.0)
                  + np.maximum(cp - cp_overlap, 0.0) + ep)
    stall = np.maximum(stream - compute / segments, 0.0)
    time = segments * (compute / segments + stall + collective / segments) + exposed + idle
    moved = (sizes * grouped[..., 2]) @ route_of
    moved[..., DRAM] += np.where(streams, dram_bytes, 0.0)
    return time, moved


def _sends(plans: list[PlanTable], tables: list[FlowTable], plan_of: np.ndarray, table_of: np.ndarray,
           stage: np.ndarray, direction: int) -> tuple[np.ndarray, np.ndarray]:
    """Time ``[K, J]`` (s) of each virtual stage's send of a microbatch's activations to the next
    stage (``direction`` 0; the last sends none) or its gradients to the previous one (1; the first
    sends none), with the receiver's regroup, and the bytes per edge they move ``[K, J, ROUTES]``
    (:meth:`ClosedForm.send_s`: bytes per edge over bandwidth plus latency, then the regroup)."""
    pp, virtual = len(tables[0].per_edge), len(stage)
    size = np.stack([p.sends[:, direction] for p in plans])[plan_of]
    if direction == 0:
        size[:, -1] = 0.0
    else:
        size[:, 0] = 0.0
    link = np.stack([t.sends[:, direction] for t in tables])[table_of][:, stage]
    receiver = (stage + (1 if direction == 0 else -1)) % pp
    regroup = np.stack([t.regroup for t in tables])[table_of][:, receiver]
    size = np.where((link[..., 0] > 0) & (size > 0), size, 0.0)
    per_edge = size * np.stack([t.per_edge for t in tables])[table_of][:, stage]
    time = np.where(size > 0, link[..., 1] + per_edge * link[..., 2] + regroup[..., 0] + regroup[..., 1] * size, 0.0)
    moved = np.zeros((len(size), virtual, ROUTES))
    moved[..., NEXT + direction] = per_edge
    regrouped = np.zeros((len(size), virtual // pp, pp, ROUTES))
    regrouped[..., TP] = (regroup[..., 2] * size).reshape(len(size), virtual // pp, pp)
    # the regroup's bytes are the receiver's: stage i's virtual stage j = c pp + i sends to stage i +- 1
    shifted = np.roll(regrouped, 1 if direction == 0 else -1, axis=2).reshape(len(size), virtual, ROUTES)
    return time, moved + shifted


def _update(plans: list[PlanTable], plan_of: np.ndarray, coefficients: np.ndarray,
            optimizer: tuple[np.ndarray, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Time ``[K, J]`` (s) of each virtual stage's part of its stage's gradient update and the
    bytes it moves (:meth:`ClosedForm.update_s`: its data-parallel collectives on the iteration's
    flow, its experts' on the expert-data-parallel groups, then its optimizer step), given the
    coefficients ``[K, J, 2, len(KINDS), 3]`` of those two routes."""
    gradients = np.stack([p.gradients for p in plans])[plan_of]
    time, moved = optimizer
    moved = moved.copy()
    for part, route in enumerate((ITERATION, EXPERT_DP)):
        counts, sizes = gradients[:, :, part, 0], gradients[:, :, part, 1]
        coefficient = coefficients[:, :, part]
        time = time + (counts * coefficient[..., 0] + sizes * coefficient[..., 1]).sum(axis=-1)
        moved[..., route] += (sizes * coefficient[..., 2]).sum(axis=-1)
    return time, moved


def _by_stage(values: np.ndarray, pp: int) -> np.ndarray:
    """``[K, J, ...]`` summed over each stage's chunks: ``[K, pp, ...]`` (virtual stage ``c pp + i``)."""
    summed: np.ndarray = values.reshape(len(values), -1, pp, *values.shape[2:]).sum(axis=1)
    return summed


def _busiest_s(tables: list[FlowTable], table_of: np.ndarray, moved: np.ndarray) -> np.ndarray:
    """The busiest resource's busy time (s) of each pair, given the bytes per edge ``[K, pp *
    ROUTES]`` each route moved (:meth:`Machine.busiest_s`)."""
    busiest = np.zeros(len(moved))
    for t in np.unique(table_of):
        rows = table_of == t
        busiest[rows] = tables[t].occupancy.busiest_s(moved[rows])
    return busiest
