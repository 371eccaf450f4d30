"""The timing contract (simulator/timing/): every timing model the engine can be given by name
(:data:`simulator.timing.TIMINGS`) runs the same cases, and each case's closed form is the
closed form's (:meth:`simulator.engine.Engine.estimate`, :func:`simulator.timing.vectorised.iterations`)
time alone."""

from __future__ import annotations

import dataclasses

import pytest
from fixtures import mesh_hardware, uniform_cost

from simulator import DEFAULT_NETWORK, NETWORKS, load_model
from simulator.api import simulate
from simulator.costs import Collective, PassCost, StageCost
from simulator.engine import Engine
from simulator.errors import InputError
from simulator.network.names import ESTIMATE
from simulator.network.topology import topology_of
from simulator.placement import place
from simulator.schedules import OneFOneB, make_schedule
from simulator.strategy import Strategy
from simulator.timing import TIMINGS, timing_model
from simulator.timing.machine import Machine

MODELS = sorted(TIMINGS)
HW = mesh_hardware(dies=(2, 2), cores=(2, 2))
TOPOLOGY = topology_of(HW)


def _engine(network: str, costs: tuple[StageCost, ...], strategy: Strategy, training: bool = False) -> Engine:
    return Engine(hardware=HW, topology=TOPOLOGY, placements=place(TOPOLOGY, strategy), costs=costs,
                  schedule=make_schedule(strategy.schedule, strategy.pp, strategy.num_chunks), network=network,
                  training=training, record=True)


def _streaming_pass(compute_s: float, dram_bytes: float, segments: int, collective_bytes: float) -> PassCost:
    collectives = (Collective(kind="all_reduce", size_bytes=collective_bytes),) if collective_bytes else ()
    return PassCost(compute_s=compute_s, dram_bytes=dram_bytes, segments=segments, flops=1.0,
                    tp_collectives=collectives)


def test_every_name_of_the_api_but_estimate_is_a_timing_model():
    assert MODELS == ["analytical", "contention", "sharing"]


@pytest.mark.parametrize("network", MODELS)
@pytest.mark.parametrize(("compute_s", "dram_bytes", "segments", "collective_bytes"),
                         [(1e-3, 0.0, 1, 0.0), (1e-3, 4e9, 1, 0.0), (1.0, 4e9, 4, 0.0), (1e-3, 4e9, 2, 1e8),
                          (1e-2, 0.0, 3, 1e8)])
def test_a_pass_alone_takes_its_compute_its_unhidden_dram_stream_and_its_collectives(
        network, compute_s, dram_bytes, segments, collective_bytes):
    forward = _streaming_pass(compute_s, dram_bytes, segments, collective_bytes)
    costs = (dataclasses.replace(uniform_cost(compute_s, 2 * compute_s), forward=forward),)
    engine = _engine(network, costs, Strategy(tp=2))
    flows = engine.machine.stage_flows[0]
    dram_s = flows.dram.step_time_s(dram_bytes / segments) if dram_bytes else 0.0
    collective_s = flows.tp.collective_time_s("all_reduce", collective_bytes)[0] if collective_bytes else 0.0
    # the TP collectives are split evenly over the segments, each after its segment's compute
    expected = segments * (compute_s / segments + max(0.0, dram_s - compute_s / segments)) + collective_s
    run = engine.run(1)
    assert run.makespan_s == pytest.approx(expected, rel=1e-9)
    assert run.stats[0].dram_stall_s == pytest.approx(segments * max(0.0, dram_s - compute_s / segments), abs=1e-12)
    alone = engine.estimate(1)[0]  # one stage, forwards only: the closed form's iteration is the pass
    assert alone.makespan_s == pytest.approx(expected, rel=1e-9)
    assert alone.stats[0].dram_stall_s == pytest.approx(run.stats[0].dram_stall_s, rel=1e-9, abs=1e-12)


@pytest.mark.parametrize("network", MODELS)
@pytest.mark.parametrize("tp", [1, 2])
def test_a_send_alone_takes_bytes_over_bandwidth_plus_latency_then_its_regroup(network, tp):
    size_bytes, compute_s = 1e8, 1e-3
    engine = _engine(network, tuple(uniform_cost(compute_s, 2 * compute_s, size_bytes) for _ in range(2)),
                     Strategy(tp=tp, pp=2))
    flow = engine.machine.p2p[(0, 1)]
    sent_s = flow.latency_s + size_bytes * flow.seconds_per_byte
    regroup = engine.machine.regroup_cost(1, size_bytes)
    expected = sent_s + (regroup[1] if regroup else 0.0)
    assert (regroup is None) == (tp == 1)
    assert engine.run(1).makespan_s == pytest.approx(2 * compute_s + expected, rel=1e-9)
    assert engine.estimate(1)[0].makespan_s == pytest.approx(2 * compute_s + expected, rel=1e-9)


@pytest.mark.parametrize("network", MODELS)
def test_a_gradient_update_alone_takes_its_collectives_then_its_optimizer_step(network):
    model = load_model("T-1.7B")
    strategy = Strategy(dp=4, global_batch_size=4)
    alone = simulate(model, HW, strategy, network="estimate")
    simulated = simulate(model, HW, strategy, network=network)
    assert alone.feasible and simulated.feasible
    assert simulated.iteration_time_s == pytest.approx(alone.iteration_time_s, rel=1e-9)


@pytest.mark.parametrize("network", MODELS)
@pytest.mark.parametrize("m", [4, 8])
def test_uniform_stages_take_the_closed_forms_makespan(network, m):
    pp, t_f, t_b = 4, 1.0, 2.0
    engine = _engine(network, tuple(uniform_cost(t_f, t_b) for _ in range(pp)), Strategy(pp=pp), training=True)
    assert engine.run(m).makespan_s == pytest.approx((m + pp - 1) * (t_f + t_b))
    assert engine.estimate(m)[0].makespan_s == pytest.approx((m + pp - 1) * (t_f + t_b))


@pytest.mark.parametrize("strategy", [
    Strategy(tp=2, dp=2, pp=1, global_batch_size=4, recompute="full", zero_stage=3),
    Strategy(tp=4, dp=1, pp=1, global_batch_size=2),
])
def test_with_nothing_contending_every_model_gives_the_same_iteration(strategy):
    model = load_model("T-18B")
    results = [simulate(model, HW, strategy, network=network) for network in MODELS]
    assert all(r.feasible for r in results)
    for r in results[1:]:
        assert r.iteration_time_s == pytest.approx(results[0].iteration_time_s, rel=1e-9)
        assert r.traffic_bytes == pytest.approx(results[0].traffic_bytes, rel=1e-12)


@pytest.mark.parametrize("network", MODELS)
def test_recording_changes_no_time(network):
    costs = tuple(uniform_cost(1.0, 2.0, 1e6) for _ in range(4))
    recorded = _engine(network, costs, Strategy(pp=4), training=True)
    plain = Engine(hardware=HW, topology=TOPOLOGY, placements=place(TOPOLOGY, Strategy(pp=4)), costs=costs,
                   schedule=OneFOneB(4), network=network, training=True)
    a, b = recorded.run(8), plain.run(8)
    assert a.makespan_s == b.makespan_s and a.flow_bytes == b.flow_bytes and a.events == b.events
    assert a.records and not b.records


def test_the_timing_models_are_the_named_networks_but_the_event_free_estimate():
    assert set(NETWORKS) == {*TIMINGS, ESTIMATE} and ESTIMATE not in TIMINGS and DEFAULT_NETWORK in TIMINGS
    with pytest.raises(InputError, match="network must be one of"):
        simulate(load_model("T-1.7B"), HW, Strategy(), network="telepathy")


def test_an_unknown_timing_model_is_an_input_error():
    machine = Machine(hardware=HW, topology=TOPOLOGY, placements=place(TOPOLOGY, Strategy()),
                      costs=(uniform_cost(1.0, 2.0),), transfer_strategy=1, p2p_blocking=False, record=False)
    with pytest.raises(InputError, match="network must be one of"):
        timing_model("telepathy", machine)


@pytest.mark.parametrize("network", MODELS)
@pytest.mark.parametrize(("compute_s", "dram_bytes"), [(1e-3, 0.0), (1e-3, 4e9)])
@pytest.mark.parametrize("idle", ["host_s", "launch_s"])
def test_a_passs_host_time_and_launch_gaps_follow_it_and_no_stream_hides_them(network, compute_s, dram_bytes, idle):
    idle_s = 2e-3
    plain = _streaming_pass(compute_s, dram_bytes, 2, 0.0)
    runs = {}
    for seconds in (0.0, idle_s):
        costs = (dataclasses.replace(uniform_cost(compute_s, 2 * compute_s),
                                     forward=dataclasses.replace(plain, **{idle: seconds})),)
        runs[seconds] = _engine(network, costs, Strategy(tp=2)).run(1)
        engine = _engine(network, costs, Strategy(tp=2))
        assert engine.estimate(1)[0].makespan_s == pytest.approx(runs[seconds].makespan_s, rel=1e-9)
    assert runs[idle_s].makespan_s - runs[0.0].makespan_s == pytest.approx(idle_s, rel=1e-9)
    # host time is its own column; launch gaps count as the stage's compute
    stats, before = runs[idle_s].stats[0], runs[0.0].stats[0]
    assert (stats.host_s, stats.compute_s - before.compute_s) == pytest.approx(
        (idle_s, 0.0) if idle == "host_s" else (0.0, idle_s), abs=1e-12)
