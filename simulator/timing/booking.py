"""Whole-pass booking: each pass, send and update is booked on its resources from the time it is
ready, through a :class:`~simulator.network.backends.NetworkBackend` (``analytical``: never
delayed, PALM Eq. 2 without contention; ``contention``: PALM's exclusive links and DRAM ports,
§IV-C), and a stage's process waits until the booked end.

A pass is ``segments`` layers; each computes while streaming its DRAM share (overlapped, PALM
Fig. 5), then runs its TP collectives; then ZeRO-3's exposed gather and reduce-scatter. Times are
seconds.
"""

from __future__ import annotations

from collections.abc import Generator, Sequence
from typing import Any

import simpy

from simulator.costs import PassCost
from simulator.network.backends import NetworkBackend
from simulator.network.collectives import Flow
from simulator.timing.flows import own_flows
from simulator.timing.machine import Machine


class BookingTiming:
    """Passes, sends and updates booked whole on ``backend`` (see the module docstring).

    Args:
        machine: the engine's flows and run state.
        backend: books resources (a fresh one: it keeps bookings for one run).
    """

    def __init__(self, machine: Machine, backend: NetworkBackend) -> None:
        self.machine, self.backend = machine, backend
        if backend.uses_contention():
            self._assign_bookings()

    def _assign_bookings(self) -> None:
        """Book a resource only where flows of different processes meet; p2p flows, which can
        overlap themselves, also book a private channel (ids past the physical resources).
        Resources booked by exactly the same flows always hold the same calendar, so each such
        class is booked once, through one representative."""
        machine = self.machine
        owner = {id(f): i for i, s in enumerate(machine.stage_flows) for f in own_flows(s)}
        owners: dict[int, set[int | str]] = {}
        for flow in machine.flows:
            for r in flow.loads:
                owners.setdefault(r, set()).add(owner.get(id(flow), flow.name))
        booked_by: dict[int, list[int]] = {}
        for index, flow in enumerate(machine.flows):
            for r in flow.loads:
                if len(owners[r]) > 1:
                    booked_by.setdefault(r, []).append(index)
        representative: dict[tuple[int, ...], int] = {}
        for r, users in booked_by.items():
            representative.setdefault(tuple(users), r)
        channel = machine.topology.num_resources
        for flow in machine.flows:
            classes = {tuple(booked_by[r]) for r in flow.loads if r in booked_by}
            flow.booked = tuple(sorted(representative[c] for c in classes))
            if flow.kind == "p2p":
                flow.booked += (channel,)
                channel += 1

    def start(self) -> None:
        """Forget every booking: a run starts in ``machine.env``."""
        self.backend.reset()

    def run_pass(self, i: int, cost: PassCost, microbatch: int) -> Generator[simpy.Event, Any, None]:
        """Book a pass of stage ``i`` from now and wait until it ends."""
        machine = self.machine
        now = machine.env.now
        machine.events += 1
        yield machine.env.timeout(self._pass_end(i, cost, now, microbatch) - now)

    def _pass_end(self, i: int, cost: PassCost, now: float, microbatch: int = -1) -> float:
        """Finish time of a pass started at ``now`` with booked resources: per segment, compute
        overlapped with the DRAM stream, then the segment's collectives
        (:meth:`~simulator.timing.machine.Machine.segments`), then ZeRO-3's exposed gather and
        reduce-scatter, then the pass's launch gaps and host time."""
        machine = self.machine
        flows, stats, net, record = machine.stage_flows[i], machine.stats[i], self.backend, machine.record
        seg = machine.segments(i, cost)
        dram_flow = flows.dram
        t = now
        for _ in range(seg.count):
            ready = t + seg.compute_s
            if dram_flow is not None and seg.dram_s:
                start = net.book(dram_flow, t, seg.dram_s, now)
                ready = max(ready, start + seg.dram_s)
                stats.dram_stall_s += max(ready - t - seg.compute_s, 0.0)  # rounding never below 0
                if record:
                    machine.trace(dram_flow, f"stage {i}", "dram", start, seg.dram_s, seg.dram_bytes, microbatch)
            t = ready
            if seg.collective_s:
                start = net.book(flows.tp, t, seg.collective_s, now)
                stats.communication_s += start + seg.collective_s - t
                t = start + seg.collective_s
                if record:
                    machine.trace(flows.tp, f"stage {i}", "tp collectives", start, seg.collective_s,
                                  seg.collective_bytes, microbatch)
        return (self._exposed_dp(i, cost, t, microbatch) if cost.exposed_dp_collectives else t) + cost.idle_s

    def _exposed_dp(self, i: int, cost: PassCost, t: float, microbatch: int) -> float:
        """Run a pass's exposed data-parallel collectives from ``t`` on the stage's DP group;
        returns when they end (s)."""
        machine = self.machine
        duration, moved, _ = machine.collectives_time(i, cost.exposed_dp_collectives, machine.stage_flows[i].dp)
        flow = machine.stage_flows[i].dp
        start = self.backend.book(flow, t, duration, machine.env.now)
        machine.stats[i].communication_s += start + duration - t
        if machine.record:
            machine.trace(flow, f"stage {i}", "zero-3 exposed", start, duration, moved, microbatch)
        return start + duration

    @staticmethod
    def delivery(message: simpy.Event) -> simpy.Event:
        """What the receiver of ``message`` waits on: ``message``."""
        return message

    def send(self, i: int, flow: Flow, dst: int, kind: str, microbatch: int, size_bytes: float,
             message: simpy.Event) -> float:
        """Book stage ``i``'s send of ``size_bytes`` on p2p ``flow`` to stage ``dst`` and the
        receiving group's regroup, succeed ``message`` when both end; returns when the transfer
        itself ends (s)."""
        machine = self.machine
        now = machine.env.now
        per_edge = machine.p2p_bytes(flow, i, size_bytes)
        duration = flow.step_time_s(per_edge)
        start = self.backend.book(flow, now, duration, now)
        sent_s = start + duration
        if machine.record:
            machine.trace_p2p(flow, i, dst, kind, microbatch, start, duration, per_edge)
        end = self._regroup(dst, sent_s, size_bytes, f"{i}->{dst}", microbatch)
        machine.env.timeout(end - now).callbacks.append(lambda _event: _succeed(message))
        return sent_s

    def _regroup(self, stage: int, start: float, size_bytes: float, lane: str, microbatch: int) -> float:
        """Book the regroup of :meth:`~simulator.timing.machine.Machine.regroup_cost` from
        ``start``; returns its finish time."""
        machine = self.machine
        regroup = machine.regroup_cost(stage, size_bytes)
        if regroup is None:
            return start
        flow, duration, moved, _ = regroup
        begin = self.backend.book(flow, start, duration, machine.env.now)
        if machine.record:
            machine.trace(flow, lane, f"regroup mb {microbatch}", begin, duration,
                          moved * flow.num_edges, microbatch, kind="p2p")
        return begin + duration

    def update(self, i: int, flow: Flow, duration_s: float, latency_s: float,
               steps: Sequence[PassCost]) -> Generator[simpy.Event, Any, tuple[float, float]]:
        """Book stage ``i``'s data-parallel collectives (``duration_s`` alone) on ``flow`` from
        now, then its optimizer ``steps``; wait until they end. Returns when the collectives
        started and ended (s)."""
        machine = self.machine
        now = machine.env.now
        start = self.backend.book(flow, now, duration_s, now) if duration_s else now
        end = start + duration_s
        machine.stats[i].communication_s += end - now
        optimized = end
        for step in steps:
            optimized = self._pass_end(i, step, optimized)
        yield machine.env.timeout(optimized - now)
        return start, end


def _succeed(event: simpy.Event) -> None:
    """Trigger ``event`` (a callback must return None; ``succeed`` returns the event)."""
    event.succeed()
