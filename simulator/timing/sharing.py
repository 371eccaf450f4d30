"""Bandwidth sharing: each pass, send and update is a train of transfers on a
:class:`~simulator.network.sharing.SharingNetwork`, whose flows share each link's and DRAM port's
bandwidth max-min fairly; a stage's process waits on the train's end.

A pass is ``segments`` layers; each computes while streaming its DRAM share (overlapped, PALM
Fig. 5), then runs its TP collectives; then ZeRO-3's exposed gather and reduce-scatter. Alone,
every phase takes the time whole-pass booking gives it (:mod:`simulator.timing.booking`). Times
are seconds.
"""

from __future__ import annotations

from collections.abc import Generator, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

import simpy

from simulator.costs import PassCost
from simulator.network.collectives import Flow
from simulator.network.sharing import PhaseTimes, Plan, SharingNetwork
from simulator.timing.machine import Machine, Segments

_Phase = tuple[str, float, Flow | None, float, float, float]


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


class SharingTiming:
    """Passes, sends and updates as trains of transfers on ``network`` (see the module docstring).

    Args:
        machine: the engine's flows and run state.
        network: shares bandwidth (a fresh one: it keeps transfers for one run).
    """

    def __init__(self, machine: Machine, network: SharingNetwork) -> None:
        self.machine, self.network = machine, network
        self._deliveries: dict[simpy.Event, simpy.Event] = {}

    def start(self) -> None:
        """Forget every transfer and start on ``machine.env`` with the machine's flows."""
        self.network.reset()
        self.network.start(self.machine.env, self.machine.flows)
        self._deliveries = {}

    def run_pass(self, i: int, cost: PassCost, microbatch: int) -> Generator[simpy.Event, Any, None]:
        """A pass under bandwidth sharing: each segment computes while its DRAM stream moves, then
        its TP collectives move, then ZeRO-3's exposed collectives, then the pass's launch gaps and host time
        (what whole-pass booking books), as one :meth:`~simulator.network.sharing.SharingNetwork.sequence`."""
        machine = self.machine
        net, stats = self.network, machine.stats[i]
        shared = machine.memo("phases", i, id(cost), self._phases, i, cost)
        machine.events += 2 * shared.segments.count
        start = machine.env.now
        times = yield net.sequence(shared.plan)
        if times is None:  # every phase took its time alone
            stats.dram_stall_s += shared.alone_dram_stall_s
            stats.communication_s += shared.alone_communication_s
            if not machine.record:
                return
        compute_s = shared.segments.compute_s
        for (name, size, flow, *_), (begin, arrived, end) in zip(shared.phases, times or shared.plan.times(start),
                                                                 strict=True):
            if times is not None:
                if name == "dram":
                    stats.dram_stall_s += max(end - begin - compute_s, 0.0)  # rounding never below 0
                elif name not in ("compute", "idle"):
                    stats.communication_s += end - begin
            if machine.record and flow is not None:
                machine.trace(flow, f"stage {i}", name, begin, (arrived if name == "dram" else end) - begin, size,
                              microbatch)

    def _phases(self, i: int, cost: PassCost) -> SharedPass:
        """A pass under sharing: its segments, named phases and plan (:class:`SharedPass`)."""
        machine = self.machine
        flows = machine.stage_flows[i]
        seg = machine.segments_of(i, cost)
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
            duration, moved, latency = machine.collectives_time(i, cost.exposed_dp_collectives, flows.dp)
            phases.append(("zero-3 exposed", moved, flows.dp, duration, latency, 0.0))
            communication += duration
        if cost.idle_s:
            phases.append(("idle", 0.0, None, cost.idle_s, 0.0, 0.0))
        plan = self.network.plan([(flow, duration, latency, wait) for _, _, flow, duration, latency, wait in phases])
        return SharedPass(seg, phases, plan, stall, communication)

    def send(self, i: int, flow: Flow, dst: int, kind: str, microbatch: int, size_bytes: float,
             message: simpy.Event) -> float | simpy.Event:
        """Stage ``i``'s send of ``size_bytes`` on p2p ``flow`` to stage ``dst`` and the receiving
        group's regroup, ``message`` succeeding when both end; returns now, or for a blocking
        sender the event of the transfer's own end."""
        machine = self.machine
        now = machine.env.now
        per_edge = machine.p2p_bytes(flow, i, size_bytes)
        send = machine.memo("send", dst, (i, size_bytes), self._shared_send, flow, dst, size_bytes, per_edge)
        if send.parts is None:
            done = self.network.sequence(send.both)
            if machine.record:
                done.callbacks.append(partial(self._delivered, send, i, kind, microbatch, now))
            if message.callbacks:  # the receiver waits already: it resumes on the delivery itself
                done.callbacks.extend(message.callbacks)
                message.callbacks.clear()
            else:  # it will wait on the delivery itself (:meth:`delivery`)
                self._deliveries[message] = done
            return now
        sent = self.network.sequence(send.parts[0])
        sent.callbacks.append(partial(self._shared_regroup, send, i, kind, microbatch, message, now))
        return sent

    def _shared_send(self, flow: Flow, dst: int, size_bytes: float, per_edge: float) -> SharedSend:
        """The plans of a send of ``size_bytes`` on p2p ``flow`` to stage ``dst`` under sharing
        (those of its parts only for a blocking sender, which waits for the first)."""
        net = self.network
        phases = [(flow, flow.step_time_s(per_edge), flow.latency_s, 0.0)]
        regroup, tp, moved = self.machine.regroup_cost(dst, size_bytes), None, 0.0
        if regroup is not None:
            tp, duration, moved, latency = regroup
            phases.append((tp, duration, latency, 0.0))
        blocking = self.machine.p2p_blocking
        parts = (net.plan(phases[:1]), net.plan(phases[1:]) if tp is not None else None) if blocking else None
        return SharedSend(flow, dst, per_edge, net.plan(phases), parts, tp, moved)

    def _shared_regroup(self, send: SharedSend, i: int, kind: str, microbatch: int, message: simpy.Event,
                        start_s: float, sent: simpy.Event) -> None:
        """A blocking :meth:`send`, once the transfer has ended: the regroup, then the message is
        delivered."""
        assert send.parts is not None
        transfer, regroup = send.parts
        if self.machine.record:
            self._trace_shared_send(send, i, kind, microbatch, _times(sent, transfer, start_s))
        if regroup is None:
            message.succeed()
            return
        regrouped = self.network.sequence(regroup)
        regrouped.callbacks.append(partial(self._regrouped, send, i, microbatch, message, self.machine.env.now))

    def _regrouped(self, send: SharedSend, i: int, microbatch: int, message: simpy.Event, start_s: float,
                   regrouped: simpy.Event) -> None:
        """A blocking send's regroup has ended: deliver ``message``."""
        if self.machine.record:
            assert send.parts is not None and send.parts[1] is not None
            self._trace_shared_regroup(send, i, microbatch, _times(regrouped, send.parts[1], start_s)[0])
        message.succeed()

    def delivery(self, message: simpy.Event) -> simpy.Event:
        """What the receiver of ``message`` waits on: the end of the (non-blocking) send that
        delivers it, which never succeeds ``message`` itself (no event of its own), else
        ``message``."""
        done = self._deliveries.pop(message, None)
        return message if done is None else self.network.waiter(done)

    def _delivered(self, send: SharedSend, i: int, kind: str, microbatch: int, start_s: float,
                   done: simpy.Event) -> None:
        """A non-blocking send and its regroup have ended (its receiver waits on ``done``): trace
        them (called only when recording)."""
        times = _times(done, send.both, start_s)
        self._trace_shared_send(send, i, kind, microbatch, times)
        if send.regroup_flow is not None:
            self._trace_shared_regroup(send, i, microbatch, times[1])

    def _trace_shared_send(self, send: SharedSend, i: int, kind: str, microbatch: int,
                           times: list[PhaseTimes]) -> None:
        start, _, end = times[0]
        self.machine.trace_p2p(send.flow, i, send.dst, kind, microbatch, start, end - start, send.per_edge)

    def _trace_shared_regroup(self, send: SharedSend, i: int, microbatch: int, times: PhaseTimes) -> None:
        start, _, end = times
        assert send.regroup_flow is not None
        self.machine.trace(send.regroup_flow, f"{i}->{send.dst}", f"regroup mb {microbatch}", start, end - start,
                           send.regroup_bytes * send.regroup_flow.num_edges, microbatch, kind="p2p")

    def update(self, i: int, flow: Flow, duration_s: float, latency_s: float,
               steps: Sequence[PassCost]) -> Generator[simpy.Event, Any, tuple[float, float]]:
        """Stage ``i``'s data-parallel collectives (``duration_s`` alone) on ``flow`` from now,
        then its optimizer ``steps``. Returns when the collectives started and ended (s)."""
        machine = self.machine
        now = machine.env.now
        if duration_s:
            yield self.network.transfer(flow, duration_s, latency_s)
        start, end = now, machine.env.now
        machine.stats[i].communication_s += end - now
        for step in steps:
            yield from self.run_pass(i, step, -1)
        return start, end
