"""A simulated iteration as a timeline, and its export to the Chrome trace-event format.

:func:`simulator.api.simulate_timeline` returns a :class:`Timeline`: the result, the passes and
flow bookings of a recorded window of microbatches, the placement and each resource's
utilisation. :func:`chrome_trace` turns it into the JSON object that Perfetto
(https://ui.perfetto.dev) and ``chrome://tracing`` open (Trace Event Format, Google 2016:
complete events ``ph "X"`` with ``ts``/``dur`` in microseconds, metadata events ``ph "M"``
naming processes and threads).

Processes (tracks groups): pipeline stages (forward, backward, recompute, gradient update and
idle bubbles, one thread per stage), TP collectives and DP collectives (one thread per stage),
p2p transfers (one thread per direction ``i->j``) and DRAM ports (one thread per port, each DRAM
booking split over the ports it uses by their share of its bytes). Bookings of one track that overlap
in time (possible when a flow books no contended resource) go to extra threads ``#2, #3``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from simulator.engine import PassRecord, TraceRecord
from simulator.network.topology import Topology
from simulator.passes import PassKind
from simulator.placement import StagePlacement
from simulator.result import SimulationResult

PROCESSES = (("stage", "pipeline stages"), ("tp", "TP collectives"), ("dp", "DP collectives"),
             ("p2p", "p2p transfers"), ("dram", "DRAM ports"))
"""(kind, process name) in display order; pid is the position + 1."""

EPSILON_S = 1e-12
"""Gaps and overlaps shorter than this (s) are float noise."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Timeline:
    """A simulated iteration with the records of a window of microbatches.

    Attributes:
        result: the simulation result (whole iteration, steady-state extrapolated).
        passes: the window's passes (forward, backward or its halves, update) per stage.
        bookings: the window's flow bookings (TP, DP, p2p, DRAM).
        window_microbatches: microbatches per replica in the recorded window (0 if infeasible).
        window_s: the window's makespan (s).
        topology: the machine's routes and resources.
        placements: devices and groups of each pipeline stage.
        utilisation: utilisation of each resource over the iteration, by resource name.
    """

    result: SimulationResult
    passes: tuple[PassRecord, ...]
    bookings: tuple[TraceRecord, ...]
    window_microbatches: int
    window_s: float
    topology: Topology
    placements: tuple[StagePlacement, ...]
    utilisation: dict[str, float]


@dataclass(frozen=True, slots=True)
class Slice:
    """One slice on a track: kind (track group), lane, name, start and end (s), args, and on a
    stage track the pass kind (None for a bubble and off the stage tracks)."""

    kind: str
    lane: str
    name: str
    start_s: float
    end_s: float
    args: dict[str, Any]
    pass_kind: PassKind | None = None


def stage_slices(timeline: Timeline) -> list[Slice]:
    """Slices of the pipeline-stage tracks: passes (a backward's recompute part first, as ``R``),
    the gradient update, and ``bubble`` for every idle gap up to the window's end."""
    slices: list[Slice] = []
    for stage in range(len(timeline.placements)):
        passes = sorted((p for p in timeline.passes if p.stage == stage), key=lambda p: p.start_s)
        busy_until = 0.0
        for p in passes:
            if p.start_s - busy_until > EPSILON_S:
                slices.append(_bubble(stage, busy_until, p.start_s))
            slices += _pass_slices(p)
            busy_until = max(busy_until, p.end_s)
        if timeline.window_s - busy_until > EPSILON_S:
            slices.append(_bubble(stage, busy_until, timeline.window_s))
    return slices


def _bubble(stage: int, start_s: float, end_s: float) -> Slice:
    return Slice("stage", f"stage {stage}", "bubble", start_s, end_s, {"stage": stage})


def _pass_slices(p: PassRecord) -> list[Slice]:
    args = {"stage": p.stage, "microbatch": p.microbatch, "chunk": p.chunk}
    if p.kind is PassKind.OPTIMIZER_UPDATE:
        return [_pass_slice(p, "update", p.start_s, p.end_s, args)]
    label = f" {p.microbatch}" + (f" c{p.chunk}" if p.chunk else "")
    if p.kind.is_backward and p.recompute_s > 0:
        # the recompute's share of the pass's compute, of the pass's time (which DRAM stalls and
        # collectives stretch alike)
        split = p.start_s + (p.end_s - p.start_s) * min(p.recompute_s / p.compute_s, 1.0) if p.compute_s \
            else p.start_s + p.recompute_s
        recompute = PassKind.RECOMPUTE
        return [_pass_slice(p, recompute.value + label, p.start_s, split, args, recompute),
                _pass_slice(p, p.kind.value + label, split, p.end_s, args)]
    return [_pass_slice(p, p.kind.value + label, p.start_s, p.end_s, args)]


def _pass_slice(p: PassRecord, name: str, start_s: float, end_s: float, args: dict[str, Any],
                kind: PassKind | None = None) -> Slice:
    """A slice of pass ``p`` (of ``kind``, default the pass's), its kind's letter in ``args``."""
    kind = kind or p.kind
    return Slice("stage", f"stage {p.stage}", name, start_s, end_s, {**args, "kind": kind.value}, kind)


def booking_slices(timeline: Timeline) -> list[Slice]:
    """Slices of the communication tracks, one per flow booking, and of the DRAM-port tracks, one
    per port a DRAM booking uses (with that port's share of the bytes)."""
    slices = []
    for b in timeline.bookings:
        ports = b.args.get("ports")
        if not ports:
            slices.append(Slice(b.kind, b.lane, b.name, b.start_s, b.end_s, dict(b.args)))
            continue
        for port, share in ports.items():
            args = {k: v for k, v in b.args.items() if k != "ports"}
            args.update(bytes=b.args["bytes"] * share, stage=b.lane)
            slices.append(Slice(b.kind, port, b.name, b.start_s, b.end_s, args))
    return slices


def pack_lanes(slices: list[Slice]) -> dict[tuple[str, str], list[list[Slice]]]:
    """Per (kind, lane), the slices split greedily into threads whose slices never overlap."""
    tracks: dict[tuple[str, str], list[list[Slice]]] = {}
    for s in sorted(slices, key=lambda s: (s.start_s, s.end_s)):
        threads = tracks.setdefault((s.kind, s.lane), [])
        free = next((t for t in threads if t[-1].end_s <= s.start_s + EPSILON_S), None)
        if free is None:
            threads.append(free := [])
        free.append(s)
    return tracks


def chrome_trace(timeline: Timeline) -> dict[str, Any]:
    """The timeline as a Chrome trace-event JSON object (``ts``/``dur`` in microseconds)."""
    pids = {kind: i + 1 for i, (kind, _) in enumerate(PROCESSES)}
    events: list[dict[str, Any]] = []
    for kind, name in PROCESSES:
        events.append(_meta("process_name", pids[kind], 0, name))
        events.append(_meta("process_sort_index", pids[kind], 0, pids[kind], key="sort_index"))
    tracks = pack_lanes(stage_slices(timeline) + booking_slices(timeline))
    tid = 0
    for (kind, lane), threads in sorted(tracks.items(), key=lambda item: _track_order(*item[0])):
        for n, thread in enumerate(threads):
            tid += 1
            label = lane if n == 0 else f"{lane} #{n + 1}"
            events.append(_meta("thread_name", pids[kind], tid, label))
            events.append(_meta("thread_sort_index", pids[kind], tid, tid, key="sort_index"))
            events += [_complete(s, pids[kind], tid) for s in thread]
    return {"traceEvents": events, "displayTimeUnit": "ms", "otherData": _header(timeline)}


def write_chrome_trace(timeline: Timeline, path: str | Path) -> Path:
    """Write :func:`chrome_trace` of ``timeline`` to ``path`` (JSON); returns the path."""
    path = Path(path)
    path.write_text(json.dumps(chrome_trace(timeline)))
    return path


def _track_order(kind: str, lane: str) -> tuple[int, int, int]:
    order = [k for k, _ in PROCESSES].index(kind)
    numbers = [int(x) for x in lane.replace("stage ", "").split("->") if x.isdigit()] + [0, 0]
    return order, numbers[0], numbers[1]


def _meta(what: str, pid: int, tid: int, value: object, key: str = "name") -> dict[str, Any]:
    return {"ph": "M", "name": what, "pid": pid, "tid": tid, "args": {key: value}}


def _complete(s: Slice, pid: int, tid: int) -> dict[str, Any]:
    ts = round(s.start_s * 1e6, 6)
    event = {"ph": "X", "name": s.name, "cat": _category(s), "pid": pid, "tid": tid, "ts": ts,
             "dur": max(round(s.end_s * 1e6, 6) - ts, 0.0), "args": s.args}
    if s.name == "bubble":
        event["cname"] = "grey"
    return event


def _category(s: Slice) -> str:
    if s.kind != "stage":
        return s.kind
    return s.pass_kind.label if s.pass_kind is not None else "bubble"


def _header(timeline: Timeline) -> dict[str, Any]:
    r = timeline.result
    return {"model": r.model, "hardware": r.hardware, "strategy": json.dumps(r.strategy),
            "window_microbatches": timeline.window_microbatches,
            "num_microbatches": r.num_microbatches, "iteration_time_s": r.iteration_time_s,
            "note": f"simulated window of {timeline.window_microbatches} of {r.num_microbatches} microbatches"
                    " per replica; times in microseconds"}
