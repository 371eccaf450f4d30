"""The closed form: an iteration's time from each pass's, send's and update's time alone, no
events, over arrays of (plan, placement) pairs (numpy over the pairs and their virtual stages,
not a Python call per pass; times in s, bytes per edge). It is the ``estimate`` network
(:meth:`simulator.engine.Engine.estimate`, one pair), the screen of a search
(:func:`simulator.estimate_product`, many) and the steady state a short simulation is checked
against.

Every time the closed form takes is linear in the bytes it moves: a step of ``x`` bytes per edge
lasts ``latency + x * seconds_per_byte`` (PALM Eq. 2), a ring collective of ``S`` bytes
``steps * (latency + S / n * seconds_per_byte)``, a two-level one the sum of its levels', and
each moves bytes in proportion to ``S``. So each route of a stage (its TP, DP, CP, EP groups...)
is summed up once per placement by three numbers per collective kind, ``A + B * S`` seconds and
``MU * S`` bytes per edge (:class:`FlowTable`), each plan's passes by the collectives' counts and
byte sums per route and kind (:class:`PlanTable`), and a pass's time alone (PALM Eq. 2 without
contention: per segment its compute, what compute does not hide of its DRAM stream, its TP
collectives, then ZeRO-3's exposed ones) is one expression over arrays of pairs and stages, as
is the pipeline's closed form and the busiest resource's busy time over them (:func:`iterations`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple, TypeVar

import numpy as np

from simulator.costs import Collective, PassCost, StageCost
from simulator.network.collectives import Flow
from simulator.placement import StagePlacement
from simulator.timing.flows import FlowIndex, StageFlows, all_flows

_T = TypeVar("_T")

KINDS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all")
"""Collective kinds, the last axis of a route's coefficients."""
_KIND = {kind: k for k, kind in enumerate(KINDS)}
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
_ROUTE_ONE_HOT = np.eye(ROUTES)[_ROUTE_OF].reshape(-1, ROUTES)
"""Each flattened (group, kind) column's route."""
_GROUP_ONE_HOT = np.repeat(np.eye(len(GROUPS)), len(KINDS), axis=0)
"""Each flattened (group, kind) column's group."""
_WAYS = np.array([1, -1])
"""The stage a send goes to, from the sender's: the next (activations), the previous (gradients)."""
PASSES = ("forward", "backward", "backward_input", "backward_weight", "optimizer_step")
FORWARD, BACKWARD, BACKWARD_INPUT, BACKWARD_WEIGHT, OPTIMIZER_STEP = range(5)
_STEPS = {(False, False): (FORWARD,), (False, True): (FORWARD,), (True, False): (FORWARD, BACKWARD, OPTIMIZER_STEP),
          (True, True): (FORWARD, BACKWARD_INPUT, BACKWARD_WEIGHT, OPTIMIZER_STEP)}
"""The passes timed by (training, deferring weight gradients): each microbatch's, then the update's."""
SCALARS = ("compute_s", "segments", "dram_bytes", "idle_s")
HIDDEN = 5
"""The groups of :data:`GROUPS` timed within the segments (ZeRO-3's exposed collectives after them)."""
_FLOOR = np.array([-np.inf, 0.0, 0.0, 0.0, 0.0])
"""What each of those groups adds to a pass at least, less what hides it (:attr:`PlanTable.hides`):
the TP collectives all of their time, the others what is not hidden (the expert-parallel ones
all of it but under a merged pass's compute, :attr:`~simulator.costs.PassCost.ep_overlap_s`)."""
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
        grouped: ``[pp, len(GROUPS), len(KINDS), 3]``: ``(A, B, MU)`` of a pass's collective of each
            group and kind on the route it runs on.
        update: ``[pp, 2, len(KINDS), 3]``: the same of the iteration's data-parallel and
            expert-data-parallel collectives.
        dram: ``[pp, 3]``: whether the stage streams DRAM, the stream's latency (s) and s per byte.
        sends: ``[pp, 2, 3]``: to the next and previous stage, whether a flow exists, its latency (s)
            and s per byte per edge.
        per_edge: ``[pp]``: bytes per edge of a send per byte (the TP degree with adapters, else 1).
        receiving: ``[pp, 2, 3]``: ``(A, B, MU)`` of rebuilding an activation of ``S`` bytes the
            stage sends to the next and the previous stage in the receiver's TP groups (zeros for TP 1).
        index: the flows' (flow, resource) pairs and their occupancy (s per byte per edge).
        row_flow: ``[pp * ROUTES]``: the position of each route's flow in the engine's flows
            (:func:`~simulator.timing.flows.all_flows`), -1 where the stage has none.
        flows: how many flows the engine has.
    """

    grouped: np.ndarray
    update: np.ndarray
    dram: np.ndarray
    sends: np.ndarray
    per_edge: np.ndarray
    receiving: np.ndarray
    index: FlowIndex
    row_flow: np.ndarray
    flows: int
    _stages: dict[int, _Stages] = field(default_factory=dict, repr=False, compare=False)
    _resources: list[Resources] = field(default_factory=list, repr=False, compare=False)

    def busiest_s(self, moved: np.ndarray) -> np.ndarray:
        """The busiest resource's busy time (s) of each of ``K`` pairs, given the bytes per edge
        ``[K, pp * ROUTES]`` each route moved: bytes per edge of each flow times its occupancy,
        summed per resource (:meth:`~simulator.timing.flows.FlowIndex.busy_s` over many pairs:
        :class:`Resources`, built the first time)."""
        if not self._resources:
            self._resources.append(Resources.of(self.row_flow, self.index))
        return self._resources[0].busiest_s(moved)

    def stages(self, virtual: int) -> _Stages:
        """The table's arrays of each of ``virtual`` virtual stages (chunk-major: virtual stage
        ``c pp + i`` runs on stage ``i``), kept."""
        kept = self._stages.get(virtual)
        if kept is None:
            pp = len(self.per_edge)
            stage = np.arange(virtual) % pp
            linked = self.sends[stage, :, 0] > 0
            linked[-1, 0] = linked[0, 1] = False  # the last virtual stage sends no activation, the first no gradient
            # the regroup's bytes are the receiver's: virtual stage c pp + i sends to stage i +- 1,
            # counted in chunk c (they are summed over chunks)
            sender = (np.arange(virtual) // pp * pp)[:, None] + (stage[:, None] - _WAYS) % pp
            kept = self._stages[virtual] = _Stages(
                _components(self.grouped[stage, None].reshape(virtual, 1, -1, 3)), _components(self.update[stage]),
                _components(self.dram[stage, None]), _components(self.sends[stage]),
                _components(self.receiving[stage]), self.per_edge[stage, None], linked, sender)
        return kept

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
        position = {id(flow): k for k, flow in enumerate(all_flows(stage_flows, p2p))}
        row_flow = np.array([-1 if f is None else position[id(f)] for stage in routes for f in stage])
        receiving = regroup[(np.arange(pp)[:, None] + _WAYS) % pp]
        return cls(collectives[:, _ROUTE_OF, np.arange(len(KINDS))], collectives[:, [ITERATION, EXPERT_DP]], dram,
                   sends, per_edge, receiving, index, row_flow, len(position))

    def flow_bytes(self, moved: np.ndarray) -> np.ndarray:
        """Bytes per edge each of the engine's flows moved ``[flows]``, given those of each route
        ``[pp * ROUTES]`` (routes on one flow summed)."""
        rows = self.row_flow >= 0
        moved_bytes: np.ndarray = np.bincount(self.row_flow[rows], weights=moved[rows], minlength=self.flows)
        return moved_bytes


def _components(values: np.ndarray) -> np.ndarray:
    """``values`` ``[..., n]`` as ``[n, ...]``, each component contiguous (numpy's small
    operations are quickest on few contiguous axes)."""
    return np.ascontiguousarray(np.moveaxis(values, -1, 0))


class _Stages(NamedTuple):
    """A :class:`FlowTable`'s arrays of each virtual stage (``J``), the three components of its
    coefficients first (:func:`_components`): ``grouped`` ``[3, J, 1, len(GROUPS) * len(KINDS)]``,
    ``update`` ``[3, J, 2, len(KINDS)]``, ``dram`` ``[3, J, 1]``, ``sends`` and ``receiving``
    ``[3, J, 2]``; ``per_edge`` ``[J, 1]``; ``linked`` ``[J, 2]``: whether the virtual stage sends
    to the next and the previous one; ``sender`` ``[J, 2]``: whose send to it each virtual stage's
    stage regroups."""

    grouped: np.ndarray
    update: np.ndarray
    dram: np.ndarray
    sends: np.ndarray
    receiving: np.ndarray
    per_edge: np.ndarray
    linked: np.ndarray
    sender: np.ndarray


def _regroup(tp: Flow, transfer_strategy: int) -> tuple[float, float, float]:
    """:meth:`Machine.regroup_cost` of ``S`` bytes received as ``(A, B, MU)``."""
    size = tp.group_size
    if size <= 1:
        return 0.0, 0.0, 0.0
    if transfer_strategy == 1:
        return _linear(tp, "all_gather", size)
    return (size - 1) * tp.latency_s, size * tp.seconds_per_byte, float(size)


@dataclass(frozen=True, slots=True)
class Resources:
    """The resources a table's flows cross (:class:`FlowIndex`), as dense matrices over the pairs'
    route rows: ``rows``, the rows on some flow; ``per_flow`` ``[len(rows), F]``, the one of the
    ``F`` flows they run on each row takes (one-hot); ``occupancy`` ``[F, R]``, each flow's
    occupancy (s per byte per edge) of each of the ``R`` resources they cross (a few MB on the
    largest machines: DeepSeek-V3 on 1,024 H100s, 96 flows by 4,096 links)."""

    rows: np.ndarray
    per_flow: np.ndarray
    occupancy: np.ndarray

    @classmethod
    def of(cls, row_flow: np.ndarray, index: FlowIndex) -> Resources:
        """The resources of ``index`` the flows of ``row_flow`` (positions in the engine's flows,
        -1 none) cross."""
        rows = np.flatnonzero(row_flow >= 0)
        used, position = np.unique(row_flow[rows], return_inverse=True)
        per_flow = np.zeros((len(rows), len(used)))
        per_flow[np.arange(len(rows)), position] = 1.0
        entries = np.flatnonzero(np.isin(index.flow, used))
        slots, slot = np.unique(index.slot[entries], return_inverse=True)
        occupancy = np.zeros((len(used), len(slots)))
        np.add.at(occupancy, (np.searchsorted(used, index.flow[entries]), slot), index.occupancy[entries])
        return cls(rows, per_flow, occupancy)

    def busiest_s(self, moved: np.ndarray) -> np.ndarray:
        """The busiest resource's busy time (s) for each ``[K, pp * ROUTES]`` bytes per edge moved:
        bytes per edge of each flow times its occupancy, summed per resource
        (:meth:`FlowIndex.busy_s`, two matrix products)."""
        if not self.occupancy.shape[1]:
            return np.zeros(len(moved))
        busiest: np.ndarray = ((moved[:, self.rows] @ self.per_flow) @ self.occupancy).max(axis=1)
        return busiest


def _sums(collectives: tuple[Collective, ...]) -> tuple[list[float], list[float]]:
    """Counts and byte sums (``count * size_bytes``) of ``collectives`` per kind."""
    counts, sizes = [0.0] * len(KINDS), [0.0] * len(KINDS)
    for c in collectives:
        k = _KIND[c.kind]
        counts[k] += c.count
        sizes[k] += c.count * c.size_bytes
    return counts, sizes


@dataclass(frozen=True, slots=True)
class PlanTable:
    """A plan's stage costs as arrays (``J = pp * num_chunks`` virtual stages, chunk-major; the
    passes of :data:`PASSES`).

    Attributes:
        scalars: ``[len(SCALARS), J, len(PASSES)]``.
        hides: ``[J, len(PASSES), HIDDEN]``: what hides each group's collectives (s): nothing the
            TP and expert-parallel ones, the overlap the overlapped ones (TP multicasts and
            overlap), the compute the replicas' weight multicast and ZeRO-3's prefetched gathers,
            the attention's compute (``cp_overlap_s``) context parallelism's ring.
        counts: ``[J, len(PASSES), len(GROUPS) * len(KINDS)]``: collectives of each group and kind.
        sizes: the same, their bytes (``count * size_bytes``) summed.
        busy: ``[2, J, len(PASSES)]``: each pass's busy time (compute and launch gaps) and host
            time (s), which the stages' times (:data:`STATS`) count.
        used: the (group, kind) columns some pass has collectives of (the others are left out of
            the arrays an iteration multiplies).
        sends: ``[J, 2]``: activation and gradient bytes sent per microbatch.
        gradients: ``[2, J, 2, len(KINDS)]``: counts and byte sums of the data-parallel and the
            expert-data-parallel collectives of the iteration.
    """

    scalars: np.ndarray
    hides: np.ndarray
    counts: np.ndarray
    sizes: np.ndarray
    busy: np.ndarray
    used: np.ndarray
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
        values = np.array([_values(c) for c in passes])[which].transpose(2, 0, 1)  # [values, J, passes]
        summed = np.array([[_sums(c) for c in _groups(pass_cost)] for pass_cost in passes])
        columns = summed.transpose(2, 0, 1, 3).reshape(2, len(passes), -1)[:, which]  # [2, J, passes, columns]
        gradients = np.array([[_sums(cost.dp_collectives), _sums(cost.expert_dp_collectives)]
                              for cost in costs]).transpose(2, 0, 1, 3)
        sends = np.array([[cost.activation_send_bytes, cost.gradient_send_bytes] for cost in costs], dtype=float)
        hidden = len(SCALARS) + HIDDEN
        return cls(values[:len(SCALARS)], values[len(SCALARS):hidden].transpose(1, 2, 0), columns[0], columns[1],
                   values[hidden:], np.flatnonzero((summed != 0).any(axis=(0, 2)).reshape(-1)), sends, gradients)


def _values(cost: PassCost) -> tuple[float, ...]:
    """A pass's :data:`SCALARS`, what hides its groups' collectives and its busy and host time."""
    return (cost.compute_s, cost.segments, cost.dram_bytes, cost.idle_s, 0.0, cost.overlap_s, cost.compute_s,
            cost.cp_overlap_s, cost.ep_overlap_s, cost.busy_s, cost.host_s)


def _groups(cost: PassCost) -> tuple[tuple[Collective, ...], ...]:
    """A pass's collectives in :data:`GROUPS` order."""
    return (cost.tp_collectives, cost.overlapped_collectives, cost.replica_collectives, cost.cp_collectives,
            cost.ep_collectives, cost.exposed_dp_collectives)


_FLOWS: dict[int, tuple[object, FlowTable]] = {}
"""Tables of an engine's flows by the ``id`` of :func:`~simulator.timing.flows.machine_flows`'
stage flows (held, so the id stays theirs)."""
_PLANS: dict[int, tuple[object, PlanTable]] = {}
"""Tables of stage costs by their ``id`` (held)."""
KEPT = 128
"""Tables of each kind kept (as many as :func:`~simulator.timing.flows.machine_flows` keeps flows:
the objects they hold stay alive, and a large machine's flows are large)."""


def flow_table(stage_flows: list[StageFlows], p2p: dict[tuple[int, int], Flow], index: FlowIndex,
               placements: tuple[StagePlacement, ...], transfer_strategy: int) -> FlowTable:
    """:meth:`FlowTable.of`, built once per :func:`~simulator.timing.flows.machine_flows` answer
    (the last :data:`KEPT`)."""
    kept = _FLOWS.get(id(stage_flows))
    if kept is None or kept[0] is not stage_flows:
        if len(_FLOWS) >= KEPT:
            _FLOWS.clear()
        kept = _FLOWS[id(stage_flows)] = (stage_flows, FlowTable.of(stage_flows, p2p, index, placements,
                                                                    transfer_strategy))
    return kept[1]


def plan_table(costs: tuple[StageCost, ...]) -> PlanTable:
    """:meth:`PlanTable.of`, built once per stage costs (the last :data:`KEPT`)."""
    kept = _PLANS.get(id(costs))
    if kept is None or kept[0] is not costs:
        if len(_PLANS) >= KEPT:
            _PLANS.clear()
        kept = _PLANS[id(costs)] = (costs, PlanTable.of(costs))
    return kept[1]


STATS = ("compute_s", "communication_s", "dram_stall_s", "optimizer_s", "host_s")
"""A stage's times over the iteration (s), the fields of :class:`~simulator.timing.records.StageStats`
an iteration's closed form gives (:func:`iterations` with ``stats``)."""


class Iterations(NamedTuple):
    """The closed form of ``K`` pairs of ``pp`` stages (:func:`iterations`).

    Attributes:
        makespan_s: ``[K]``: the iteration (s).
        period_s: ``[K]``: the steady-state time per microbatch (s): the slowest stage's, at least
            the busiest resource's busy time per microbatch.
        moved: ``[K, pp * ROUTES]``: bytes per edge each stage's routes move over the iteration.
        stats: ``[K, pp, len(STATS)]``: each stage's times (s), None unless asked.
    """

    makespan_s: np.ndarray
    period_s: np.ndarray
    moved: np.ndarray
    stats: np.ndarray | None


def iterations(plans: list[PlanTable], tables: list[FlowTable], plan_of: np.ndarray, table_of: np.ndarray,
               num_microbatches: np.ndarray, training: bool, defers_weight_gradients: bool,
               stats: bool = False) -> Iterations:
    """The closed-form iteration of each pair ``k``: plan ``plans[plan_of[k]]`` on the flows
    ``tables[table_of[k]]`` with ``num_microbatches[k]`` microbatches; every plan of the same
    virtual stages, every table of the same stages, all pairs training or not, deferring weight
    gradients (ZB-H1) or not. ``stats`` adds each stage's times.

    Each pass and send takes its time alone (:func:`_passes`, :func:`_sends`). With ``t_i`` the
    forward and backward passes and sends of all chunks of stage ``i`` for one microbatch, the
    pipeline takes ``m max_i t_i + (sum_i t_i - max_i t_i) / v`` (GPipe and 1F1B take
    ``(m + p - 1)(t_f + t_b)`` with equal stages, and interleaving ``v`` chunks divides the fill
    and drain by ``v``: Narayanan et al. SC'21 §2.2; with unequal stages the slowest sets the
    steady state), then the slowest gradient update (:func:`_update`). A schedule that defers
    weight gradients (ZB-H1) runs them in the fill and drain: each stage but the slowest adds
    ``max(t_i - 2 w_i, 0)`` with ``w_i`` its weight-gradient passes, which gives ZB-H1's
    ``(m + p - 1)(t_f + t_b + t_w) - 2 (p - 1) t_w`` with equal stages (Qi et al. ICLR'24 §2.1: a
    bubble of ``(p - 1)(t_f + t_b - t_w)``); its gradient sends are not counted. No resource can
    be busier than the iteration, so the makespan is at least the busiest resource's busy time:
    bytes per edge of each flow times its occupancy, summed over flows (the bound a
    work-conserving sharing model approaches when one resource saturates).

    Shapes: ``plan_of``, ``table_of``, ``num_microbatches`` ``[K]``; the result's are :class:`Iterations`'.
    """
    plans, plan_of = _compact(plans, plan_of)
    tables, table_of = _compact(tables, table_of)
    pp, virtual = len(tables[0].per_edge), len(plans[0].sends)
    steps = list(_STEPS[training, defers_weight_gradients])
    used = plans[0].used if len(plans) == 1 else np.unique(np.concatenate([p.used for p in plans]))
    stages = [t.stages(virtual) for t in tables]
    scalars = _gather(plans, plan_of, "scalars", lambda a: a[..., steps])
    counts, sizes = (_gather(plans, plan_of, f, lambda a: a[:, :, steps][..., used]) for f in ("counts", "sizes"))
    alone = _passes(scalars, _gather(plans, plan_of, "hides", lambda a: a[:, :, steps]), counts, sizes,
                    _gather(stages, table_of, "grouped", lambda a: a[..., used]), _gather(stages, table_of, "dram"),
                    used)
    directions = 2 if training and not defers_weight_gradients else 1
    sent, sent_moved = _sends(_gather(plans, plan_of, "sends"), stages, table_of, pp, directions)
    m = num_microbatches.astype(float)
    time, moved = alone.time[:, :, 0] + sent[..., 0], alone.moved[:, :, 0] + sent_moved[:, :, 0]
    waiting = None
    if training and defers_weight_gradients:
        time, moved = time + alone.time[:, :, 1], moved + alone.moved[:, :, 1] + alone.moved[:, :, 2]
        time, waiting = time + alone.time[:, :, 2], _by_stage(alone.time[:, :, 2], pp)
    elif training:
        time, moved = time + alone.time[:, :, 1] + sent[..., 1], moved + alone.moved[:, :, 1] + sent_moved[:, :, 1]
    per_stage = _by_stage(time, pp)
    period = per_stage.max(axis=1)
    pipeline = m * period + (per_stage.sum(axis=1) - period) / (virtual // pp)
    if waiting is not None and waiting.any():  # deferred weight gradients fill 2 W of each other stage's
        slowest = per_stage.argmax(axis=1)  # fill and drain
        filled = np.maximum(per_stage - 2 * waiting, 0.0)
        filled[np.arange(len(filled)), slowest] = 0.0
        pipeline = np.where(waiting.any(axis=1), m * period + filled.sum(axis=1) / (virtual // pp), pipeline)
    moved = _by_stage(moved, pp) * m[:, None, None]
    gradient_s = np.zeros_like(time)
    if training:
        update, update_moved, gradient_s = _update(_gather(plans, plan_of, "gradients"),
                                                   _gather(stages, table_of, "update"), alone.time[:, :, -1],
                                                   alone.moved[:, :, -1])
        pipeline = pipeline + _by_stage(update, pp).max(axis=1)
        moved = moved + _by_stage(update_moved, pp)
    moved = moved.reshape(len(moved), -1)
    busiest = _busiest_s(tables, table_of, moved)
    times = None
    if stats:
        times = _stage_times(_gather(plans, plan_of, "busy", lambda a: a[..., steps]), training, alone, gradient_s,
                             scalars, m, pp)
    return Iterations(np.maximum(pipeline, busiest), np.maximum(period, busiest / m), moved, times)


def _compact(items: list[_T], of: np.ndarray) -> tuple[list[_T], np.ndarray]:
    """``items`` some ``of`` uses, and ``of`` renumbered to them."""
    if len(items) == 1:
        return items, of
    used, of = np.unique(of, return_inverse=True)
    return [items[u] for u in used], of.reshape(-1)


def _gather(items: Sequence[object], of: np.ndarray, name: str,
            select: Callable[[np.ndarray], np.ndarray] | None = None) -> np.ndarray:
    """Attribute ``name`` of ``items[of[k]]`` for each ``k``, of which ``select`` takes a part
    (given them stacked, ``[len(items), ...]``): ``[K, ...]`` (read only)."""
    stacked = getattr(items[0], name)[None] if len(items) == 1 else np.stack([getattr(i, name) for i in items])
    if select is not None:
        stacked = select(stacked)
    if len(stacked) == 1:
        return stacked if len(of) == 1 else np.broadcast_to(stacked, (len(of), *stacked.shape[1:]))
    gathered: np.ndarray = stacked[of]
    return gathered


class _Alone(NamedTuple):
    """Passes alone ``[K, J, passes]``: their time (s), DRAM stall (s), communication (s), and the
    bytes per edge they move on each route ``[K, J, passes, ROUTES]``."""

    time: np.ndarray
    stall: np.ndarray
    communication: np.ndarray
    moved: np.ndarray


def _passes(scalars: np.ndarray, hides: np.ndarray, counts: np.ndarray, sizes: np.ndarray, grouped: np.ndarray,
            dram: np.ndarray, used: np.ndarray) -> _Alone:
    """Time alone of passes of each virtual stage (:data:`SCALARS` ``[K, S, J, passes]``), PALM
    Eq. 2 without contention: per segment its compute, what compute does not hide of its DRAM
    stream and its collectives (the TP ones, what ``hides`` ``[K, J, passes, HIDDEN]`` does not
    of the overlapped, replicas' and context-parallel ones, and expert parallelism's), then
    ZeRO-3's exposed ones and the pass's launch gaps and host time. Its collectives' counts and
    byte sums ``[K, J, passes, u]`` in the ``u`` (group, kind) columns ``used`` (indices into
    ``len(GROUPS) * len(KINDS)``; the others have none), their coefficients on the stage's routes
    ``[K, 3, J, 1, u]`` and its DRAM stream's ``[K, 3, J, 1]`` (:class:`FlowTable`)."""
    compute, segments, dram_bytes, idle = (scalars[:, k] for k in range(len(SCALARS)))
    timed = (counts * grouped[:, 0] + sizes * grouped[:, 1]) @ _GROUP_ONE_HOT[used]
    exposed = timed[..., HIDDEN]
    streams = (dram[:, 0] > 0) & (dram_bytes > 0)
    per_segment = compute / segments
    stream = np.where(streams, dram[:, 1] + dram_bytes / segments * dram[:, 2], 0.0)
    collective = np.maximum(timed[..., :HIDDEN] - hides, _FLOOR).sum(axis=-1)
    stall = np.maximum(stream - per_segment, 0.0)
    time = segments * (per_segment + stall + collective / segments) + exposed + idle
    moved = (sizes * grouped[:, 2]) @ _ROUTE_ONE_HOT[used]
    moved[..., DRAM] += np.where(streams, dram_bytes, 0.0)
    return _Alone(time, segments * stall, collective + exposed, moved)


def _sends(size: np.ndarray, stages: list[_Stages], table_of: np.ndarray, pp: int,
           directions: int) -> tuple[np.ndarray, np.ndarray]:
    """Time ``[K, J, directions]`` (s) of each virtual stage's send of a microbatch's activations
    to the next stage (direction 0; the last sends none) and its gradients to the previous one
    (1, with ``directions`` 2; the first sends none) of ``size`` ``[K, J, 2]`` bytes, with the
    receiver's regroup, and the bytes per edge they move ``[K, J, directions, ROUTES]``: bytes per
    edge over bandwidth plus latency (PALM Eq. 2), then the regroup
    (:meth:`~simulator.timing.machine.Machine.regroup_cost`)."""
    link = _gather(stages, table_of, "sends")[..., :directions]
    regroup = _gather(stages, table_of, "receiving")[..., :directions]
    size = size[:, :, :directions]
    sends = _gather(stages, table_of, "linked")[:, :, :directions] & (size > 0)
    size = np.where(sends, size, 0.0)
    per_edge = size * _gather(stages, table_of, "per_edge")
    time = np.where(sends, link[:, 1] + per_edge * link[:, 2] + regroup[:, 0] + regroup[:, 1] * size, 0.0)
    moved = np.zeros((*size.shape, ROUTES))
    ways = np.arange(directions)
    moved[:, :, ways, NEXT + ways] = per_edge
    moved[..., TP] = (regroup[:, 2] * size)[:, stages[0].sender[:, :directions], ways]
    return time, moved


def _update(gradients: np.ndarray, coefficients: np.ndarray, optimizer_s: np.ndarray,
            optimizer_moved: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Time ``[K, J]`` (s) of each virtual stage's part of its stage's gradient update, the bytes
    it moves ``[K, J, ROUTES]`` and the time of its collectives ``[K, J]`` (s): its data-parallel
    collectives on the iteration's flow, its experts' on the expert-data-parallel groups
    (:meth:`~simulator.timing.machine.Machine.gradient_collectives_time`), then its optimizer step
    (``optimizer_s``, ``optimizer_moved``), given their counts and byte sums ``[K, 2, J, 2,
    len(KINDS)]`` and the coefficients ``[K, 3, J, 2, len(KINDS)]`` of those two routes."""
    counts, sizes = gradients[:, 0], gradients[:, 1]
    parts = (counts * coefficients[:, 0] + sizes * coefficients[:, 1]).sum(axis=-1)
    moved, routed = optimizer_moved.copy(), (sizes * coefficients[:, 2]).sum(axis=-1)
    moved[..., ITERATION] += routed[..., 0]
    moved[..., EXPERT_DP] += routed[..., 1]
    return optimizer_s + parts[..., 0] + parts[..., 1], moved, parts[..., 0] + parts[..., 1]


def _stage_times(busy: np.ndarray, training: bool, alone: _Alone, gradient_s: np.ndarray, scalars: np.ndarray,
                 m: np.ndarray, pp: int) -> np.ndarray:
    """Each stage's times ``[K, pp, len(STATS)]`` (s): ``m`` times its microbatch's passes' busy,
    communication, DRAM stall and host times (``busy`` ``[K, 2, J, passes]``), then its update's
    (collectives as communication, the optimizer steps' compute as optimizer time), what the
    engine's stages add up running the same passes alone
    (:class:`~simulator.timing.records.StageStats`)."""
    each = slice(0, alone.time.shape[2] - training)  # the microbatch's passes, not the optimizer step
    microbatch = np.zeros((*gradient_s.shape, len(STATS)))
    microbatch[..., 0], microbatch[..., 4] = busy[:, 0, :, each].sum(axis=-1), busy[:, 1, :, each].sum(axis=-1)
    microbatch[..., 1] = alone.communication[..., each].sum(axis=-1)
    microbatch[..., 2] = alone.stall[..., each].sum(axis=-1)
    times: np.ndarray = _by_stage(microbatch, pp) * m[:, None, None]
    if training:
        update = np.zeros_like(microbatch)
        update[..., 1], update[..., 2] = alone.communication[:, :, -1] + gradient_s, alone.stall[:, :, -1]
        update[..., 3] = scalars[:, 0, :, -1]
        times = times + _by_stage(update, pp)
    return times


def _by_stage(values: np.ndarray, pp: int) -> np.ndarray:
    """``[K, J, ...]`` summed over each stage's chunks: ``[K, pp, ...]`` (virtual stage ``c pp + i``)."""
    if values.shape[1] == pp:
        return values
    summed: np.ndarray = values.reshape(len(values), -1, pp, *values.shape[2:]).sum(axis=1)
    return summed


def _busiest_s(tables: list[FlowTable], table_of: np.ndarray, moved: np.ndarray) -> np.ndarray:
    """The busiest resource's busy time (s) of each pair, given the bytes per edge ``[K, pp *
    ROUTES]`` each route moved (:meth:`FlowTable.busiest_s`)."""
    if len(tables) == 1:
        return tables[0].busiest_s(moved)
    busiest = np.zeros(len(moved))
    for t in np.unique(table_of):
        rows = table_of == t
        busiest[rows] = tables[t].busiest_s(moved[rows])
    return busiest
