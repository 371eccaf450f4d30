"""SimPy wiring: one process per pipeline stage, messages between stages, shared resources.

Time is SimPy's ``env.now`` in **seconds**. Virtual Tile Aggregation (PALM §IV-A): a pipeline
stage is one process standing for all its ``tp * cp * dp`` devices; its tensor-parallel collectives,
DRAM streams and data-parallel collectives are flows over *all* its groups at once
(:mod:`simulator.network.collectives`), and every link or DRAM port that flows of different processes
share is booked through the network backend, so contention between stages is real.

A pass (forward or backward of one microbatch on one virtual stage) is ``segments`` layers; each
computes while streaming its DRAM share (overlapped, PALM Fig. 5), then runs its TP collectives
(with ``tp_overlap``, only the part of the backward's that its weight-gradient GEMMs do not hide;
only that exposed part books links, the hidden bytes still count in link utilisation).
A stage's output is sent to the next as a p2p flow (scatter/gather, Narayanan et al. SC'21 §4.1:
each rank sends its 1/t slice, the receiving group all-gathers; PALM Fig. 11 strategy 1), or with
``transfer_strategy=2`` through one adapter per TP group followed by a broadcast in the receiving
group (PALM Fig. 11 strategy 2, adapted to Megatron where the source group's output is already
reduced). With ``p2p_blocking`` the sender waits until its transfer ends (Megatron-LM's
synchronous send/receive); otherwise it computes on. After its last backward a stage runs its
data-parallel collectives and the optimizer step (PALM's Gradient Update).
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass, field
from functools import lru_cache, partial
from typing import Any, TypeVar

import numpy as np
import simpy

from simulator.costs import Collective, PassCost, StageCost
from simulator.errors import BudgetExceeded
from simulator.hardware.spec import Calibration, Hardware
from simulator.network.backends import NetworkBackend
from simulator.network.collectives import Flow, all_pairs_edges, make_flow, ring_edges
from simulator.network.sharing import PhaseTimes, Plan, SharingNetwork
from simulator.network.topology import Edge, Topology
from simulator.passes import Pass, PassKind
from simulator.placement import StagePlacement
from simulator.schedules import PipelineSchedule

_T = TypeVar("_T")
_Phase = tuple[str, float, Flow | None, float, float, float]


@dataclass(slots=True)
class StageStats:
    """Accumulated times of one pipeline stage (s)."""

    compute_s: float = 0.0
    communication_s: float = 0.0
    dram_stall_s: float = 0.0
    optimizer_s: float = 0.0
    finish_s: float = 0.0


@dataclass(slots=True)
class PassRecord:
    """One executed pass, for traces: stage, kind, microbatch, chunk, start, end (s);
    ``recompute_s`` is the recompute part of a backward pass's ``compute_s`` (s)."""

    stage: int
    kind: PassKind
    microbatch: int
    chunk: int
    start_s: float
    end_s: float
    recompute_s: float = 0.0
    compute_s: float = 0.0


@dataclass(slots=True)
class TraceRecord:
    """One booking of a flow, for traces (kept only with ``record=True``).

    Attributes:
        kind: ``tp``, ``dp``, ``p2p`` or ``dram``.
        lane: what the booking belongs to: ``stage 3`` (TP, DP, DRAM) or ``0->1`` (p2p).
        name: readable label (e.g. ``all-reduce``, ``act mb 4``).
        start_s, end_s: the booked interval (s).
        args: extra facts: ``bytes`` (total over the flow's edges), ``microbatch``, ...
    """

    kind: str
    lane: str
    name: str
    start_s: float
    end_s: float
    args: dict[str, Any] = field(default_factory=dict)


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

    @property
    def iteration(self) -> Flow:
        """The flow of the data-parallel collectives at the end of an iteration."""
        return self.dp_replica or self.dp


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


@dataclass(frozen=True, slots=True)
class SharedSend:
    """A send under bandwidth sharing from a stage to stage ``dst`` on p2p ``flow``
    (``per_edge`` bytes per edge): the plan of its transfer and the receiving group's regroup
    back to back; for a blocking sender, the plans of the transfer and of the regroup (None for
    TP 1) apart; the regroup's flow (None for TP 1) and bytes per edge."""

    flow: Flow
    dst: int
    per_edge: float
    both: Plan
    parts: tuple[Plan, Plan | None] | None
    regroup_flow: Flow | None
    regroup_bytes: float


def _times(done: simpy.Event, plan: Plan, start_s: float) -> list[PhaseTimes]:
    """The phase times of the sequence of ``plan`` started at ``start_s`` whose event ``done`` has
    fired (:meth:`~simulator.network.sharing.SharingNetwork.sequence`)."""
    return done.value or plan.times(start_s)


@dataclass(frozen=True, slots=True)
class SharedPass:
    """A pass under bandwidth sharing: its :class:`Segments`, named phases (name, bytes over all
    edges, flow or None, duration alone s, latency part s, not before s), their
    :class:`~simulator.network.sharing.Plan`, and the DRAM stall and communication it adds to its
    stage when nothing shares with it (s)."""

    segments: Segments
    phases: list[_Phase]
    plan: Plan
    alone_dram_stall_s: float
    alone_communication_s: float


@dataclass(slots=True)
class EngineRun:
    """Raw outcome of one engine run."""

    makespan_s: float
    stats: list[StageStats]
    flows: list[Flow]
    flow_bytes: list[float]
    events: int
    records: list[PassRecord] = field(default_factory=list)
    traces: list[TraceRecord] = field(default_factory=list)
    index: FlowIndex | None = None
    """The flows' (flow, resource) pairs, for totals per resource."""


class Engine:
    """Simulates one iteration of ``num_microbatches`` microbatches per replica.

    Args:
        hardware: the machine.
        topology: its routes and resources.
        placements: devices and groups of each pipeline stage.
        costs: per virtual stage costs (``pp * num_chunks``, chunk-major).
        schedule: the pipeline schedule.
        network: the backend that books resources, or shares their bandwidth
            (:class:`~simulator.network.sharing.SharingNetwork`: passes then wait on transfers).
        training: False runs forwards only (inference).
        transfer_strategy: 1 or 2 (PALM Fig. 11).
        p2p_blocking: a stage waits for its sends to land (``Strategy.p2p_blocking``).
        record: keep a :class:`PassRecord` per pass and a :class:`TraceRecord` per flow booking.
        deadline_s: ``time.perf_counter()`` value past which a run stops.
        event_limit: most events one run may take.

    Raises (from :meth:`run`):
        BudgetExceeded: past ``deadline_s`` or ``event_limit``, checked after every pass.
    """

    def __init__(
        self, *, hardware: Hardware, topology: Topology, placements: tuple[StagePlacement, ...],
        costs: tuple[StageCost, ...], schedule: PipelineSchedule, network: NetworkBackend | SharingNetwork,
        training: bool, transfer_strategy: int = 1, p2p_blocking: bool = False, record: bool = False,
        deadline_s: float = math.inf, event_limit: int | None = None,
    ) -> None:
        self.deadline_s, self.event_limit = deadline_s, event_limit if event_limit is not None else sys.maxsize
        self.topology, self.placements, self.costs = topology, placements, costs
        self.schedule, self.network, self.training = schedule, network, training
        self.transfer_strategy, self.p2p_blocking, self.record = transfer_strategy, p2p_blocking, record
        self.pp = len(placements)
        self.calibration = hardware.calibration
        all_to_all = any(c.kind == "all_to_all" for cost in costs for p in (cost.forward, cost.backward)
                         for c in p.tp_collectives + p.overlapped_collectives)
        self.stage_flows, self.p2p, self.index = _machine_flows(topology, placements, hardware.calibration,
                                                                transfer_strategy, all_to_all)
        self.flows = _all_flows(self.stage_flows, self.p2p)
        self._memos: dict[tuple[str, int, object], _Memo] = {}
        self.sharing = network if isinstance(network, SharingNetwork) else None
        self.booking = None if isinstance(network, SharingNetwork) else network
        if self.booking is not None and self.booking.uses_contention():
            self._assign_bookings()

    def _assign_bookings(self) -> None:
        """Book a resource only where flows of different processes meet; p2p flows, which can
        overlap themselves, also book a private channel (ids past the physical resources).
        Resources booked by exactly the same flows always hold the same calendar, so each such
        class is booked once, through one representative."""
        owner = {id(f): i for i, s in enumerate(self.stage_flows) for f in _own_flows(s)}
        owners: dict[int, set[int | str]] = {}
        for flow in self.flows:
            for r in flow.loads:
                owners.setdefault(r, set()).add(owner.get(id(flow), flow.name))
        booked_by: dict[int, list[int]] = {}
        for index, flow in enumerate(self.flows):
            for r in flow.loads:
                if len(owners[r]) > 1:
                    booked_by.setdefault(r, []).append(index)
        representative: dict[tuple[int, ...], int] = {}
        for r, users in booked_by.items():
            representative.setdefault(tuple(users), r)
        channel = self.topology.num_resources
        for flow in self.flows:
            classes = {tuple(booked_by[r]) for r in flow.loads if r in booked_by}
            flow.booked = tuple(sorted(representative[c] for c in classes))
            if flow.kind == "p2p":
                flow.booked += (channel,)
                channel += 1

    # -- processes ---------------------------------------------------------------------------

    def run(self, num_microbatches: int) -> EngineRun:
        """Simulate one iteration and return the raw timings."""
        self.env = simpy.Environment()
        self.events = 0
        self.stats = [StageStats() for _ in range(self.pp)]
        self.records: list[PassRecord] = []
        self.traces: list[TraceRecord] = []
        self.messages: dict[tuple[str, int, int], simpy.Event] = {}
        for flow in self.flows:
            flow.bytes_moved = 0.0
        for memo in self._memos.values():  # a run stopped by its budget left them uncounted
            memo.uses = 0
        self.network.reset()
        if self.sharing is not None:
            self.sharing.start(self.env, self.flows)
        for i in range(self.pp):
            self.env.process(self._stage(i, num_microbatches))
        self.env.run()
        self._count_memo_bytes()
        makespan = max(s.finish_s for s in self.stats)
        moved = [f.bytes_moved for f in self.flows]
        return EngineRun(makespan, self.stats, self.flows, moved, self.events, self.records, self.traces, self.index)

    def estimate(self, num_microbatches: int) -> tuple[EngineRun, float]:
        """A closed-form iteration, no events: the screening fidelity. Returns the run and the
        steady-state time per microbatch (s).

        Each pass and send takes its time alone (segments as in :meth:`_pass_end` with no
        waiting). With ``t_i`` the forward and backward passes and sends of all chunks of stage
        ``i`` for one microbatch, the pipeline takes ``m max_i t_i + (sum_i t_i - max_i t_i) / v``
        (GPipe and 1F1B take ``(m + p - 1)(t_f + t_b)`` with equal stages, and interleaving
        ``v`` chunks divides the fill and drain by ``v``: Narayanan et al. SC'21 §2.2; with unequal
        stages the slowest sets the steady state), then the slowest gradient update. A schedule
        that defers weight gradients (ZB-H1) runs them in the fill and drain: each stage but the
        slowest adds ``max(t_i - 2 w_i, 0)`` with ``w_i`` its weight-gradient passes, which gives
        ZB-H1's ``(m + p - 1)(t_f + t_b + t_w) - 2 (p - 1) t_w`` with equal stages (Qi et al. ICLR'24
        §2.1: a bubble of ``(p - 1)(t_f + t_b - t_w)``). No
        resource can be busier than the iteration, so the makespan is at least the busiest
        resource's busy time: bytes per edge of each flow times its occupancy, summed over flows
        (the bound a work-conserving sharing model approaches when one resource saturates).
        """
        m, pp, chunks = num_microbatches, self.pp, len(self.costs) // self.pp
        self.stats = [StageStats() for _ in range(pp)]
        for flow in self.flows:
            flow.bytes_moved = 0.0
        per_stage, deferred = [0.0] * pp, [0.0] * pp
        for j, cost in enumerate(self.costs):
            i = j % pp
            per_stage[i] += self._alone_s(i, cost.forward)
            self.stats[i].compute_s += cost.forward.compute_s
            if j < len(self.costs) - 1:
                per_stage[i] += self._send_alone_s(i, (j + 1) % pp, cost.activation_send_bytes)
            if self.training and self.schedule.defers_weight_gradients:
                per_stage[i] += self._alone_s(i, cost.backward_input)
                deferred[i] += self._alone_s(i, cost.backward_weight)
                self.stats[i].compute_s += cost.backward_input.compute_s + cost.backward_weight.compute_s
            elif self.training:
                per_stage[i] += self._alone_s(i, cost.backward)
                self.stats[i].compute_s += cost.backward.compute_s
                if j > 0:
                    per_stage[i] += self._send_alone_s(i, (j - 1) % pp, cost.gradient_send_bytes)
        for flow in self.flows:
            flow.bytes_moved *= m
        for st in self.stats:
            st.compute_s, st.communication_s, st.dram_stall_s = (m * st.compute_s, m * st.communication_s,
                                                                 m * st.dram_stall_s)
        per_stage = [t + w for t, w in zip(per_stage, deferred, strict=True)]
        period = max(per_stage)
        pipeline = m * period + (sum(per_stage) - period) / chunks
        if any(deferred):  # deferred weight gradients fill 2 W of each other stage's fill and drain
            slowest = per_stage.index(period)
            pipeline = m * period + sum(max(t - 2 * w, 0.0) for k, (t, w) in enumerate(zip(per_stage, deferred,
                                        strict=True)) if k != slowest) / chunks
        if self.training:
            pipeline += max(self._update_alone_s(i) for i in range(pp))
        busiest = self._busiest_s()
        makespan = max(pipeline, busiest)
        for st in self.stats:
            st.finish_s = makespan
        moved = [f.bytes_moved for f in self.flows]
        return EngineRun(makespan, self.stats, self.flows, moved, 0, index=self.index), max(period, busiest / m)

    def _alone_s(self, i: int, cost: PassCost) -> float:
        """Time of a pass that waits for nothing (s), its stage's stall and communication kept
        (each pass once: nothing to remember)."""
        seg, stats = self._segments_of(i, cost), self.stats[i]
        stall = max(seg.dram_s - seg.compute_s, 0.0)
        exposed = self._collectives_time(i, cost.exposed_dp_collectives, self.stage_flows[i].dp)[0]
        stats.dram_stall_s += seg.count * stall
        stats.communication_s += seg.count * seg.collective_s + exposed
        return seg.count * (seg.compute_s + stall + seg.collective_s) + exposed

    def _send_alone_s(self, i: int, dst: int, size_bytes: float) -> float:
        """Time of a send and its regroup that wait for nothing (s)."""
        flow = self.p2p.get((i, dst))
        if flow is None or size_bytes <= 0:
            return 0.0
        sent = flow.step_time_s(self._p2p_bytes(flow, i, size_bytes))
        regroup = self._regroup_cost(dst, size_bytes)
        return sent + (regroup[1] if regroup else 0.0)

    def _update_alone_s(self, i: int) -> float:
        """Time of stage ``i``'s gradient update that waits for nothing (s), stats kept."""
        chunks = [self.costs[c * self.pp + i] for c in range(len(self.costs) // self.pp)]
        collectives = tuple(c for cost in chunks for c in cost.dp_collectives)
        duration = self._collectives_time(i, collectives, self.stage_flows[i].iteration)[0]
        stats = self.stats[i]
        steps = sum(self._alone_s(i, cost.optimizer_step) for cost in chunks)
        stats.optimizer_s = sum(c.optimizer_step.compute_s for c in chunks)
        stats.communication_s += duration
        return duration + steps

    def _busiest_s(self) -> float:
        """The longest busy time of any resource over the run so far (s)."""
        busy = self.index.busy_s([f.bytes_moved for f in self.flows])
        return float(busy.max()) if len(busy) else 0.0

    def _message(self, key: tuple[str, int, int]) -> simpy.Event:
        event = self.messages.get(key)
        if event is None:
            event = self.messages[key] = self.env.event()
        return event

    def _stage(self, i: int, num_microbatches: int) -> Generator[simpy.Event, Any, None]:
        order = self.schedule.order(i, num_microbatches) if self.training else \
            self.schedule.forward_order(i, num_microbatches)
        last = len(self.costs) - 1
        for p in order:
            j = p.chunk * self.pp + i
            forward, backward = p.kind is PassKind.FORWARD, p.kind.is_backward
            if (forward and j > 0) or (backward and j < last):
                self.events += 1
                yield self._message(("act", j, p.microbatch) if forward else ("grad", j, p.microbatch))
            cost = self.costs[j].pass_cost(p.kind)
            yield from self._pass(i, cost, p)
            if self.events > self.event_limit or time.perf_counter() > self.deadline_s:
                self._stop()
            sent: float | simpy.Event = self.env.now
            if forward and j < last:
                sent = self._send(i, j, j + 1, "act", p.microbatch, self.costs[j].activation_send_bytes)
            elif backward and j > 0:
                sent = self._send(i, j, j - 1, "grad", p.microbatch, self.costs[j].gradient_send_bytes)
            if self.p2p_blocking:
                t = self.env.now
                if isinstance(sent, simpy.Event):
                    yield sent
                elif sent > t:
                    yield self.env.timeout(sent - t)
                self.stats[i].communication_s += self.env.now - t
        if self.training:
            yield from self._gradient_update(i)
        self.stats[i].finish_s = self.env.now

    def _stop(self) -> None:
        """Raise :class:`BudgetExceeded` for the budget that ran out."""
        if self.events > self.event_limit:
            raise BudgetExceeded(f"simulation stopped after {self.events:,} events, over its budget of "
                                 f"{self.event_limit:,} (at {self.env.now:.4g} s of simulated time)")
        raise BudgetExceeded(f"simulation stopped at its wall-clock budget after {self.events:,} events"
                             f" (at {self.env.now:.4g} s of simulated time)")

    def _pass(self, i: int, cost: PassCost, p: Pass) -> Generator[simpy.Event, Any, None]:
        now = self.env.now
        if self.sharing is not None:
            yield from self._shared_pass(i, cost, p.microbatch)
        else:
            self.events += 1
            yield self.env.timeout(self._pass_end(i, cost, now, p.microbatch) - now)
        self.stats[i].compute_s += cost.compute_s
        if self.record:
            self.records.append(PassRecord(i, p.kind, p.microbatch, p.chunk, now, self.env.now, cost.recompute_s,
                                           cost.compute_s))

    def _memo(self, kind: str, i: int, what: object, compute: Callable[[], _T]) -> _T:
        """``compute()`` for ``what`` (``id`` of a pass's cost, or a hashable key) of stage ``i``,
        remembered for the engine's life with the bytes it counted on the stage's own flows, which
        every further use counts again (:meth:`_count_memo_bytes`)."""
        key = (kind, i, what)
        memo = self._memos.get(key)
        if memo is None:
            own = _own_flows(self.stage_flows[i])
            before = [f.bytes_moved for f in own]
            value = compute()
            moved = [(f, f.bytes_moved - b) for f, b in zip(own, before, strict=True) if f.bytes_moved != b]
            self._memos[key] = _Memo(value, moved)
            return value
        memo.uses += 1
        return memo.value  # type: ignore[no-any-return]

    def _count_memo_bytes(self) -> None:
        """Add the bytes of the run's remembered answers' further uses to their flows."""
        for memo in self._memos.values():
            if memo.uses:
                for flow, moved in memo.moved:
                    flow.bytes_moved += moved * memo.uses
                memo.uses = 0

    def _segments(self, i: int, cost: PassCost) -> Segments:
        """The segments of ``cost`` on stage ``i`` (remembered, :meth:`_memo`)."""
        return self._memo("segments", i, id(cost), lambda: self._segments_of(i, cost))

    def _segments_of(self, i: int, cost: PassCost) -> Segments:
        """The segments of ``cost`` on stage ``i`` (and count the bytes they move): the TP
        collectives, plus what compute does not hide of the overlapped ones (TP multicasts and
        overlap; under the whole compute, the replicas' weight multicast and ZeRO-3's prefetched
        gathers; under the attention's compute, context parallelism's ring), split evenly over
        the segments."""
        flows = self.stage_flows[i]
        segments = cost.segments
        dram = 0.0
        if flows.dram is not None and cost.dram_bytes > 0:
            dram = flows.dram.step_time_s(cost.dram_bytes / segments)
            flows.dram.bytes_moved += cost.dram_bytes
        collective, moved, latency = self._collectives_time(i, cost.tp_collectives)
        if cost.overlapped_collectives:
            hidden, hidden_moved, _ = self._collectives_time(i, cost.overlapped_collectives)
            collective, moved = collective + max(hidden - cost.overlap_s, 0.0), moved + hidden_moved
        if cost.replica_collectives:
            hidden, hidden_moved, _ = self._collectives_time(i, cost.replica_collectives, flows.dp)
            collective, moved = collective + max(hidden - cost.compute_s, 0.0), moved + hidden_moved
        if cost.cp_collectives and flows.cp is not None:
            hidden, hidden_moved, _ = self._collectives_time(i, cost.cp_collectives, flows.cp)
            collective, moved = collective + max(hidden - cost.cp_overlap_s, 0.0), moved + hidden_moved
        dram_bytes = cost.dram_bytes * flows.dram.num_edges / segments if flows.dram is not None else 0.0
        return Segments(segments, cost.compute_s / segments, dram, dram_bytes, collective / segments,
                        latency / segments, moved / segments)

    def _shared_pass(self, i: int, cost: PassCost, microbatch: int) -> Generator[simpy.Event, Any, None]:
        """A pass under bandwidth sharing: each segment computes while its DRAM stream moves, then
        its TP collectives move, then ZeRO-3's exposed collectives (what :meth:`_pass_end`
        books), as one :meth:`~simulator.network.sharing.SharingNetwork.sequence`."""
        net, stats = self.sharing, self.stats[i]
        assert net is not None
        shared = self._memo("phases", i, id(cost), lambda: self._phases(i, cost))
        self.events += 2 * shared.segments.count
        start = self.env.now
        times = yield net.sequence(shared.plan)
        if times is None:  # every phase took its time alone
            stats.dram_stall_s += shared.alone_dram_stall_s
            stats.communication_s += shared.alone_communication_s
            if not self.record:
                return
        compute_s = shared.segments.compute_s
        for (name, size, flow, *_), (begin, arrived, end) in zip(shared.phases, times or shared.plan.times(start),
                                                                 strict=True):
            if times is not None:
                if name == "dram":
                    stats.dram_stall_s += max(end - begin - compute_s, 0.0)  # rounding never below 0
                elif name != "compute":
                    stats.communication_s += end - begin
            if self.record and flow is not None:
                self._trace(flow, f"stage {i}", name, begin, (arrived if name == "dram" else end) - begin, size,
                            microbatch)

    def _phases(self, i: int, cost: PassCost) -> SharedPass:
        """A pass under sharing: its segments, named phases and plan (:class:`SharedPass`)."""
        flows = self.stage_flows[i]
        seg = self._segments_of(i, cost)
        segment: list[_Phase] = []
        dram = flows.dram if seg.dram_s else None
        streams = dram is not None
        if dram is not None:
            segment.append(("dram", seg.dram_bytes, dram, seg.dram_s, dram.latency_s, seg.compute_s))
        elif seg.compute_s:
            segment.append(("compute", 0.0, None, seg.compute_s, 0.0, 0.0))
        if seg.collective_s:
            segment.append(("tp collectives", seg.collective_bytes, flows.tp, seg.collective_s,
                            seg.collective_latency_s, 0.0))
        phases = segment * seg.count
        stall = seg.count * (max(seg.dram_s, seg.compute_s) - seg.compute_s) if streams else 0.0
        communication = seg.count * seg.collective_s
        if cost.exposed_dp_collectives:
            duration, moved, latency = self._collectives_time(i, cost.exposed_dp_collectives, flows.dp)
            phases.append(("zero-3 exposed", moved, flows.dp, duration, latency, 0.0))
            communication += duration
        assert self.sharing is not None
        plan = self.sharing.plan([(flow, duration, latency, wait) for _, _, flow, duration, latency, wait in phases])
        return SharedPass(seg, phases, plan, stall, communication)

    def _pass_end(self, i: int, cost: PassCost, now: float, microbatch: int = -1) -> float:
        """Finish time of a pass started at ``now`` with booked resources: per segment, compute
        overlapped with the DRAM stream, then the segment's collectives (:meth:`_segments`), then
        ZeRO-3's exposed gather and reduce-scatter."""
        flows, stats, net, record = self.stage_flows[i], self.stats[i], self.booking, self.record
        assert net is not None
        seg = self._segments(i, cost)
        dram_flow = flows.dram
        t = now
        for _ in range(seg.count):
            ready = t + seg.compute_s
            if dram_flow is not None and seg.dram_s:
                start = net.book(dram_flow, t, seg.dram_s, now)
                ready = max(ready, start + seg.dram_s)
                stats.dram_stall_s += max(ready - t - seg.compute_s, 0.0)  # rounding never below 0
                if record:
                    self._trace(dram_flow, f"stage {i}", "dram", start, seg.dram_s, seg.dram_bytes, microbatch)
            t = ready
            if seg.collective_s:
                start = net.book(flows.tp, t, seg.collective_s, now)
                stats.communication_s += start + seg.collective_s - t
                t = start + seg.collective_s
                if record:
                    self._trace(flows.tp, f"stage {i}", "tp collectives", start, seg.collective_s,
                                seg.collective_bytes, microbatch)
        return self._exposed_dp(i, cost, t, microbatch) if cost.exposed_dp_collectives else t

    def _exposed_dp(self, i: int, cost: PassCost, t: float, microbatch: int) -> float:
        """Run a pass's exposed data-parallel collectives from ``t`` on the stage's DP group;
        returns when they end (s)."""
        duration, moved, _ = self._collectives_time(i, cost.exposed_dp_collectives, self.stage_flows[i].dp)
        flow = self.stage_flows[i].dp
        assert self.booking is not None
        start = self.booking.book(flow, t, duration, self.env.now)
        self.stats[i].communication_s += start + duration - t
        if self.record:
            self._trace(flow, f"stage {i}", "zero-3 exposed", start, duration, moved, microbatch)
        return start + duration

    def _trace(self, flow: Flow, lane: str, name: str, start: float, duration: float, size_bytes: float,
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

    def _collectives_time(self, i: int, collectives: tuple[Collective, ...],
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
            latency += flow.collective_steps(c.kind) * flow.latency_s * c.count
        return total, size, latency

    def _send(self, i: int, j: int, k: int, kind: str, microbatch: int,
              size_bytes: float) -> float | simpy.Event:
        """Send stage output of virtual stage j to virtual stage k, delivered once the receiving
        group has regrouped it; returns when the transfer itself ends (s, or an event under
        sharing), what a blocking sender waits for."""
        now, dst = self.env.now, k % self.pp
        flow = self.p2p.get((i, dst))
        message = self._message((kind, k, microbatch))
        self.events += 2
        if flow is not None and size_bytes > 0 and self.sharing is not None:
            per_edge = self._p2p_bytes(flow, i, size_bytes)
            send = self._memo("send", dst, (i, size_bytes), lambda: self._shared_send(flow, dst, size_bytes, per_edge))
            if send.parts is None:
                done = self.sharing.sequence(send.both)
                waiting = bool(message.callbacks)
                done.callbacks.append(partial(self._delivered, send, i, kind, microbatch, message if not waiting
                                              else None, now))
                if waiting:  # the receiver waits already: it resumes on the delivery itself, one event fewer
                    assert message.callbacks is not None
                    done.callbacks.extend(message.callbacks)
                    message.callbacks.clear()
                return now
            sent = self.sharing.sequence(send.parts[0])
            sent.callbacks.append(partial(self._shared_regroup, send, i, kind, microbatch, message, now))
            return sent
        end = sent_s = now
        if flow is not None and size_bytes > 0:
            assert self.booking is not None
            per_edge = self._p2p_bytes(flow, i, size_bytes)
            duration = flow.step_time_s(per_edge)
            start = self.booking.book(flow, now, duration, now)
            sent_s = start + duration
            if self.record:
                self._trace_p2p(flow, i, dst, kind, microbatch, start, duration, per_edge)
            end = self._regroup(dst, sent_s, size_bytes, f"{i}->{dst}", microbatch)
        self.env.timeout(end - now).callbacks.append(lambda _event: _succeed(message))
        return sent_s

    def _shared_send(self, flow: Flow, dst: int, size_bytes: float, per_edge: float) -> SharedSend:
        """The plans of a send of ``size_bytes`` on p2p ``flow`` to stage ``dst`` under sharing
        (those of its parts only for a blocking sender, which waits for the first)."""
        net = self.sharing
        assert net is not None
        phases = [(flow, flow.step_time_s(per_edge), flow.latency_s, 0.0)]
        regroup, tp, moved = self._regroup_cost(dst, size_bytes), None, 0.0
        if regroup is not None:
            tp, duration, moved, latency = regroup
            phases.append((tp, duration, latency, 0.0))
        parts = (net.plan(phases[:1]), net.plan(phases[1:]) if tp is not None else None) if self.p2p_blocking else None
        return SharedSend(flow, dst, per_edge, net.plan(phases), parts, tp, moved)

    def _shared_regroup(self, send: SharedSend, i: int, kind: str, microbatch: int, message: simpy.Event,
                        start_s: float, sent: simpy.Event) -> None:
        """A blocking :meth:`_send` under bandwidth sharing, once the transfer has ended: the
        regroup, then the message is delivered."""
        net = self.sharing
        assert net is not None
        assert send.parts is not None
        transfer, regroup = send.parts
        if self.record:
            self._trace_shared_send(send, i, kind, microbatch, _times(sent, transfer, start_s))
        if regroup is None:
            message.succeed()
            return
        regrouped = net.sequence(regroup)
        regrouped.callbacks.append(partial(self._regrouped, send, i, microbatch, message, self.env.now))

    def _regrouped(self, send: SharedSend, i: int, microbatch: int, message: simpy.Event, start_s: float,
                   regrouped: simpy.Event) -> None:
        """A blocking send's regroup under bandwidth sharing has ended: deliver ``message``."""
        if self.record:
            assert send.parts is not None and send.parts[1] is not None
            self._trace_shared_regroup(send, i, microbatch, _times(regrouped, send.parts[1], start_s)[0])
        message.succeed()

    def _delivered(self, send: SharedSend, i: int, kind: str, microbatch: int, message: simpy.Event | None,
                   start_s: float, done: simpy.Event) -> None:
        """A send and its regroup under bandwidth sharing have ended: deliver ``message`` (None:
        its receiver waited on ``done`` itself)."""
        if self.record:
            times = _times(done, send.both, start_s)
            self._trace_shared_send(send, i, kind, microbatch, times)
            if send.regroup_flow is not None:
                self._trace_shared_regroup(send, i, microbatch, times[1])
        if message is not None:
            message.succeed()

    def _trace_shared_send(self, send: SharedSend, i: int, kind: str, microbatch: int,
                           times: list[PhaseTimes]) -> None:
        start, _, end = times[0]
        self._trace_p2p(send.flow, i, send.dst, kind, microbatch, start, end - start, send.per_edge)

    def _trace_shared_regroup(self, send: SharedSend, i: int, microbatch: int, times: PhaseTimes) -> None:
        start, _, end = times
        assert send.regroup_flow is not None
        self._trace(send.regroup_flow, f"{i}->{send.dst}", f"regroup mb {microbatch}", start, end - start,
                    send.regroup_bytes * send.regroup_flow.num_edges, microbatch, kind="p2p")

    def _p2p_bytes(self, flow: Flow, i: int, size_bytes: float) -> float:
        """Bytes per edge of stage ``i``'s send of ``size_bytes`` (counted as moved)."""
        adapters = self.transfer_strategy == 2
        per_edge = size_bytes * len(self.placements[i].tp_groups[0]) if adapters else size_bytes
        flow.bytes_moved += per_edge
        return per_edge

    def _trace_p2p(self, flow: Flow, i: int, dst: int, kind: str, microbatch: int, start: float,
                   duration: float, per_edge: float) -> None:
        self._trace(flow, f"{i}->{dst}", f"{kind} mb {microbatch}", start, duration, per_edge * flow.num_edges,
                    microbatch, source_stage=i, destination_stage=dst, transfer=kind)

    def _regroup_cost(self, stage: int, size_bytes: float) -> tuple[Flow, float, float, float] | None:
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
            latency = flow.collective_steps("all_gather") * flow.latency_s
        else:
            duration, moved = flow.step_time_s(full) + (tp - 2) * flow.latency_s, full
            latency = (tp - 1) * flow.latency_s
        flow.bytes_moved += moved
        return flow, duration, moved, latency

    def _regroup(self, stage: int, start: float, size_bytes: float, lane: str, microbatch: int) -> float:
        """Book the regroup of :meth:`_regroup_cost` from ``start``; returns its finish time."""
        regroup = self._regroup_cost(stage, size_bytes)
        if regroup is None:
            return start
        flow, duration, moved, _ = regroup
        assert self.booking is not None
        begin = self.booking.book(flow, start, duration, self.env.now)
        if self.record:
            self._trace(flow, lane, f"regroup mb {microbatch}", begin, duration,
                        moved * flow.num_edges, microbatch, kind="p2p")
        return begin + duration

    def _gradient_update(self, i: int) -> Generator[simpy.Event, Any, None]:
        """Data-parallel collectives of every chunk, then the optimizer step (PALM GU)."""
        chunks = [self.costs[c * self.pp + i] for c in range(len(self.costs) // self.pp)]
        now = self.env.now
        flow = self.stage_flows[i].iteration
        duration, moved, latency = self._memo("gradient", i, 0, lambda: self._collectives_time(
            i, tuple(c for cost in chunks for c in cost.dp_collectives), flow))
        self.events += 1
        if self.sharing is not None:
            if duration:
                yield self.sharing.transfer(flow, duration, latency)
            start, end = now, self.env.now
            self.stats[i].communication_s += end - now
            for cost in chunks:
                yield from self._shared_pass(i, cost.optimizer_step, -1)
        else:
            assert self.booking is not None
            start = self.booking.book(flow, now, duration, now) if duration else now
            end = start + duration
            self.stats[i].communication_s += end - now
            optimized = end
            for cost in chunks:
                optimized = self._pass_end(i, cost.optimizer_step, optimized)
            yield self.env.timeout(optimized - now)
        if self.record and duration:
            self._trace(flow, f"stage {i}", "gradient collectives", start, end - start, moved)
        self.stats[i].optimizer_s += sum(c.optimizer_step.compute_s for c in chunks)
        if self.record:
            self.records.append(PassRecord(i, PassKind.OPTIMIZER_UPDATE, -1, 0, now, self.env.now))

@dataclass(frozen=True, slots=True)
class FlowIndex:
    """Every (flow, resource) pair of an engine's flows as arrays, for totals per resource:
    ``flow[k]`` (position in :attr:`Engine.flows`) crosses ``resource[k]`` with ``load[k]`` edges
    and ``occupancy[k]`` (s per byte per edge); ``num_resources`` of the topology."""

    flow: np.ndarray
    resource: np.ndarray
    load: np.ndarray
    occupancy: np.ndarray
    num_resources: int

    def carried_bytes(self, flow_bytes: Sequence[float]) -> np.ndarray:
        """Bytes each resource carried, given the bytes per edge each flow moved."""
        moved = np.asarray(flow_bytes, dtype=float)[self.flow]
        return np.bincount(self.resource, weights=self.load * moved, minlength=self.num_resources)

    def busy_s(self, flow_bytes: Sequence[float]) -> np.ndarray:
        """Seconds each resource is busy, given the bytes per edge each flow moved."""
        moved = np.asarray(flow_bytes, dtype=float)[self.flow]
        return np.bincount(self.resource, weights=self.occupancy * moved, minlength=self.num_resources)


def _flow_index(flows: list[Flow], num_resources: int) -> FlowIndex:
    pairs = [(k, r, f.loads[r], f.occupancy[r]) for k, f in enumerate(flows) for r in f.loads]
    flow, resource, load, occupancy = (np.array(column) for column in zip(*pairs, strict=True)) if pairs else \
        (np.zeros(0, dtype=int), np.zeros(0, dtype=int), np.zeros(0), np.zeros(0))
    return FlowIndex(flow=flow, resource=resource, load=load, occupancy=occupancy, num_resources=num_resources)


def _all_flows(stage_flows: list[StageFlows], p2p: dict[tuple[int, int], Flow]) -> list[Flow]:
    """An engine's flows in their fixed order: each stage's own, then the p2p ones."""
    return [f for s in stage_flows for f in _own_flows(s)] + list(p2p.values())


@lru_cache(maxsize=128)
def _machine_flows(topology: Topology, placements: tuple[StagePlacement, ...], calibration: Calibration,
                   transfer_strategy: int, all_to_all: bool,
                   ) -> tuple[list[StageFlows], dict[tuple[int, int], Flow], FlowIndex]:
    """The flows of every stage, the p2p flows between neighbours and their index (built once
    per placement: a search revisits one placement under many plans; an engine resets the
    counters it uses)."""
    stage_flows = [_stage_flows(topology, calibration, i, p, all_to_all) for i, p in enumerate(placements)]
    pp = len(placements)
    p2p: dict[tuple[int, int], Flow] = {}
    for i in range(pp):
        for j in sorted({(i + 1) % pp, (i - 1) % pp} - {i}):
            p2p[(i, j)] = _p2p_flow(topology, calibration, placements, transfer_strategy, i, j)
    return stage_flows, p2p, _flow_index(_all_flows(stage_flows, p2p), topology.num_resources)


def _stage_flows(topo: Topology, cal: Calibration, i: int, placement: StagePlacement, all_to_all: bool) -> StageFlows:
    """The flows of stage ``i``; the all-pairs pattern of its TP groups only if some
    collective is an all-to-all (ResNet's halo exchange)."""
    tp_size, dp_size = len(placement.tp_groups[0]), len(placement.dp_groups[0])
    dram = None
    if topo.dram_route(placement.devices[0])[0]:
        dram = make_flow(topo, f"stage{i} dram", "dram", [(d, -1) for d in placement.devices],
                         cal.memory_bound_efficiency)
    return StageFlows(
        tp=make_flow(topo, f"stage{i} tp", "tp", _rings(topo, placement.tp_groups),
                     cal.collective_efficiency, tp_size),
        dp=make_flow(topo, f"stage{i} dp", "dp", _rings(topo, placement.dp_groups),
                     cal.collective_efficiency, dp_size),
        dram=dram,
        tp_all_to_all=make_flow(topo, f"stage{i} tp a2a", "tp", all_pairs_edges(placement.tp_groups),
                                cal.collective_efficiency, tp_size) if all_to_all else None,
        cp=make_flow(topo, f"stage{i} cp", "cp", _rings(topo, placement.cp_groups), cal.collective_efficiency,
                     len(placement.cp_groups[0])) if placement.cp_groups else None,
        dp_replica=make_flow(topo, f"stage{i} dp replicas", "dp", _rings(topo, placement.replica_groups),
                             cal.collective_efficiency, len(placement.replica_groups[0]))
        if placement.replica_groups else None,
    )


def _p2p_flow(topo: Topology, cal: Calibration, placements: tuple[StagePlacement, ...], transfer_strategy: int,
              i: int, j: int) -> Flow:
    """Stage ``i``'s sends to stage ``j``: rank to rank (strategy 1) or adapter to adapter (2)."""
    src, dst = placements[i], placements[j]
    if transfer_strategy == 1:
        edges = list(zip(src.devices, dst.devices, strict=True))
    else:
        edges = [(a[0], b[0]) for a, b in zip(src.tp_groups, dst.tp_groups, strict=True)]
    return make_flow(topo, f"p2p {i}->{j}", "p2p", edges, cal.p2p_efficiency)


def _rings(topology: Topology, groups: tuple[tuple[int, ...], ...]) -> list[Edge]:
    """Ring edges of ``groups``, spread over the NICs of each node on a GPU cluster."""
    return topology.channel_edges(groups, ring_edges(groups))


def _succeed(event: simpy.Event) -> None:
    """Trigger ``event`` (a callback must return None; ``succeed`` returns the event)."""
    event.succeed()


def _own_flows(flows: StageFlows) -> list[Flow]:
    """The flows a stage's own process runs (not its p2p sends)."""
    return [f for f in (flows.tp, flows.dp, flows.dram, flows.tp_all_to_all, flows.cp, flows.dp_replica)
            if f is not None]


def traffic_by_kind(flows: list[Flow], flow_bytes: list[float]) -> dict[str, float]:
    """Total bytes moved per traffic class (bytes per edge x edges), summed over flows."""
    totals = {"tp": 0.0, "dp": 0.0, "p2p": 0.0, "dram": 0.0}
    for flow, moved in zip(flows, flow_bytes, strict=True):
        totals[flow.kind] = totals.get(flow.kind, 0.0) + moved * flow.num_edges
    return totals
