"""What every timing model of the engine shares: the machine's flows, the costs of a pass's
segments, collectives, sends and regroups on them, the state of one run (SimPy environment,
stage times, records, traces) and remembered answers.

Time is SimPy's ``env.now`` in **seconds**; bytes are per edge of a flow unless said otherwise.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import simpy

from simulator.costs import Collective, PassCost, StageCost
from simulator.hardware.spec import Hardware
from simulator.network.collectives import Flow
from simulator.network.topology import Topology
from simulator.placement import StagePlacement
from simulator.timing.flows import all_flows, machine_flows, own_flows, uses_all_to_all
from simulator.timing.records import PassRecord, StageStats, TraceRecord

_T = TypeVar("_T")


@dataclass(slots=True)
class Segments:
    """What each of a pass's ``count`` identical segments does (s are alone durations, PALM Eq. 2):
    compute for ``compute_s`` while streaming ``dram_s`` from DRAM, then ``collective_s`` of TP
    collectives (``collective_latency_s`` of it latency); ``*_bytes`` over all edges, for traces."""

    count: int
    compute_s: float
    dram_s: float
    dram_bytes: float
    collective_s: float
    collective_latency_s: float
    collective_bytes: float


@dataclass(slots=True)
class _Memo:
    """A remembered answer, the bytes per edge computing it counted on each flow, and how many
    times it was used again since they were last counted."""

    value: Any
    moved: list[tuple[Flow, float]]
    uses: int = 0




class Machine:
    """The flows of one engine and the state of its current run, which the timing models time
    passes, sends and updates on.

    Args:
        hardware: the machine.
        topology: its routes and resources.
        placements: devices and groups of each pipeline stage.
        costs: per virtual stage costs (``pp * num_chunks``, chunk-major).
        transfer_strategy: 1 or 2 (PALM Fig. 11).
        p2p_blocking: a stage waits for its sends to land (``Strategy.p2p_blocking``).
        record: keep a :class:`PassRecord` per pass and a :class:`TraceRecord` per flow booking.
    """

    def __init__(self, *, hardware: Hardware, topology: Topology, placements: tuple[StagePlacement, ...],
                 costs: tuple[StageCost, ...], transfer_strategy: int, p2p_blocking: bool, record: bool) -> None:
        self.topology, self.placements, self.costs = topology, placements, costs
        self.transfer_strategy, self.p2p_blocking, self.record = transfer_strategy, p2p_blocking, record
        self.pp = len(placements)
        all_to_all = uses_all_to_all(costs)
        self.stage_flows, self.p2p, self.index = machine_flows(topology, placements, hardware.calibration,
                                                               transfer_strategy, all_to_all)
        self.flows = all_flows(self.stage_flows, self.p2p)
        self._memos: dict[tuple[str, int, object], _Memo] = {}
        self.env = simpy.Environment()
        self.events = 0
        self.stats = [StageStats() for _ in range(self.pp)]
        self.records: list[PassRecord] = []
        self.traces: list[TraceRecord] = []

    def start(self, env: simpy.Environment) -> None:
        """Start a run in ``env``: no events, times, records, traces or bytes moved yet."""
        self.env = env
        self.events = 0
        self.stats = [StageStats() for _ in range(self.pp)]
        self.records = []
        self.traces = []
        for flow in self.flows:
            flow.bytes_moved = 0.0
        for memo in self._memos.values():  # a run stopped by its budget left them uncounted
            memo.uses = 0

    def chunks(self, i: int) -> list[StageCost]:
        """The costs of stage ``i``'s virtual stages (one per chunk)."""
        return [self.costs[c * self.pp + i] for c in range(len(self.costs) // self.pp)]

    def memo(self, kind: str, i: int, what: object, compute: Callable[..., _T], *args: Any) -> _T:
        """``compute(*args)`` for ``what`` (``id`` of a pass's cost, or a hashable key) of stage
        ``i``, remembered for the engine's life with the bytes it counted on the stage's own flows,
        which every further use counts again (:meth:`count_memo_bytes`). The arguments, not a
        closure over them: a run asks once per pass and send."""
        key = (kind, i, what)
        memo = self._memos.get(key)
        if memo is None:
            own = own_flows(self.stage_flows[i])
            before = [f.bytes_moved for f in own]
            value = compute(*args)
            moved = [(f, f.bytes_moved - b) for f, b in zip(own, before, strict=True) if f.bytes_moved != b]
            self._memos[key] = _Memo(value, moved)
            return value
        memo.uses += 1
        return memo.value  # type: ignore[no-any-return]

    def count_memo_bytes(self) -> None:
        """Add the bytes of the run's remembered answers' further uses to their flows."""
        for memo in self._memos.values():
            if memo.uses:
                for flow, moved in memo.moved:
                    flow.bytes_moved += moved * memo.uses
                memo.uses = 0

    def segments(self, i: int, cost: PassCost) -> Segments:
        """The segments of ``cost`` on stage ``i`` (remembered, :meth:`memo`)."""
        return self.memo("segments", i, id(cost), self.segments_of, i, cost)

    def segments_of(self, i: int, cost: PassCost) -> Segments:
        """The segments of ``cost`` on stage ``i`` (and count the bytes they move): the TP
        collectives, plus what compute does not hide of the overlapped ones (TP multicasts and
        overlap; under the whole compute, the replicas' weight multicast and ZeRO-3's prefetched
        gathers; under the attention's compute, context parallelism's ring), and expert
        parallelism's all-to-alls (what the merged pass's compute does not hide of them, where
        one is merged), split evenly over the segments."""
        flows = self.stage_flows[i]
        segments = cost.segments
        dram = 0.0
        if flows.dram is not None and cost.dram_bytes > 0:
            dram = flows.dram.step_time_s(cost.dram_bytes / segments)
            flows.dram.bytes_moved += cost.dram_bytes
        collective, moved, latency = self.collectives_time(i, cost.tp_collectives)
        if cost.overlapped_collectives:
            hidden, hidden_moved, _ = self.collectives_time(i, cost.overlapped_collectives)
            collective, moved = collective + max(hidden - cost.overlap_s, 0.0), moved + hidden_moved
        if cost.replica_collectives:
            hidden, hidden_moved, _ = self.collectives_time(i, cost.replica_collectives, flows.dp)
            collective, moved = collective + max(hidden - cost.compute_s, 0.0), moved + hidden_moved
        if cost.cp_collectives and flows.cp is not None:
            hidden, hidden_moved, _ = self.collectives_time(i, cost.cp_collectives, flows.cp)
            collective, moved = collective + max(hidden - cost.cp_overlap_s, 0.0), moved + hidden_moved
        if cost.ep_collectives and flows.ep is not None:
            exposed, exposed_moved, exposed_latency = self.collectives_time(i, cost.ep_collectives, flows.ep)
            if cost.ep_overlap_s:
                exposed, exposed_latency = max(exposed - cost.ep_overlap_s, 0.0), 0.0
            collective, moved, latency = collective + exposed, moved + exposed_moved, latency + exposed_latency
        dram_bytes = cost.dram_bytes * flows.dram.num_edges / segments if flows.dram is not None else 0.0
        return Segments(segments, cost.compute_s / segments, dram, dram_bytes, collective / segments,
                        latency / segments, moved / segments)

    def collectives_time(self, i: int, collectives: tuple[Collective, ...],
                         group: Flow | None = None) -> tuple[float, float, float]:
        """(duration in s, bytes moved over all edges, latency part of the duration in s) of
        ``collectives`` back to back on ``group``'s flow (default: the stage's TP groups)."""
        total = size = latency = 0.0
        flows = self.stage_flows[i]
        for c in collectives:
            flow = group or (flows.tp_all_to_all or flows.tp if c.kind == "all_to_all" else flows.tp)
            duration, moved = flow.collective_time_s(c.kind, c.size_bytes)
            flow.bytes_moved += moved * c.count
            total += duration * c.count
            size += moved * c.count * flow.num_edges
            latency += flow.collective_latency_s(c.kind) * c.count
        return total, size, latency

    def gradient_collectives_time(self, i: int) -> tuple[float, float, float]:
        """(duration in s, bytes moved, latency part in s) of stage ``i``'s collectives at the end of
        an iteration: its chunks' data-parallel ones on the iteration's flow, then their experts'
        over the expert-data-parallel groups."""
        chunks, flows = self.chunks(i), self.stage_flows[i]
        dense = self.collectives_time(i, tuple(c for cost in chunks for c in cost.dp_collectives), flows.iteration)
        experts = tuple(c for cost in chunks for c in cost.expert_dp_collectives)
        if not experts or flows.expert_dp is None:
            return dense
        routed = self.collectives_time(i, experts, flows.expert_dp)
        return dense[0] + routed[0], dense[1] + routed[1], dense[2] + routed[2]

    def p2p_bytes(self, flow: Flow, i: int, size_bytes: float) -> float:
        """Bytes per edge of stage ``i``'s send of ``size_bytes`` (counted as moved)."""
        adapters = self.transfer_strategy == 2
        per_edge = size_bytes * len(self.placements[i].tp_groups[0]) if adapters else size_bytes
        flow.bytes_moved += per_edge
        return per_edge

    def regroup_cost(self, stage: int, size_bytes: float) -> tuple[Flow, float, float, float] | None:
        """Rebuild the full activation in the receiving TP group: an all-gather of the slices
        (strategy 1) or a broadcast from the adapter, timed as a pipelined ring broadcast
        (strategy 2). (flow, duration s, bytes per edge moved, latency part s), None for TP 1."""
        flow = self.stage_flows[stage].tp
        tp = flow.group_size
        if tp <= 1:
            return None
        full = size_bytes * tp
        if self.transfer_strategy == 1:
            duration, moved = flow.collective_time_s("all_gather", full)
            latency = flow.collective_latency_s("all_gather")
        else:
            duration, moved = flow.step_time_s(full) + (tp - 2) * flow.latency_s, full
            latency = (tp - 1) * flow.latency_s
        flow.bytes_moved += moved
        return flow, duration, moved, latency

    def trace(self, flow: Flow, lane: str, name: str, start: float, duration: float, size_bytes: float,
              microbatch: int = -1, kind: str = "", **args: Any) -> None:
        """Keep one booking of ``flow`` (``size_bytes`` over all its edges) for the trace, under
        ``kind`` (default: the flow's)."""
        args.update(bytes=size_bytes, flow=flow.name, microbatch=microbatch)
        if flow.kind == "dram":
            topo = self.topology
            ports = {r: load for r, load in flow.loads.items() if topo.kinds[r] == "dram"}
            total = sum(ports.values())
            args["ports"] = {topo.names[r]: load / total for r, load in ports.items()}
        self.traces.append(TraceRecord(kind or flow.kind, lane, name, start, start + duration, args))

    def trace_p2p(self, flow: Flow, i: int, dst: int, kind: str, microbatch: int, start: float,
                  duration: float, per_edge: float) -> None:
        """Keep stage ``i``'s send of ``kind`` to stage ``dst`` (``per_edge`` bytes per edge) for the trace."""
        self.trace(flow, f"{i}->{dst}", f"{kind} mb {microbatch}", start, duration, per_edge * flow.num_edges,
                   microbatch, source_stage=i, destination_stage=dst, transfer=kind)
