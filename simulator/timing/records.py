"""What an engine run records: each stage's accumulated times, each pass, each booking of a flow
for traces, and the raw outcome of a run. Times are seconds of simulated time."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from simulator.network.collectives import Flow
from simulator.passes import PassKind
from simulator.timing.flows import FlowIndex


@dataclass(slots=True)
class StageStats:
    """Accumulated times of one pipeline stage (s)."""

    compute_s: float = 0.0
    communication_s: float = 0.0
    dram_stall_s: float = 0.0
    optimizer_s: float = 0.0
    host_s: float = 0.0
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

