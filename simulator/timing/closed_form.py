"""The closed form of one engine's iteration (:meth:`simulator.engine.Engine.estimate`, the
``estimate`` network): :func:`simulator.timing.vectorised.iterations` on its one (plan,
placement) pair, its stage times and bytes moved as an engine run's. Times are seconds.
"""

from __future__ import annotations

import numpy as np

from simulator.schedules import PipelineSchedule
from simulator.timing.machine import Machine
from simulator.timing.records import EngineRun, StageStats
from simulator.timing.vectorised import KEPT, FlowTable, Iterations, PlanTable, flow_table, iterations, plan_table

_ONE = np.zeros(1, dtype=np.int64)
"""The one pair's plan and table."""
_PAIRS: dict[tuple[int, int, int, bool, bool], tuple[FlowTable, PlanTable, Iterations, np.ndarray]] = {}
"""Closed forms of one pair (and its flows' bytes) by the ``id`` of its tables, its microbatches,
training and deferring weight gradients (tables held, so the ids stay theirs; the last
:data:`~simulator.timing.vectorised.KEPT`): a search simulates a plan again, and each event
simulation checks its short runs against the closed form."""


class ClosedForm:
    """An engine's iteration in closed form (:meth:`estimate`).

    Args:
        machine: the engine's flows and stage costs.
        schedule: the pipeline schedule.
        training: False runs forwards only (inference).
    """

    def __init__(self, machine: Machine, schedule: PipelineSchedule, training: bool) -> None:
        self.machine, self.schedule, self.training = machine, schedule, training

    def estimate(self, num_microbatches: int) -> tuple[EngineRun, float]:
        """A closed-form iteration, no events (:func:`~simulator.timing.vectorised.iterations`:
        each pass and send alone, the pipeline's closed form over them, then the slowest
        gradient update, and at least the busiest resource's busy time). Returns the run (each
        stage's times, each flow's bytes per edge, no events) and the steady-state time per
        microbatch (s)."""
        machine = self.machine
        table = flow_table(machine.stage_flows, machine.p2p, machine.index, machine.placements,
                           machine.transfer_strategy)
        plan, defers = plan_table(machine.costs), self.schedule.defers_weight_gradients
        key = (id(table), id(plan), num_microbatches, self.training, defers)
        kept = _PAIRS.get(key)
        if kept is None or kept[0] is not table or kept[1] is not plan:
            if len(_PAIRS) >= KEPT:
                _PAIRS.clear()
            closed = iterations([plan], [table], _ONE, _ONE, np.array([num_microbatches]), self.training, defers,
                                stats=True)
            kept = _PAIRS[key] = (table, plan, closed, table.flow_bytes(closed.moved[0]))
        closed, moved = kept[2], kept[3]
        makespan = float(closed.makespan_s[0])
        assert closed.stats is not None
        machine.stats = [StageStats(compute, communication, stall, optimizer, host, makespan)
                         for compute, communication, stall, optimizer, host in closed.stats[0].tolist()]
        return (EngineRun(makespan, machine.stats, machine.flows, moved.tolist(), 0, index=machine.index),
                float(closed.period_s[0]))
