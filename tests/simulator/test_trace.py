"""The Chrome trace of a simulated window: format, tracks, every pass present."""

from __future__ import annotations

import json
from collections import defaultdict

import pytest

from simulator import Strategy, load_model, simulate_timeline
from simulator.hardware.loader import load_hardware
from simulator.trace import chrome_trace

MINI_MESH = "tests/palm_search/data/mini-mesh.toml"


@pytest.fixture(scope="module")
def timeline():
    strategy = Strategy(tp=2, dp=1, pp=4, recompute="full", global_batch_size=16, microbatch_size=1)
    return simulate_timeline(load_model("T-1.7B"), load_hardware(MINI_MESH), strategy, window_microbatches=6)


@pytest.fixture(scope="module")
def trace(timeline):
    return json.loads(json.dumps(chrome_trace(timeline)))


def test_required_fields(trace):
    events = trace["traceEvents"]
    assert events
    for e in events:
        assert e["ph"] in ("X", "M") and isinstance(e["pid"], int) and isinstance(e["tid"], int)
        if e["ph"] == "X":
            assert {"name", "ts", "dur", "args"} <= set(e) and e["dur"] >= 0 and e["ts"] >= 0
    names = {(e["pid"], e["tid"]): e["args"]["name"] for e in events if e["name"] == "thread_name"}
    used = {(e["pid"], e["tid"]) for e in events if e["ph"] == "X"}
    assert used <= set(names)
    processes = {e["args"]["name"] for e in events if e["name"] == "process_name"}
    assert {"pipeline stages", "TP collectives", "DP collectives", "p2p transfers", "DRAM ports"} == processes
    dram_pid = next(e["pid"] for e in events if e["name"] == "process_name" and e["args"]["name"] == "DRAM ports")
    ports = {e["args"]["name"] for e in events if e["name"] == "thread_name" and e["pid"] == dram_pid}
    assert ports and all(name.startswith("dram die") for name in ports)


def test_tracks_are_monotonic_and_never_overlap(trace):
    tracks = defaultdict(list)
    for e in trace["traceEvents"]:
        if e["ph"] == "X":
            tracks[(e["pid"], e["tid"])].append(e)
    for events in tracks.values():
        for a, b in zip(events, events[1:], strict=False):
            assert b["ts"] >= a["ts"]
            assert a["ts"] + a["dur"] <= b["ts"] + 1e-6


def test_every_microbatch_forward_and_backward_on_every_stage(trace, timeline):
    seen = defaultdict(set)
    for e in trace["traceEvents"]:
        if e["ph"] == "X" and e.get("cat") in ("forward", "backward", "recompute"):
            seen[(e["args"]["stage"], e["args"]["kind"])].add(e["args"]["microbatch"])
    assert timeline.window_microbatches == 6
    for stage in range(4):
        for kind in "FBR":
            assert seen[(stage, kind)] == set(range(6)), (stage, kind)


def test_communication_tracks_carry_bytes(trace):
    cats = defaultdict(list)
    for e in trace["traceEvents"]:
        if e["ph"] == "X":
            cats[e["cat"]].append(e)
    for kind in ("tp", "p2p", "dram"):
        assert cats[kind] and all(e["args"]["bytes"] > 0 for e in cats[kind])
    assert {e["args"]["microbatch"] for e in cats["p2p"]} == set(range(6))
    assert cats["bubble"] and cats["gradient update"]


def test_recording_changes_no_result(timeline):
    from simulator import simulate

    strategy = Strategy.from_dict(timeline.result.strategy)
    plain = simulate(load_model("T-1.7B"), load_hardware(MINI_MESH), strategy)
    assert plain.iteration_time_s == pytest.approx(timeline.result.iteration_time_s)
    assert set(timeline.utilisation) and max(timeline.utilisation.values()) > 0


def test_zb_h1_traces_its_input_and_weight_gradient_passes_apart():
    strategy = Strategy(tp=2, dp=1, pp=4, recompute="full", global_batch_size=16, microbatch_size=1,
                        schedule="zb-h1")
    zb = simulate_timeline(load_model("T-1.7B"), load_hardware(MINI_MESH), strategy, window_microbatches=6)
    seen = defaultdict(set)
    for e in chrome_trace(zb)["traceEvents"]:
        if e["ph"] == "X" and e["pid"] == 1 and e["cat"] != "bubble":
            seen[(e["args"]["stage"], e["cat"], e["args"]["kind"])].add(e["args"]["microbatch"])
    for stage in range(4):
        for category, kind in (("forward", "F"), ("recompute", "R"), ("input-gradient backward", "Bi"),
                               ("weight-gradient backward", "W")):
            assert seen[(stage, category, kind)] == set(range(6)), (stage, category)
        assert not seen[(stage, "backward", "B")]
