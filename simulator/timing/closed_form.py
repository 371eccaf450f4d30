"""The closed form: an iteration's time from each pass's, send's and update's time alone, no
events (the ``estimate`` network, a search's screening fidelity, and the steady state a short
simulation is checked against). Times are seconds.
"""

from __future__ import annotations

from typing import NamedTuple

from simulator.costs import PassCost
from simulator.network.collectives import Flow
from simulator.schedules import PipelineSchedule
from simulator.timing.flows import StageFlows, own_flows
from simulator.timing.machine import Machine
from simulator.timing.records import EngineRun, StageStats


class PassAlone(NamedTuple):
    """A pass's time alone on one stage's flows and what it adds to the stage's stats and flows."""

    flows: StageFlows
    """The stage's flows (held, so the ``id`` in the key stays theirs)."""
    duration_s: float
    dram_stall_s: float
    communication_s: float
    moved: tuple[tuple[Flow, float], ...]
    """Bytes per edge each of the stage's own flows moved."""


PASSES: dict[tuple[int, PassCost], PassAlone] = {}
""":meth:`ClosedForm.pass_s` by the stage's flows' ``id`` and the pass's cost: a screen walks one
placement's flows (:func:`simulator.timing.flows.machine_flows`, built once per placement) under
many plans, and plans differing in recompute, ZeRO or schedule share most passes (the default
screen asks 3.3 times per distinct pass)."""
PASSES_KEPT = 20_000
"""Passes kept (a screen task of 400 points asks about 24,000 passes, 7,000 distinct); :data:`PASSES`
starts again when full."""


class ClosedForm:
    """Times alone and the pipeline's closed form over them (:meth:`estimate`).

    Args:
        machine: the engine's flows; its stage times and bytes moved are the estimate's.
        schedule: the pipeline schedule.
        training: False runs forwards only (inference).
    """

    def __init__(self, machine: Machine, schedule: PipelineSchedule, training: bool) -> None:
        self.machine, self.schedule, self.training = machine, schedule, training

    def estimate(self, num_microbatches: int) -> tuple[EngineRun, float]:
        """A closed-form iteration, no events: the screening fidelity. Returns the run and the
        steady-state time per microbatch (s).

        Each pass and send takes its time alone (:meth:`pass_s`, :meth:`send_s`). With ``t_i``
        the forward and backward passes and sends of all chunks of stage
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
        machine = self.machine
        m, pp, costs = num_microbatches, machine.pp, machine.costs
        chunks = len(costs) // pp
        machine.stats = stats = [StageStats() for _ in range(pp)]
        for flow in machine.flows:
            flow.bytes_moved = 0.0
        per_stage, deferred = [0.0] * pp, [0.0] * pp
        for j, cost in enumerate(costs):
            i = j % pp
            per_stage[i] += self.pass_s(i, cost.forward)
            stats[i].compute_s += cost.forward.busy_s
            stats[i].host_s += cost.forward.host_s
            if j < len(costs) - 1:
                per_stage[i] += self.send_s(i, (j + 1) % pp, cost.activation_send_bytes)
            if self.training and self.schedule.defers_weight_gradients:
                per_stage[i] += self.pass_s(i, cost.backward_input)
                deferred[i] += self.pass_s(i, cost.backward_weight)
                stats[i].compute_s += cost.backward_input.busy_s + cost.backward_weight.busy_s
            elif self.training:
                per_stage[i] += self.pass_s(i, cost.backward)
                stats[i].compute_s += cost.backward.busy_s
                if j > 0:
                    per_stage[i] += self.send_s(i, (j - 1) % pp, cost.gradient_send_bytes)
        for flow in machine.flows:
            flow.bytes_moved *= m
        for st in stats:
            st.compute_s, st.communication_s, st.dram_stall_s, st.host_s = (
                m * st.compute_s, m * st.communication_s, m * st.dram_stall_s, m * st.host_s)
        per_stage = [t + w for t, w in zip(per_stage, deferred, strict=True)]
        period = max(per_stage)
        pipeline = m * period + (sum(per_stage) - period) / chunks
        if any(deferred):  # deferred weight gradients fill 2 W of each other stage's fill and drain
            slowest = per_stage.index(period)
            pipeline = m * period + sum(max(t - 2 * w, 0.0) for k, (t, w) in enumerate(zip(per_stage, deferred,
                                        strict=True)) if k != slowest) / chunks
        if self.training:
            pipeline += max(self.update_s(i) for i in range(pp))
        busiest = machine.busiest_s()
        makespan = max(pipeline, busiest)
        for st in stats:
            st.finish_s = makespan
        moved = [f.bytes_moved for f in machine.flows]
        return EngineRun(makespan, stats, machine.flows, moved, 0, index=machine.index), max(period, busiest / m)

    def pass_s(self, i: int, cost: PassCost) -> float:
        """Time of a pass of stage ``i`` that waits for nothing (s): per segment its compute, what
        compute does not hide of its DRAM stream, its TP collectives, then ZeRO-3's exposed
        collectives (PALM Eq. 2 without contention); its stage's stall and communication kept,
        and the bytes its flows move (remembered across engines in :data:`PASSES`)."""
        machine = self.machine
        flows, stats = machine.stage_flows[i], machine.stats[i]
        key = (id(flows), cost)
        alone = PASSES.get(key)
        if alone is None or alone.flows is not flows:
            if len(PASSES) >= PASSES_KEPT:
                PASSES.clear()
            alone = PASSES[key] = self._alone(i, cost)
        else:
            for flow, moved in alone.moved:
                flow.bytes_moved += moved
        stats.dram_stall_s += alone.dram_stall_s
        stats.communication_s += alone.communication_s
        return alone.duration_s

    def _alone(self, i: int, cost: PassCost) -> PassAlone:
        """:meth:`pass_s` worked out (its bytes counted on the flows)."""
        machine = self.machine
        flows = machine.stage_flows[i]
        own = own_flows(flows)
        before = [f.bytes_moved for f in own]
        seg = machine.segments_of(i, cost)
        stall = max(seg.dram_s - seg.compute_s, 0.0)
        exposed = machine.collectives_time(i, cost.exposed_dp_collectives, flows.dp)[0]
        moved = tuple((f, f.bytes_moved - b) for f, b in zip(own, before, strict=True) if f.bytes_moved != b)
        return PassAlone(flows, seg.count * (seg.compute_s + stall + seg.collective_s) + exposed + cost.idle_s,
                         seg.count * stall,
                         seg.count * seg.collective_s + exposed, moved)

    def send_s(self, i: int, dst: int, size_bytes: float) -> float:
        """Time of stage ``i``'s send of ``size_bytes`` to stage ``dst`` and its regroup that wait
        for nothing (s): bytes per edge over bandwidth plus latency, then the regroup."""
        machine = self.machine
        flow = machine.p2p.get((i, dst))
        if flow is None or size_bytes <= 0:
            return 0.0
        sent = flow.step_time_s(machine.p2p_bytes(flow, i, size_bytes))
        regroup = machine.regroup_cost(dst, size_bytes)
        return sent + (regroup[1] if regroup else 0.0)

    def update_s(self, i: int) -> float:
        """Time of stage ``i``'s gradient update that waits for nothing (s), stats kept: its
        data-parallel collectives, then its optimizer steps."""
        machine = self.machine
        chunks = machine.chunks(i)
        duration = machine.gradient_collectives_time(i)[0]
        stats = machine.stats[i]
        steps = sum(self.pass_s(i, cost.optimizer_step) for cost in chunks)
        stats.optimizer_s = sum(c.optimizer_step.compute_s for c in chunks)
        stats.communication_s += duration
        return duration + steps
