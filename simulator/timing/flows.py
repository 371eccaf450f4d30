"""The flows of an engine: each pipeline stage's TP, DP, DRAM, context-parallel and replica
groups, the p2p flows between neighbouring stages, and their index for totals per resource
(built once per placement, :func:`machine_flows`)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from itertools import chain

import numpy as np

from simulator.costs import StageCost
from simulator.hardware.spec import Calibration
from simulator.network.collectives import Flow, all_to_all_flow, make_flow, ring_edges, two_level_flow
from simulator.network.sharing import flow_pairs
from simulator.network.topology import Edge, Topology
from simulator.placement import StagePlacement


@dataclass(slots=True)
class StageFlows:
    """The flows of one pipeline stage."""

    tp: Flow
    dp: Flow
    dram: Flow | None
    tp_all_to_all: Flow | None
    cp: Flow | None = None
    """Context parallelism's groups (:attr:`StagePlacement.cp_groups`), None for ``cp == 1``."""
    dp_replica: Flow | None = None
    """Hybrid sharding's replica groups (:attr:`StagePlacement.replica_groups`), which the
    iteration's data-parallel collectives use when the stage has them."""
    ep: Flow | None = None
    """Expert parallelism's all-to-all in its groups (:attr:`StagePlacement.ep_groups`: every
    ordered pair), None for ``ep == 1``."""
    expert_dp: Flow | None = None
    """Rings over the expert-data-parallel groups (:attr:`StagePlacement.expert_dp_groups`),
    where expert gradients are reduced; None for ``ep == 1``."""

    @property
    def iteration(self) -> Flow:
        """The flow of the data-parallel collectives at the end of an iteration."""
        return self.dp_replica or self.dp



@dataclass(frozen=True, slots=True)
class FlowIndex:
    """Every (flow, resource) pair of an engine's flows as arrays, for totals per resource the
    flows use: ``flow[k]`` (position in :attr:`Engine.flows`) crosses resource ``used[slot[k]]``
    with ``load[k]`` edges and ``occupancy[k]`` (s per byte per edge); ``used`` are the resources
    some flow crosses, ascending, with their ``bandwidth`` (bytes/s) and ``kinds``."""

    flow: np.ndarray
    slot: np.ndarray
    load: np.ndarray
    occupancy: np.ndarray
    used: np.ndarray
    bandwidth: np.ndarray
    kinds: np.ndarray

    def carried_bytes(self, flow_bytes: Sequence[float]) -> np.ndarray:
        """Bytes each used resource carried, given the bytes per edge each flow moved."""
        moved = np.asarray(flow_bytes, dtype=float)[self.flow]
        return np.bincount(self.slot, weights=self.load * moved, minlength=len(self.used))

    def busy_s(self, flow_bytes: Sequence[float]) -> np.ndarray:
        """Seconds each used resource is busy, given the bytes per edge each flow moved."""
        moved = np.asarray(flow_bytes, dtype=float)[self.flow]
        return np.bincount(self.slot, weights=self.occupancy * moved, minlength=len(self.used))


def _flow_index(flows: list[Flow], topology: Topology) -> FlowIndex:
    """The :class:`FlowIndex` of ``flows`` (their pairs, :func:`~simulator.network.sharing.flow_pairs`):
    each flow's resources in the order of its loads."""
    pairs = flow_pairs(tuple(flows))
    count = len(pairs.resource)
    load = np.fromiter(chain.from_iterable(f.loads.values() for f in flows), dtype=float, count=count)
    used = pairs.resource[pairs.order[pairs.starts]]
    slot = np.empty(count, dtype=np.int64)
    slot[pairs.order] = np.repeat(np.arange(len(used)), np.diff(np.r_[pairs.starts, count]))
    bandwidth, kinds = topology.bandwidths_and_kinds(used)
    return FlowIndex(flow=pairs.flow, slot=slot, load=load, occupancy=pairs.occupancy, used=used,
                     bandwidth=bandwidth, kinds=kinds)


def all_flows(stage_flows: list[StageFlows], p2p: dict[tuple[int, int], Flow]) -> list[Flow]:
    """An engine's flows in their fixed order: each stage's own, then the p2p ones."""
    return [f for s in stage_flows for f in own_flows(s)] + list(p2p.values())


@lru_cache(maxsize=128)
def machine_flows(topology: Topology, placements: tuple[StagePlacement, ...], calibration: Calibration,
                   transfer_strategy: int, all_to_all: bool,
                   ) -> tuple[list[StageFlows], dict[tuple[int, int], Flow], FlowIndex]:
    """The flows of every stage, the p2p flows between neighbours and their index (built once
    per placement: a search revisits one placement under many plans; an engine resets the
    counters it uses)."""
    origins = [p.shifted(-p.devices[0]) for p in placements]
    stage_flows: list[StageFlows] = []
    for i, placement in enumerate(placements):
        offset = _moved_by(topology, placements, origins, i, 0) if i else None
        stage_flows.append(_stage_flows(topology, calibration, i, placement, all_to_all) if offset is None
                           else _moved_stage_flows(stage_flows[0], i, offset))
    p2p = _neighbour_flows(topology, calibration, placements, origins, transfer_strategy)
    return stage_flows, p2p, _flow_index(all_flows(stage_flows, p2p), topology)


def _neighbour_flows(topology: Topology, calibration: Calibration, placements: tuple[StagePlacement, ...],
                     origins: list[StagePlacement], transfer_strategy: int) -> dict[tuple[int, int], Flow]:
    """The sends of each stage to its neighbours, by (sender, receiver): routed, or moved from
    the first pair of stages sending the same way where both stages are that pair's moved by
    the same devices (:func:`_moved_by`; the pair that wraps around is routed)."""
    pp, start = len(placements), [p.devices[0] for p in placements]
    p2p: dict[tuple[int, int], Flow] = {}
    for i in range(pp):
        for j in sorted({(i + 1) % pp, (i - 1) % pp} - {i}):
            a, b = (0, 1) if j == i + 1 else (1, 0)
            alike = (a, b) in p2p and start[i] - start[a] == start[j] - start[b]
            offset = _moved_by(topology, placements, origins, i, a) if alike else None
            if offset is None or _moved_by(topology, placements, origins, j, b) is None:
                p2p[(i, j)] = _p2p_flow(topology, calibration, placements, transfer_strategy, i, j)
            else:
                p2p[(i, j)] = _moved(p2p[(a, b)], offset, p2p[(a, b)].name, f"p2p {i}->{j}")
    return p2p


def _moved_by(topology: Topology, placements: tuple[StagePlacement, ...], origins: list[StagePlacement], i: int,
              a: int) -> int | None:
    """How far the resources of stage ``i`` lie from stage ``a``'s when ``i``'s placement is
    ``a``'s moved by some devices (``origins``: each placement moved to start at device 0) and
    the topology maps the routes of the one onto the other's (:meth:`Topology.resource_shift`):
    then ``a``'s flows moved so far are the flows routing ``i``'s would give. None otherwise."""
    if origins[i] != origins[a]:
        return None
    return topology.resource_shift(placements[i].devices[0] - placements[a].devices[0])


def _moved_stage_flows(flows: StageFlows, i: int, offset: int) -> StageFlows:
    """The first stage's ``flows`` moved ``offset`` resources along, as stage ``i``'s (:func:`_moved_by`)."""
    def move(flow: Flow) -> Flow:
        return _moved(flow, offset, "stage0 ", f"stage{i} ")

    def move_any(flow: Flow | None) -> Flow | None:
        return None if flow is None else move(flow)

    return StageFlows(tp=move(flows.tp), dp=move(flows.dp), dram=move_any(flows.dram),
                      tp_all_to_all=move_any(flows.tp_all_to_all), cp=move_any(flows.cp),
                      dp_replica=move_any(flows.dp_replica), ep=move_any(flows.ep),
                      expert_dp=move_any(flows.expert_dp))


def _moved(flow: Flow, offset: int, prefix: str, renamed: str) -> Flow:
    """``flow`` through the resources ``offset`` further along, its name's ``prefix`` ``renamed``
    (the same loads and occupancies, in the same order)."""
    assert flow.name.startswith(prefix)
    return Flow(name=renamed + flow.name[len(prefix):], kind=flow.kind, group_size=flow.group_size,
                loads={r + offset: load for r, load in flow.loads.items()}, latency_s=flow.latency_s,
                seconds_per_byte=flow.seconds_per_byte, num_edges=flow.num_edges,
                occupancy={r + offset: busy for r, busy in flow.occupancy.items()},
                levels=None if flow.levels is None else (_moved(flow.levels[0], offset, prefix, renamed),
                                                         _moved(flow.levels[1], offset, prefix, renamed)))


def _stage_flows(topo: Topology, cal: Calibration, i: int, placement: StagePlacement, all_to_all: bool) -> StageFlows:
    """The flows of stage ``i``; the all-pairs pattern of its TP groups only if some
    collective is an all-to-all (ResNet's halo exchange). A placement of some replicas only
    (:attr:`StagePlacement.copies`) gives flows that stand for all of them."""
    copies = placement.copies
    dram = None
    if topo.dram_route(placement.devices[0])[0]:
        dram = make_flow(topo, f"stage{i} dram", "dram", [(d, -1) for d in placement.devices],
                         cal.memory_bound_efficiency, copies=copies)
    return StageFlows(
        tp=ring_flow(topo, f"stage{i} tp", "tp", placement.tp_groups, cal.collective_efficiency, copies),
        dp=ring_flow(topo, f"stage{i} dp", "dp", placement.dp_groups, cal.collective_efficiency, copies,
                     placement.dp_group_size),
        dram=dram,
        tp_all_to_all=all_to_all_flow(topo, f"stage{i} tp a2a", "tp", placement.tp_groups,
                                      cal.collective_efficiency, copies) if all_to_all else None,
        cp=ring_flow(topo, f"stage{i} cp", "cp", placement.cp_groups, cal.collective_efficiency, copies)
        if placement.cp_groups else None,
        dp_replica=ring_flow(topo, f"stage{i} dp replicas", "dp", placement.replica_groups, cal.collective_efficiency)
        if placement.replica_groups else None,
        ep=all_to_all_flow(topo, f"stage{i} ep", "ep", placement.ep_groups, cal.collective_efficiency)
        if placement.ep_groups else None,
        expert_dp=ring_flow(topo, f"stage{i} expert dp", "dp", placement.expert_dp_groups, cal.collective_efficiency)
        if placement.expert_dp_groups else None,
    )


def _p2p_flow(topo: Topology, cal: Calibration, placements: tuple[StagePlacement, ...], transfer_strategy: int,
              i: int, j: int) -> Flow:
    """Stage ``i``'s sends to stage ``j``: rank to rank (strategy 1) or adapter to adapter (2)."""
    src, dst = placements[i], placements[j]
    if transfer_strategy == 1:
        edges = list(zip(src.devices, dst.devices, strict=True))
    else:
        edges = [(a[0], b[0]) for a, b in zip(src.tp_groups, dst.tp_groups, strict=True)]
    return make_flow(topo, f"p2p {i}->{j}", "p2p", edges, cal.p2p_efficiency, copies=src.copies)


def _rings(topology: Topology, groups: tuple[tuple[int, ...], ...]) -> list[Edge]:
    """Ring edges of ``groups``, spread over the NICs of each node on a GPU cluster."""
    return topology.channel_edges(groups, ring_edges(groups))


def ring_flow(topology: Topology, name: str, kind: str, groups: tuple[tuple[int, ...], ...], efficiency: float,
              copies: int = 1, group_size: int | None = None) -> Flow:
    """The ring collectives of ``groups`` (of ``group_size`` devices, default the first's): one
    ring each, or two levels where the topology runs them so
    (:meth:`~simulator.network.topology.Topology.collective_levels`)."""
    size, levels = group_size or len(groups[0]), topology.collective_levels(groups)
    if levels is None:
        return make_flow(topology, name, kind, _rings(topology, groups), efficiency, size, copies)
    within, across = (make_flow(topology, f"{name} {part}", kind, _rings(topology, g), efficiency, len(g[0]), copies)
                      for part, g in zip(("within dies", "across dies"), levels, strict=True))
    return two_level_flow(name, size, within, across)


def own_flows(flows: StageFlows) -> list[Flow]:
    """The flows a stage's own process runs (not its p2p sends)."""
    return [f for f in (flows.tp, flows.dp, flows.dram, flows.tp_all_to_all, flows.cp, flows.dp_replica,
                        flows.ep, flows.expert_dp) if f is not None]


def traffic_by_kind(flows: list[Flow], flow_bytes: list[float]) -> dict[str, float]:
    """Total bytes moved per traffic class (bytes per edge x edges), summed over flows."""
    totals = {"tp": 0.0, "dp": 0.0, "p2p": 0.0, "dram": 0.0}
    for flow, moved in zip(flows, flow_bytes, strict=True):
        totals[flow.kind] = totals.get(flow.kind, 0.0) + moved * flow.num_edges
    return totals


def uses_all_to_all(costs: Sequence[StageCost]) -> bool:
    """Whether some pass runs an all-to-all in its TP groups (their flows then include one)."""
    return any(c.kind == "all_to_all" for cost in costs for p in (cost.forward, cost.backward)
               for c in p.tp_collectives + p.overlapped_collectives)


FlowSignature = tuple[tuple[tuple[str, str, int, float, float, int], ...], Counter[tuple[object, ...]]]
"""What every timing model reads of a set of flows (:func:`flow_signature`)."""


def flow_signature(topology: Topology, flows: Sequence[Flow], copies: int = 1) -> FlowSignature:
    """Each flow's name, kind, group size, latency (s), seconds per byte and edges, and how many
    resources carry each distinct *column*: the resource's bandwidth, own efficiency and kind
    with the load of every flow crossing it, counted ``copies`` times.

    Two sets of flows with equal signatures time every pass, send and update alike under every
    timing model: a flow alone is timed by its latency and seconds per byte; shared bandwidth
    by the distinct columns that two or more flows cross (:func:`simulator.network.sharing.constraints_of`
    keeps one constraint per distinct undominated one); exclusive booking by the sets of flows
    crossing a resource (:class:`~simulator.timing.booking.BookingTiming`); and the resources'
    utilisation by the columns and their counts."""
    columns: dict[int, list[tuple[int, float]]] = {}
    for k, flow in enumerate(flows):
        for r, load in flow.loads.items():
            columns.setdefault(r, []).append((k, load))
    counts = Counter((topology.bandwidth_bytes_per_s[r], topology.efficiencies[r], topology.kinds[r], tuple(column))
                     for r, column in columns.items())
    per_flow = tuple((f.name, f.kind, f.group_size, f.latency_s, f.seconds_per_byte, f.num_edges) for f in flows)
    return per_flow, Counter({column: n * copies for column, n in counts.items()})
