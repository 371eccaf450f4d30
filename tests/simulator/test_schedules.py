"""Contract suite for every pipeline schedule and every network backend."""

from __future__ import annotations

import itertools
from collections import Counter

import pytest
from fixtures import mesh_hardware, uniform_cost
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.engine import Engine
from simulator.errors import InputError
from simulator.legality import check_plan
from simulator.network.backends import ContentionNetwork, network_backend
from simulator.network.collectives import make_flow
from simulator.network.topology import topology_of
from simulator.passes import PassKind
from simulator.placement import place
from simulator.schedules import SCHEDULE_CLASSES, PipelineSchedule, make_schedule
from simulator.strategy import Strategy
from simulator.timing import TIMINGS
from simulator.workload.loader import load_model

F, B, U = PassKind.FORWARD, PassKind.BACKWARD, PassKind.OPTIMIZER_UPDATE
BI, W = PassKind.BACKWARD_INPUT, PassKind.BACKWARD_WEIGHT
HW = mesh_hardware(dies=(2, 2), cores=(2, 2))
BOOKING = ["analytical", "contention"]
"""Backends that book a start time (the sharing backend's transfers: tests/simulator/test_sharing.py)."""


@st.composite
def pipelines(draw):
    name = draw(st.sampled_from(sorted(SCHEDULE_CLASSES)))
    pp = draw(st.integers(1, 6))
    chunks = draw(st.integers(2, 3)) if name == "interleaved-1f1b" else 1
    m = pp * draw(st.integers(1, 3)) if name == "interleaved-1f1b" else draw(st.integers(1, 10))
    return name, pp, chunks, m


@settings(max_examples=60, deadline=None)
@given(pipeline=pipelines())
def test_every_pass_runs_once_and_forward_precedes_backward(pipeline):
    name, pp, chunks, m = pipeline
    schedule = make_schedule(name, pp, chunks)
    halves = (BI, W) if schedule.defers_weight_gradients else (B,)
    for stage in range(pp):
        order = schedule.order(stage, m)
        assert Counter(order) == Counter((k, mb, c) for k in (F, *halves) for mb in range(m) for c in range(chunks))
        position = {p: i for i, p in enumerate(order)}
        for mb, c in itertools.product(range(m), range(chunks)):
            chain = [position[(k, mb, c)] for k in (F, *halves)]
            assert chain == sorted(chain)


@settings(max_examples=30, deadline=None)
@given(pipeline=pipelines(), network=st.sampled_from(sorted(TIMINGS)))
def test_simulated_forward_ends_before_its_backward_starts_on_every_stage(pipeline, network):
    name, pp, chunks, m = pipeline
    topo = topology_of(HW)
    strategy = Strategy(pp=pp, schedule=name, num_chunks=chunks)
    costs = tuple(uniform_cost(1.0, 2.0, 1e6) for _ in range(pp * chunks))
    engine = Engine(hardware=HW, topology=topo, placements=place(topo, strategy), costs=costs,
                    schedule=make_schedule(name, pp, chunks), network=network,
                    training=True, record=True)
    records = engine.run(m).records
    span = {(r.stage, r.kind, r.microbatch, r.chunk): (r.start_s, r.end_s) for r in records if r.kind is not U}
    assert len(span) == (3 if engine.schedule.defers_weight_gradients else 2) * pp * chunks * m
    for (stage, kind, mb, chunk), (start, _end) in span.items():
        if kind is not F:
            assert span[(stage, F, mb, chunk)][1] <= start
        if kind is W:
            assert span[(stage, BI, mb, chunk)][1] <= start


def test_1f1b_holds_p_minus_i_microbatches_and_gpipe_all():
    assert [make_schedule("1f1b", 4).max_in_flight(i, 8) for i in range(4)] == [[4], [3], [2], [1]]
    assert make_schedule("gpipe", 4).max_in_flight(0, 8) == [8]


def test_interleaved_peak_in_closed_form_is_the_walk_of_its_order():
    # the closed form against the base class's walk of every pass (the definition), including
    # warm-ups capped by every forward (m v at most the warm-up) and stages past the first
    for pp, chunks, stage in ((p, v, i) for p in (1, 2, 3, 4, 5, 8) for v in (2, 3, 4) for i in range(p)):
        schedule = make_schedule("interleaved-1f1b", pp, chunks)
        for m in range(pp, 6 * pp + 1, pp):
            walked = PipelineSchedule.max_in_flight(schedule, stage, m)
            assert schedule.max_in_flight(stage, m) == walked, (pp, chunks, stage, m)


def test_interleaving_needs_microbatches_divisible_by_stages():
    model = load_model("T-18B")
    strategy = Strategy(pp=4, schedule="interleaved-1f1b", num_chunks=2, global_batch_size=6)
    with pytest.raises(InputError, match="divisible by pp"):
        check_plan(model, HW, strategy)


@pytest.mark.parametrize("name", BOOKING)
def test_a_booking_never_starts_before_it_is_ready(name):
    topo = topology_of(HW)
    flow = make_flow(topo, "f", "p2p", [(0, 5)], 1.0)
    flow.booked = tuple(flow.loads)
    net = network_backend(name)
    assert net.name == name
    starts = [net.book(flow, t, 1.0, 0.0) for t in (0.0, 0.5, 0.2, 3.0)]
    assert all(s >= t for s, t in zip(starts, (0.0, 0.5, 0.2, 3.0), strict=True))
    if not net.uses_contention():
        assert starts == [0.0, 0.5, 0.2, 3.0]
    if isinstance(net, ContentionNetwork):
        assert sorted(starts) == [0.0, 1.0, 2.0, 3.0]


@pytest.mark.parametrize("name", BOOKING)
def test_a_flow_with_nothing_booked_starts_when_ready(name):
    flow = make_flow(topology_of(HW), "f", "p2p", [(0, 5)], 1.0)
    net = network_backend(name)
    assert [net.book(flow, t, 1.0, 0.0) for t in (0.0, 0.0, 0.5)] == [0.0, 0.0, 0.5]


def test_unknown_backend_and_schedule_are_input_errors():
    with pytest.raises(InputError):
        network_backend("telepathy")
    with pytest.raises(InputError):
        make_schedule("zigzag", 2)


@pytest.mark.parametrize("name", BOOKING)
def test_a_reset_backend_books_as_a_fresh_one(name):
    flow = make_flow(topology_of(HW), "f", "p2p", [(0, 5)], 1.0)
    flow.booked = tuple(flow.loads)
    used, fresh = network_backend(name), network_backend(name)
    for t in (0.0, 0.1, 0.2):
        used.book(flow, t, 1.0, 0.0)
    used.reset()
    assert [used.book(flow, t, 1.0, 0.0) for t in (0.0, 0.5)] == [fresh.book(flow, t, 1.0, 0.0) for t in (0.0, 0.5)]
