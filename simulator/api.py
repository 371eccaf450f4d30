"""``simulate()``: one strategy, one model, one machine -> :class:`SimulationResult`.

Steady state (issue: many microbatches): with ``m`` microbatches per replica well above the
pipeline depth ``p``, the engine runs ``m_a = p`` and ``m_b = 2p`` microbatches; every additive
quantity (stage times, bytes moved) grows by the same amount for each further microbatch once
the pipeline is full (Narayanan et al. SC'21 §2.2: ``(m + p - 1)`` slots), so
``X(m) = X(m_b) + (m - m_b) (X(m_b) - X(m_a)) / (m_b - m_a)``; the iteration time grows by the
steady-state period, the larger of the makespan's growth and the busiest stage's work per
microbatch. The result says when it did this.
Inference runs the stated batch once, fill and drain included: its time is the batch's latency
and its throughput the batch over that latency, never above what the batch allows (a batch of one
is a latency, not a stream; PALM §V-A3's steady state, fill and drain ignored, is the limit of a
long stream of microbatches, which is how ``palm-search validate`` runs its Table V rows).
"""

from __future__ import annotations

import math
import time
from collections import OrderedDict
from dataclasses import dataclass, fields, replace
from typing import Any

import numpy as np

from simulator import legality
from simulator.costs import StageCost
from simulator.engine import Engine, EngineRun, PassRecord, StageStats, traffic_by_kind
from simulator.errors import InputError
from simulator.hardware.spec import Hardware
from simulator.network.names import ANALYTICAL, DEFAULT_NETWORK, ESTIMATE, NETWORKS
from simulator.network.topology import Topology, topology_of
from simulator.placement import StagePlacement, place, stage_devices
from simulator.replicas import simulated_replicas
from simulator.result import ResourceUsage, SimulationResult, StageReport
from simulator.stacks.spec import MEGATRON_CORE, Stack
from simulator.strategy import Strategy
from simulator.trace import Timeline
from simulator.workload.operators import tokens_per_sample
from simulator.workload.spec import ModelSpec
from simulator.workload.stages import build_stage_costs, build_stage_memory


def simulate(
    model: ModelSpec, hardware: Hardware, strategy: Strategy, *, network: str = DEFAULT_NETWORK,
    steady_state: bool = True, record: bool = False, time_limit_s: float | None = None,
    event_limit: int | None = None, every_replica: bool = False, stack: Stack = MEGATRON_CORE,
) -> SimulationResult:
    """Simulate one iteration of ``strategy`` for ``model`` on ``hardware``.

    Args:
        model: the model.
        hardware: the machine.
        strategy: the mapping.
        network: ``sharing`` (links and DRAM ports shared max-min fairly between the flows on
            them; the default), ``contention`` (PALM Eqs. 2-5 with exclusive links and DRAM ports),
            ``analytical`` (PALM Eq. 2 without contention), or ``estimate`` (no events: a
            closed form bounded by the busiest resource, for screening).
        steady_state: extrapolate from two short runs when there are many microbatches.
        record: keep per-pass records (see :func:`simulate_with_records`).
        time_limit_s: wall-clock budget of the whole call (s); None: unbounded.
        event_limit: most events one engine run may take; None: unbounded.
        every_replica: build the flows of every data-parallel replica, even those known to be
            exact copies of the first few (:mod:`simulator.replicas`; the same result, slower).
        stack: the software that runs the plan (:mod:`simulator.stacks`; default Megatron-Core,
            the stack the hardware files are calibrated under). A separate argument, not a
            strategy field: a stack is neither what the user maps nor what the machine is, and
            the search keeps one for a whole study.

    Returns:
        The result; ``feasible`` is False (and nothing is simulated) when memory is exceeded.

    Raises:
        InputError: the strategy does not fit the model or machine (degrees, batch, precision).
        BudgetExceeded: the simulation ran past ``time_limit_s`` or ``event_limit``.
    """
    return simulate_with_records(model, hardware, strategy, network=network, steady_state=steady_state,
                                 record=record, time_limit_s=time_limit_s, event_limit=event_limit,
                                 every_replica=every_replica, stack=stack)[0]


def simulate_with_records(
    model: ModelSpec, hardware: Hardware, strategy: Strategy, *, network: str = DEFAULT_NETWORK,
    steady_state: bool = True, record: bool = True, time_limit_s: float | None = None,
    event_limit: int | None = None, every_replica: bool = False, stack: Stack = MEGATRON_CORE,
) -> tuple[SimulationResult, list[PassRecord]]:
    """Like :func:`simulate`, also returning the pass records of the (last) engine run."""
    done = _simulate(model, hardware, strategy, network, steady_state, record, _Budget(time_limit_s, event_limit),
                     every_replica, stack)
    return done.result, done.run.records if done.run else []


def simulate_timeline(
    model: ModelSpec, hardware: Hardware, strategy: Strategy, *, network: str = DEFAULT_NETWORK,
    window_microbatches: int | None = None, steady_state: bool = True, time_limit_s: float | None = None,
    stack: Stack = MEGATRON_CORE,
) -> Timeline:
    """Simulate ``strategy`` (as :func:`simulate`) and record a window of the iteration.

    The result is the usual one; the records come from one extra engine run of
    ``min(m, window_microbatches)`` microbatches (default ``2 * pp``, the window the steady-state
    extrapolation simulates), fill, steady state, drain and gradient update included: the trace
    shows that simulated window, not all ``m`` microbatches. Three engine runs in all with the
    extrapolation (two for the result, one recorded).

    Raises:
        InputError: as :func:`simulate`; ``window_microbatches`` below 1.
        BudgetExceeded: the three runs took more than ``time_limit_s`` (s) of wall clock.
    """
    if window_microbatches is not None and window_microbatches < 1:
        raise InputError(f"window_microbatches must be >= 1, got {window_microbatches}")
    done = _simulate(model, hardware, strategy, network, steady_state, False, _Budget(time_limit_s),
                     every_replica=True, stack=stack)
    if done.run is None or done.engine is None:
        return Timeline(result=done.result, passes=(), bookings=(), window_microbatches=0, window_s=0.0,
                        topology=done.topology, placements=done.placements, utilisation={})
    window = min(done.result.num_microbatches, window_microbatches or 2 * strategy.pp)
    done.engine.record = True
    traced = done.engine.run(window)
    return Timeline(result=done.result, passes=tuple(traced.records), bookings=tuple(traced.traces),
                    window_microbatches=window, window_s=traced.makespan_s, topology=done.topology,
                    placements=done.placements,
                    utilisation=resource_utilisation(done.topology, done.run, done.result.iteration_time_s))


@dataclass(frozen=True, slots=True, kw_only=True)
class _Prepared:
    """A checked plan, everything :func:`simulate` derives before the engine runs."""

    model: ModelSpec
    hardware: Hardware
    strategy: Strategy
    network: str
    num_microbatches: int
    topology: Topology
    placements: tuple[StagePlacement, ...]
    """The placements simulated: of the first ``replicas`` data-parallel replicas."""
    replicas: int
    costs: tuple[StageCost, ...]
    memory_bytes: list[float]
    in_flight: list[list[int]]
    started: float

    def header(self) -> dict[str, Any]:
        """The result fields that name the run."""
        return dict(model=self.model.name, hardware=self.hardware.name, strategy=self.strategy.to_dict(),
                    network=self.network, num_microbatches=self.num_microbatches, replicas_simulated=self.replicas)


@dataclass(frozen=True, slots=True, kw_only=True)
class _Outcome:
    """What the engine ran: the (extrapolated) run, microbatches simulated, and the steady-state
    period per microbatch (s; 0 without extrapolation)."""

    run: EngineRun
    simulated_microbatches: int
    extrapolated: bool
    period_s: float


@dataclass(frozen=True, slots=True, kw_only=True)
class _Simulated:
    """A result with what produced it (run and engine are None when memory is exceeded)."""

    result: SimulationResult
    run: EngineRun | None
    engine: Engine | None
    topology: Topology
    placements: tuple[StagePlacement, ...]


def check_memory(model: ModelSpec, hardware: Hardware, strategy: Strategy, stack: Stack = MEGATRON_CORE) -> str:
    """Why ``strategy`` does not fit the devices' memory, or ``""`` when it fits: what
    :func:`simulate` checks before it simulates, from the stages' memory alone
    (:func:`~simulator.workload.stages.build_stage_memory`: no stage times, no engine run; about
    0.3 ms a plan for Qwen3-30B-A3B on 1,024 H100s), so a search can leave out what cannot fit.

    Raises:
        InputError: the strategy does not fit the model or machine (degrees, batch, precision).
    """
    m = legality.check_plan(model, hardware, strategy)
    in_flight = legality.microbatches_in_flight(strategy, m)
    memory_bytes = legality.stage_memory_bytes(build_stage_memory(model, hardware, strategy, stack), strategy.pp,
                                               in_flight)
    return legality.memory_shortfall(hardware, memory_bytes, in_flight, strategy.devices_per_stage)


def _memory(model: ModelSpec, hardware: Hardware, strategy: Strategy,
            stack: Stack) -> tuple[int, tuple[StageCost, ...], list[float], list[list[int]]]:
    """Microbatches, stage costs, bytes per device of each stage, microbatches in flight."""
    m = legality.check_plan(model, hardware, strategy)
    costs = _stage_costs(model, hardware, strategy, stack)
    in_flight = legality.microbatches_in_flight(strategy, m)
    return m, costs, legality.stage_memory_bytes([c.memory for c in costs], strategy.pp, in_flight), in_flight


_COSTS: OrderedDict[tuple[int, int, Strategy, Stack], tuple[ModelSpec, Hardware, tuple[StageCost, ...]]] = OrderedDict()
_COSTS_KEPT = 256
"""Stage costs of the last few plans (a search evaluates one plan under many placements)."""
PLACEMENT_FIELDS: dict[str, Any] = {f.name: f.default for f in fields(Strategy) if f.metadata["where"]}
"""Strategy fields the stage costs do not read (where stages sit and how they talk), at defaults."""


def _stage_costs(model: ModelSpec, hardware: Hardware, strategy: Strategy, stack: Stack) -> tuple[StageCost, ...]:
    """:func:`build_stage_costs`, kept for the last :data:`_COSTS_KEPT` plans (keyed by the model
    and machine objects, held so their ids stay theirs, the plan without its placement, and the stack)."""
    key = (id(model), id(hardware), replace(strategy, **PLACEMENT_FIELDS), stack)
    kept = _COSTS.get(key)
    if kept is None:
        kept = _COSTS[key] = (model, hardware, build_stage_costs(model, hardware, strategy, stack))
        if len(_COSTS) > _COSTS_KEPT:
            _COSTS.popitem(last=False)
    return kept[2]


def _prepare(model: ModelSpec, hardware: Hardware, strategy: Strategy, network: str,
             every_replica: bool = False, stack: Stack = MEGATRON_CORE) -> _Prepared:
    """Check and cost the plan and place it: of the data-parallel replicas known identical, the
    few :func:`simulated_replicas` says (all of them with ``every_replica``)."""
    started = time.perf_counter()
    m, costs, memory_bytes, in_flight = _memory(model, hardware, strategy, stack)
    topology = topology_of(hardware)
    replicas = strategy.dp if every_replica else simulated_replicas(topology, strategy)
    return _Prepared(model=model, hardware=hardware, strategy=strategy, network=network, num_microbatches=m,
                     topology=topology, placements=place(topology, strategy, replicas), replicas=replicas,
                     costs=costs, memory_bytes=memory_bytes, in_flight=in_flight, started=started)


@dataclass(frozen=True, slots=True)
class _Budget:
    """A simulation's wall-clock (s) and event budget (None: unbounded)."""

    time_limit_s: float | None = None
    event_limit: int | None = None

    def deadline_s(self) -> float:
        """The ``time.perf_counter()`` value the budget ends at."""
        return math.inf if self.time_limit_s is None else time.perf_counter() + self.time_limit_s


def _simulate(model: ModelSpec, hardware: Hardware, strategy: Strategy, network: str, steady_state: bool,
              record: bool, budget: _Budget, every_replica: bool = False,
              stack: Stack = MEGATRON_CORE) -> _Simulated:
    if network not in NETWORKS:
        raise InputError(f"network must be one of {list(NETWORKS)}, got {network!r}")
    deadline = budget.deadline_s()
    prepared = _prepare(model, hardware, strategy, network, every_replica, stack)
    topology, placements = prepared.topology, prepared.placements
    reason = legality.memory_shortfall(hardware, prepared.memory_bytes, prepared.in_flight, strategy.devices_per_stage)
    if reason:
        return _Simulated(result=_infeasible(prepared, reason), run=None, engine=None, topology=topology,
                          placements=placements)
    engine = _engine(prepared, network, record, deadline, budget.event_limit)
    if network == ESTIMATE:
        run, period = engine.estimate(prepared.num_microbatches)
        outcome = _Outcome(run=run, simulated_microbatches=0, extrapolated=False, period_s=period)
    else:
        outcome = _run(engine, prepared.num_microbatches, strategy.pp, steady_state)
    return _Simulated(result=_assemble(prepared, outcome), run=outcome.run, engine=engine, topology=topology,
                      placements=placements)


def _engine(prepared: _Prepared, network: str, record: bool, deadline_s: float,
            event_limit: int | None) -> Engine:
    """The engine of a prepared simulation (``estimate`` books nothing: the analytical timing model)."""
    strategy = prepared.strategy
    return Engine(hardware=prepared.hardware, topology=prepared.topology, placements=prepared.placements,
                  costs=prepared.costs, schedule=legality.schedule_of(strategy),
                  network=ANALYTICAL if network == ESTIMATE else network,
                  training=strategy.training, transfer_strategy=strategy.transfer_strategy,
                  p2p_blocking=strategy.p2p_blocking, record=record, deadline_s=deadline_s,
                  event_limit=event_limit)


def estimate_samples_per_s(model: ModelSpec, hardware: Hardware, strategy: Strategy,
                           stack: Stack = MEGATRON_CORE) -> float:
    """The ``samples_per_s`` of :func:`simulate` with ``network="estimate"`` (0 when the plan
    exceeds memory), without the rest of its result: what a screen ranking thousands of plans
    needs (:meth:`~simulator.engine.Engine.estimate`'s closed form).

    Raises:
        InputError: the strategy does not fit the model or machine (degrees, batch, precision).
    """
    prepared = _prepare(model, hardware, strategy, ESTIMATE, stack=stack)
    if legality.memory_shortfall(hardware, prepared.memory_bytes, prepared.in_flight, strategy.devices_per_stage):
        return 0.0
    run, period = _engine(prepared, ESTIMATE, False, math.inf, None).estimate(prepared.num_microbatches)
    batch, iteration = _batch_and_iteration(prepared, _Outcome(run=run, simulated_microbatches=0,
                                                               extrapolated=False, period_s=period))
    return batch / iteration


SHORT_WINDOW = (2, 4)
"""Microbatches of the first two short runs that may replace ``(p, 2p)`` (schedules without
chunks, ``p`` above the first); each next pair doubles them while the longer run has at most
``p``."""
FIRST_AGREEMENT = 0.001
"""Largest relative gap between the first short runs' period and the closed-form steady state
for them to be trusted: their fill and drain weigh most, so they must agree ten times as closely
as the later pairs. ``benchmarks/steady_state.py`` measures the result against full runs (40
random mappings of T-18B to T-145B on the wafer, A100 and H100 clusters, 26 of them run in full:
within 0.31%; the first pair under the later pairs' 1% missed by up to 0.6%; seeds 2 to 4, 30 or
31 run in full: within 1.03%, 0.30% and 0.19%, the largest a ``p`` + ``2p`` extrapolation of
PP 5). PALM's wafer
baselines agree to 0.01%, so they extrapolate from 2 + 4 microbatches."""
PERIOD_AGREEMENT = 0.01
"""Largest relative gap between the later short runs' period and the closed-form steady state
(:meth:`Engine.estimate`) for them to be trusted."""


def _run(engine: Engine, m: int, pp: int, steady_state: bool) -> _Outcome:
    """Full run, or two runs and a linear extrapolation: of ``(2, 4)``, ``(4, 8)``... microbatches,
    the first pair whose period per microbatch agrees with the closed-form steady state (a cost
    near linear in the pipeline depth when one does), else of ``p`` and ``2p`` (the steady state
    of 1F1B is reached after ``p``). A schedule that defers weight gradients (ZB-H1) fills its
    drain with them only from ``m >= p`` on (Qi et al. ICLR'24 §2.1), so shorter runs overstate
    its fill and drain: it extrapolates from ``p`` and ``2p``. ``simulated_microbatches`` counts
    every run, the short ones that did not agree included. Extrapolation runs fewer microbatches
    in all than the full run would (else the full run is made)."""
    m_a, m_b = pp, 2 * pp
    if steady_state and m > m_a + m_b:
        tried = 0
        if engine.schedule.num_chunks == 1 and not engine.schedule.defers_weight_gradients:
            short, tried = _short_run(engine, m, pp)
            if short is not None:
                return short
        if tried + m_a + m_b < m:
            a, b = engine.run(m_a), engine.run(m_b)
            return _Outcome(run=_extrapolate(a, b, m_a, m_b, m), simulated_microbatches=tried + m_a + m_b,
                            extrapolated=True, period_s=_period(a, b, m_b - m_a))
    return _Outcome(run=engine.run(m), simulated_microbatches=m, extrapolated=False, period_s=0.0)


def _short_run(engine: Engine, m: int, pp: int) -> tuple[_Outcome | None, int]:
    """The extrapolation from the first pair of :data:`SHORT_WINDOW` and its doublings (the longer
    run at most ``pp`` microbatches) whose period is within :data:`FIRST_AGREEMENT` (the first
    pair) or :data:`PERIOD_AGREEMENT` (the others) of the closed-form steady state, or None; and
    the microbatches simulated."""
    m_a, m_b = SHORT_WINDOW
    if m_a >= pp:
        return None, 0
    steady = engine.estimate(m)[1]
    a, simulated, tolerance = engine.run(m_a), m_a, FIRST_AGREEMENT
    while simulated + m_b < m:
        b = engine.run(m_b)
        simulated += m_b
        period = _period(a, b, m_b - m_a)
        if abs(period - steady) <= tolerance * steady:
            return _Outcome(run=_extrapolate(a, b, m_a, m_b, m), simulated_microbatches=simulated,
                            extrapolated=True, period_s=period), simulated
        if 2 * m_b > pp:
            return None, simulated
        a, m_a, m_b, tolerance = b, m_b, 2 * m_b, PERIOD_AGREEMENT
    return None, simulated


def _busy_s(stats: StageStats) -> float:
    return stats.compute_s + stats.communication_s + stats.dram_stall_s + stats.host_s


def _period(a: EngineRun, b: EngineRun, delta: int) -> float:
    """Steady-state time per microbatch: the makespan's growth, or the busiest stage's work per
    microbatch if larger (in steady state the bottleneck stage is never idle; with slightly
    unequal stages the makespan takes hundreds of microbatches to reach that slope)."""
    busiest = max(_busy_s(y) - _busy_s(x) for x, y in zip(a.stats, b.stats, strict=True))
    return max(b.makespan_s - a.makespan_s, busiest) / delta


def _extrapolate(a: EngineRun, b: EngineRun, m_a: int, m_b: int, m: int) -> EngineRun:
    """Run ``b`` carried to ``m`` microbatches: stage work linearly, the makespan at the
    steady-state period. Every carried quantity adds up over microbatches, so it never shrinks
    as they are added: a quantity the two runs measured smaller in the longer one (a DRAM stall
    the second run's overlap hid) is held, not carried below zero."""
    scale = (m - m_b) / (m_b - m_a)

    def line(x_a: float, x_b: float) -> float:
        return x_b + scale * max(x_b - x_a, 0.0)

    stats = [StageStats(**{f.name: line(getattr(sa, f.name), getattr(sb, f.name)) for f in fields(sb)})
             for sa, sb in zip(a.stats, b.stats, strict=True)]
    flow_bytes = [line(x, y) for x, y in zip(a.flow_bytes, b.flow_bytes, strict=True)]
    makespan = b.makespan_s + (m - m_b) * _period(a, b, m_b - m_a)
    return EngineRun(makespan, stats, b.flows, flow_bytes, a.events + b.events, b.records, index=b.index)


def _infeasible(prepared: _Prepared, reason: str) -> SimulationResult:
    stages = tuple(
        StageReport(stage=i, devices=devices, compute_s=0.0, communication_s=0.0, dram_stall_s=0.0,
                    optimizer_s=0.0, bubble_s=0.0, memory_bytes=prepared.memory_bytes[i],
                    microbatches_in_flight=sum(prepared.in_flight[i]), sram_resident_bytes=0.0)
        for i, devices in enumerate(stage_devices(prepared.topology, prepared.strategy))
    )
    return SimulationResult(
        **prepared.header(), feasible=False, reason=reason, iteration_time_s=0.0, samples_per_s=0.0,
        tokens_per_s=0.0, model_flops_utilisation=0.0, hardware_flops_utilisation=0.0,
        simulated_microbatches=0, extrapolated=False, stages=stages, resources=(),
        traffic_bytes={}, events_simulated=0, wall_time_s=time.perf_counter() - prepared.started,
    )


def _batch_and_iteration(prepared: _Prepared, outcome: _Outcome) -> tuple[int, float]:
    """(samples per iteration, its time in s): the run's makespan, fill and drain included, in
    training and inference alike (an inference batch's latency)."""
    strategy = prepared.strategy
    return strategy.microbatch_size * strategy.dp * prepared.num_microbatches, outcome.run.makespan_s


def _assemble(prepared: _Prepared, outcome: _Outcome) -> SimulationResult:
    strategy, costs, run = prepared.strategy, prepared.costs, outcome.run
    m = prepared.num_microbatches
    batch, iteration = _batch_and_iteration(prepared, outcome)
    replicas = strategy.tp * strategy.cp * strategy.dp * m
    model_flops = replicas * sum(c.model_flops_per_microbatch for c in costs)
    executed = replicas * sum(c.hardware_flops_per_microbatch for c in costs)
    peak = prepared.hardware.compute.peak_flop_per_s[strategy.precision] * strategy.num_devices * iteration
    samples_per_s = batch / iteration
    stages = tuple(_stage_report(i, devices, prepared, run, iteration)
                   for i, devices in enumerate(stage_devices(prepared.topology, strategy)))
    return SimulationResult(
        **prepared.header(), feasible=True, reason="", iteration_time_s=iteration,
        samples_per_s=samples_per_s, tokens_per_s=samples_per_s * max(tokens_per_sample(prepared.model, strategy), 1),
        model_flops_utilisation=model_flops / peak, hardware_flops_utilisation=executed / peak,
        simulated_microbatches=outcome.simulated_microbatches, extrapolated=outcome.extrapolated,
        stages=stages, resources=_resource_usage(prepared.topology, run, iteration),
        traffic_bytes=traffic_by_kind(run.flows, run.flow_bytes),
        events_simulated=run.events, wall_time_s=time.perf_counter() - prepared.started,
    )


def _stage_report(i: int, devices: tuple[int, ...], prepared: _Prepared, run: EngineRun,
                  iteration_s: float) -> StageReport:
    st = run.stats[i]
    busy = st.compute_s + st.communication_s + st.dram_stall_s + st.optimizer_s + st.host_s
    return StageReport(
        stage=i, devices=devices, compute_s=st.compute_s, communication_s=st.communication_s,
        dram_stall_s=st.dram_stall_s, optimizer_s=st.optimizer_s, bubble_s=max(iteration_s - busy, 0.0),
        memory_bytes=prepared.memory_bytes[i], microbatches_in_flight=sum(prepared.in_flight[i]),
        sram_resident_bytes=sum(c.memory.sram_resident_bytes
                                for c in prepared.costs[i::prepared.strategy.pp]),
        host_s=st.host_s,
    )


def _utilisation(run: EngineRun, iteration_s: float) -> np.ndarray:
    """Bytes each used resource (``run.index.used``) carried over the run (edges crossing it x
    bytes per edge) over its bandwidth x the iteration time."""
    assert run.index is not None
    return run.index.carried_bytes(run.flow_bytes) / (run.index.bandwidth * iteration_s)


def resource_utilisation(topology: Topology, run: EngineRun, iteration_s: float) -> dict[str, float]:
    """Utilisation (bytes carried / (bandwidth x iteration time)) of every resource the run's
    flows cross, by resource name (``link A->B``, ``dram dieD portP``, ``gpuG nic up``, ...);
    the others carried nothing."""
    assert run.index is not None
    names = [topology.names[r] for r in run.index.used.tolist()]
    return dict(zip(names, _utilisation(run, iteration_s).tolist(), strict=True))


def _resource_usage(topology: Topology, run: EngineRun, iteration_s: float) -> tuple[ResourceUsage, ...]:
    """Bytes carried by each resource over the iteration, as a fraction of its capacity. With
    replicas taken as identical (:mod:`simulator.replicas`) each resource used stands for as many
    as there are copies of the replicas simulated, so the maximum and mean are the whole
    machine's and ``busiest`` names resources of the replicas simulated."""
    assert run.index is not None
    utilisation, used, kinds = _utilisation(run, iteration_s), run.index.used, run.index.kinds
    usages = []
    for kind, count in sorted(topology.kind_counts().items()):
        busy = np.flatnonzero((kinds == kind) & (utilisation > 0))
        top = busy[np.argsort(-utilisation[busy], kind="stable")[:5]]
        usages.append(ResourceUsage(
            kind=kind, count=count, max_utilisation=float(utilisation[busy].max()) if len(busy) else 0.0,
            mean_utilisation=float(utilisation[busy].mean()) if len(busy) else 0.0,
            busiest=tuple((topology.names[int(used[k])], float(utilisation[k])) for k in top),
        ))
    return tuple(usages)
