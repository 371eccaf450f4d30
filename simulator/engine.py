"""SimPy wiring: one process per pipeline stage, messages between stages, shared resources.

Time is SimPy's ``env.now`` in **seconds**. Virtual Tile Aggregation (PALM §IV-A): a pipeline
stage is one process standing for all its ``tp * cp * dp`` devices; its tensor-parallel collectives,
DRAM streams and data-parallel collectives are flows over *all* its groups at once
(:mod:`simulator.network.collectives`), and every link or DRAM port that flows of different processes
share is booked or shared by the timing model, so contention between stages is real.

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

The engine walks the schedule; how long each pass, send and update takes is a timing model's
(:mod:`simulator.timing`), chosen by name once: whole-pass booking (``analytical``,
``contention``), bandwidth sharing (``sharing``), or the closed form without events
(:meth:`Engine.estimate`).
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Generator, Sequence
from dataclasses import replace
from typing import Any

import simpy

from simulator.costs import PassCost, StageCost
from simulator.errors import BudgetExceeded
from simulator.hardware.spec import Hardware
from simulator.network.topology import Topology
from simulator.passes import Pass, PassKind
from simulator.placement import StagePlacement
from simulator.schedules import PipelineSchedule
from simulator.timing import timing_model
from simulator.timing.closed_form import ClosedForm
from simulator.timing.flows import FlowIndex, StageFlows, traffic_by_kind
from simulator.timing.machine import Machine, Segments
from simulator.timing.records import EngineRun, PassRecord, StageStats, TraceRecord

_Step = tuple[Pass, PassCost, tuple[str, int, int] | None, tuple[int, str, float] | None, float, float]
"""A pass of a stage's order, its cost, the message it waits for, its send, and its cost's
``busy_s`` and ``host_s`` (:meth:`Engine._steps`)."""

__all__ = ["Engine", "EngineRun", "FlowIndex", "PassRecord", "Segments", "StageFlows", "StageStats", "TraceRecord",
           "traffic_by_kind"]


class Engine:
    """Simulates one iteration of ``num_microbatches`` microbatches per replica.

    Args:
        hardware: the machine.
        topology: its routes and resources.
        placements: devices and groups of each pipeline stage.
        costs: per virtual stage costs (``pp * num_chunks``, chunk-major).
        schedule: the pipeline schedule.
        network: the timing model's name (:data:`simulator.timing.TIMINGS`): ``sharing``
            (bandwidth shared, passes wait on transfers), ``contention`` or ``analytical``
            (whole-pass booking).
        training: False runs forwards only (inference).
        transfer_strategy: 1 or 2 (PALM Fig. 11).
        p2p_blocking: a stage waits for its sends to land (``Strategy.p2p_blocking``).
        record: keep a :class:`PassRecord` per pass and a :class:`TraceRecord` per flow booking.
        deadline_s: ``time.perf_counter()`` value past which a run stops.
        event_limit: most events one run may take.

    Raises:
        InputError: unknown ``network``.
        BudgetExceeded: (from :meth:`run`) past ``deadline_s`` or ``event_limit``, checked after
            every pass.
    """

    def __init__(
        self, *, hardware: Hardware, topology: Topology, placements: tuple[StagePlacement, ...],
        costs: tuple[StageCost, ...], schedule: PipelineSchedule, network: str, training: bool,
        transfer_strategy: int = 1, p2p_blocking: bool = False, record: bool = False,
        deadline_s: float = math.inf, event_limit: int | None = None,
    ) -> None:
        self.deadline_s, self.event_limit = deadline_s, event_limit if event_limit is not None else sys.maxsize
        self.costs, self.schedule, self.training = costs, schedule, training
        self.p2p_blocking, self.pp = p2p_blocking, len(placements)
        self.machine = Machine(hardware=hardware, topology=topology, placements=placements, costs=costs,
                               transfer_strategy=transfer_strategy, p2p_blocking=p2p_blocking, record=record)
        self.flows = self.machine.flows
        self.timing = timing_model(network, self.machine)
        self.closed_form = ClosedForm(self.machine, schedule, training)
        self._alone: dict[int, PassCost] = {}

    @property
    def record(self) -> bool:
        """Whether runs keep a :class:`PassRecord` per pass and a :class:`TraceRecord` per booking."""
        return self.machine.record

    @record.setter
    def record(self, value: bool) -> None:
        self.machine.record = value

    def run(self, num_microbatches: int) -> EngineRun:
        """Simulate one iteration and return the raw timings."""
        machine = self.machine
        machine.start(simpy.Environment())
        self.messages: dict[tuple[str, int, int], simpy.Event] = {}
        self.timing.start()
        for i in range(self.pp):
            machine.env.process(self._stage(i, num_microbatches))
        machine.env.run()
        machine.count_memo_bytes()
        makespan = max(s.finish_s for s in machine.stats)
        moved = [f.bytes_moved for f in self.flows]
        return EngineRun(makespan, machine.stats, self.flows, moved, machine.events, machine.records,
                         machine.traces, machine.index)

    def estimate(self, num_microbatches: int) -> tuple[EngineRun, float]:
        """A closed-form iteration, no events: the screening fidelity. Returns the run and the
        steady-state time per microbatch (s) (:meth:`~simulator.timing.closed_form.ClosedForm.estimate`:
        each pass and send alone, ``m max_i t_i + (sum_i t_i - max_i t_i) / v``, then the
        slowest gradient update, and at least the busiest resource's busy time)."""
        return self.closed_form.estimate(num_microbatches)

    def _message(self, key: tuple[str, int, int]) -> simpy.Event:
        event = self.messages.get(key)
        if event is None:
            event = self.messages[key] = self.machine.env.event()
        return event

    def _arrival(self, key: tuple[str, int, int]) -> simpy.Event:
        """What a stage waiting for message ``key`` waits on: the message, whose send takes its
        waiters over, if not sent yet; else what the timing model delivers it by."""
        event = self.messages.get(key)
        if event is None:
            event = self.messages[key] = self.machine.env.event()
            return event
        return self.timing.delivery(event)

    def _steps(self, i: int, num_microbatches: int) -> list[_Step]:
        """Stage ``i``'s passes in the schedule's order, each with its cost, the message it waits
        for (None: none), its send (virtual stage, kind, bytes; None: none), and the cost's busy
        and host time (s)."""
        order = self.schedule.order(i, num_microbatches) if self.training else \
            self.schedule.forward_order(i, num_microbatches)
        last = len(self.costs) - 1
        steps: list[_Step] = []
        for k, p in enumerate(order):
            j = p.chunk * self.pp + i
            stage = self.costs[j]
            awaited: tuple[str, int, int] | None = None
            send: tuple[int, str, float] | None = None
            if p.kind is PassKind.FORWARD:
                awaited = ("act", j, p.microbatch) if j > 0 else None
                send = (j + 1, "act", stage.activation_send_bytes) if j < last else None
            elif p.kind.is_backward:
                awaited = ("grad", j, p.microbatch) if j < last else None
                send = (j - 1, "grad", stage.gradient_send_bytes) if j > 0 else None
            cost = stage.pass_cost(p.kind)
            if cost.ep_overlap_s and not _merged(order, k):
                cost = self._unmerged(cost)
            steps.append((p, cost, awaited, send, cost.busy_s, cost.host_s))
        return steps

    def _unmerged(self, cost: PassCost) -> PassCost:
        """``cost`` run alone, its expert all-to-alls exposed (one object per cost, as the
        machine remembers a cost's segments by its ``id``)."""
        alone = self._alone.get(id(cost))
        if alone is None:
            alone = self._alone[id(cost)] = replace(cost, ep_overlap_s=0.0)
        return alone

    def _stage(self, i: int, num_microbatches: int) -> Generator[simpy.Event, Any, None]:
        machine = self.machine
        env, stats, run_pass = machine.env, machine.stats[i], self.timing.run_pass
        timed = self.deadline_s < math.inf
        for p, cost, awaited, send, busy_s, host_s in self._steps(i, num_microbatches):
            if awaited is not None:
                machine.events += 1
                yield self._arrival(awaited)
            start = env.now
            yield from run_pass(i, cost, p.microbatch)
            stats.compute_s += busy_s
            stats.host_s += host_s
            if machine.record:
                machine.records.append(PassRecord(i, p.kind, p.microbatch, p.chunk, start, env.now, cost.recompute_s,
                                                  cost.compute_s))
            if machine.events > self.event_limit or timed and time.perf_counter() > self.deadline_s:
                self._stop()
            sent: float | simpy.Event = env.now if send is None else \
                self._send(i, send[0], send[1], p.microbatch, send[2])
            if self.p2p_blocking:
                t = env.now
                if isinstance(sent, simpy.Event):
                    yield sent
                elif sent > t:
                    yield env.timeout(sent - t)
                stats.communication_s += env.now - t
        if self.training:
            yield from self._gradient_update(i)
        stats.finish_s = env.now

    def _stop(self) -> None:
        """Raise :class:`BudgetExceeded` for the budget that ran out."""
        events, now = self.machine.events, self.machine.env.now
        if events > self.event_limit:
            raise BudgetExceeded(f"simulation stopped after {events:,} events, over its budget of "
                                 f"{self.event_limit:,} (at {now:.4g} s of simulated time)")
        raise BudgetExceeded(f"simulation stopped at its wall-clock budget after {events:,} events"
                             f" (at {now:.4g} s of simulated time)")

    def _send(self, i: int, k: int, kind: str, microbatch: int, size_bytes: float) -> float | simpy.Event:
        """Send stage ``i``'s output to virtual stage k, delivered once the receiving group has
        regrouped it; returns when the transfer itself ends (s, or an event), what a blocking
        sender waits for."""
        machine = self.machine
        now, dst = machine.env.now, k % self.pp
        flow = machine.p2p.get((i, dst))
        message = self._message((kind, k, microbatch))
        machine.events += 2
        if flow is not None and size_bytes > 0:
            return self.timing.send(i, flow, dst, kind, microbatch, size_bytes, message)
        machine.env.timeout(0.0).callbacks.append(lambda _event: _succeed(message))
        return now

    def _gradient_update(self, i: int) -> Generator[simpy.Event, Any, None]:
        """Data-parallel collectives of every chunk, then the optimizer step (PALM GU)."""
        machine = self.machine
        chunks = machine.chunks(i)
        now = machine.env.now
        flow = machine.stage_flows[i].iteration
        duration, moved, latency = machine.memo("gradient", i, 0, machine.gradient_collectives_time, i)
        machine.events += 1
        start, end = yield from self.timing.update(i, flow, duration, latency, [c.optimizer_step for c in chunks])
        if machine.record and duration:
            machine.trace(flow, f"stage {i}", "gradient collectives", start, end - start, moved)
        machine.stats[i].optimizer_s += sum(c.optimizer_step.compute_s for c in chunks)
        if machine.record:
            machine.records.append(PassRecord(i, PassKind.OPTIMIZER_UPDATE, -1, 0, now, machine.env.now))


def _merged(order: Sequence[Pass], k: int) -> bool:
    """Whether pass ``k`` of a stage's ``order`` is one of a 1F1B phase's merged pairs, a forward
    followed by a backward (:attr:`simulator.strategy.Strategy.ep_overlap`): not a warm-up
    forward, nor one of the last backwards."""
    if order[k].kind is PassKind.FORWARD:
        return k + 1 < len(order) and order[k + 1].kind.is_backward
    return k > 0 and order[k - 1].kind is PassKind.FORWARD


def _succeed(event: simpy.Event) -> None:
    """Trigger ``event`` (a callback must return None; ``succeed`` returns the event)."""
    event.succeed()
