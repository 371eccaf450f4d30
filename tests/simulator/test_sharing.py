"""Bandwidth sharing (simulator/network/sharing.py): closed forms, a reference implementation of
the same max-min model, and equality with the analytical backend where nothing is shared."""

from __future__ import annotations

import math

import pytest
import simpy
from fixtures import mesh_hardware
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator import load_hardware, load_model
from simulator.api import simulate
from simulator.network.collectives import Flow, make_flow
from simulator.network.sharing import SharingNetwork, constraints_of, max_min_rates
from simulator.network.topology import topology_of
from simulator.strategy import Strategy
from simulator.timing import TIMINGS, SharingTiming

HW = mesh_hardware(dies=(2, 2), cores=(2, 2))
TOPO = topology_of(HW)
LINK_S_PER_BYTE = 1 / 100e9
"""One intra-die link of HW, alone: seconds per byte."""


def _run(flows: list[Flow], jobs: list[tuple[float, int, float]]) -> list[float]:
    """Start each (time s, flow index, alone duration s) and return when each ends (s)."""
    env = simpy.Environment()
    net = SharingNetwork()
    net.start(env, flows)
    ends = [math.nan] * len(jobs)

    def job(k: int, at: float, flow: Flow, duration: float):
        yield env.timeout(at)
        yield net.transfer(flow, duration)
        ends[k] = env.now

    for k, (at, f, duration) in enumerate(jobs):
        env.process(job(k, at, flows[f], duration))
    env.run()
    return ends


def test_two_equal_flows_on_one_link_each_get_half():
    flows = [make_flow(TOPO, f"f{k}", "p2p", [(0, 1)], 1.0) for k in range(2)]
    assert _run(flows, [(0.0, 0, 1.0), (0.0, 1, 1.0)]) == pytest.approx([2.0, 2.0], rel=1e-12)


def test_two_instances_of_one_flow_share_it():
    flow = make_flow(TOPO, "f", "p2p", [(0, 1)], 1.0)
    assert _run([flow], [(0.0, 0, 1.0), (0.0, 0, 1.0)]) == pytest.approx([2.0, 2.0], rel=1e-12)


def test_a_flow_sharing_one_hop_of_a_longer_path_slows_only_by_that_hops_share():
    # long: core 0 -> 3 on the first row (three hops); short: core 1 -> 2 (the middle hop only).
    # Equal links: both run at half rate while the short one lasts, then the long one at full.
    long, short = make_flow(TOPO, "long", "p2p", [(0, 3)], 1.0), make_flow(TOPO, "short", "p2p", [(1, 2)], 1.0)
    assert len(long.loads) == 3 and set(short.loads) < set(long.loads)
    x, y = 4.0, 1.0  # alone durations (s)
    assert _run([long, short], [(0.0, 0, x), (0.0, 1, y)]) == pytest.approx([x + y, 2 * y], rel=1e-12)


def test_flows_on_disjoint_links_do_not_slow_each_other():
    a, b = make_flow(TOPO, "a", "p2p", [(0, 1)], 1.0), make_flow(TOPO, "b", "p2p", [(2, 3)], 1.0)
    assert _run([a, b], [(0.0, 0, 1.0), (0.5, 1, 1.0)]) == pytest.approx([1.0, 1.5], rel=1e-12)


def test_a_late_flow_slows_the_early_one_only_while_both_run():
    flows = [make_flow(TOPO, f"f{k}", "p2p", [(0, 1)], 1.0) for k in range(2)]
    # f0 alone for 0.5 s (half done), then both at half rate: f0's last half takes 1 s.
    assert _run(flows, [(0.0, 0, 1.0), (0.5, 1, 1.0)]) == pytest.approx([1.5, 2.0], rel=1e-12)


def test_an_event_of_transfer_fires_with_its_arrival_time_for_a_waiter_that_comes_after_it_ended():
    # The network calls the waiters of its own transfers (a sequence's phases) without triggering
    # their events when nothing else is due; transfer()'s event is triggered, alone (f0 at t = 0,
    # 1 s + 0.25 s of latency) or shared (f1 and f2 from t = 3, 2 s each at half rate + 0.25 s).
    flows = [make_flow(TOPO, f"f{k}", "p2p", [(0, 1)], 1.0) for k in range(3)]
    env = simpy.Environment()
    net = SharingNetwork()
    net.start(env, flows)
    seen = []

    def late(events: list[simpy.Event]):
        yield env.timeout(10.0)
        for event in events:
            seen.append((event.processed, (yield event)))

    env.process(late([net.transfer(flows[0], 1.25, 0.25)]))
    env.run(until=3.0)
    env.process(late([net.transfer(flows[1], 1.25, 0.25), net.transfer(flows[2], 1.25, 0.25)]))
    env.run()
    assert seen == [(True, pytest.approx(1.25, rel=1e-12)), (True, pytest.approx(5.25, rel=1e-12)),
                    (True, pytest.approx(5.25, rel=1e-12))]


def test_a_train_ending_as_a_transfer_starts_on_its_flow_leaves_it_alone_and_is_forgotten():
    # The train's timer fires at t = 1 after the transfer has started there: the train has ended
    # (its bytes all moved), so the transfer runs alone (1 s), and the train is dropped from its
    # flow by the transfer that met it, without an event of its own.
    flow = make_flow(TOPO, "f", "p2p", [(0, 1)], 1.0)
    env = simpy.Environment()
    net = SharingNetwork()
    net.start(env, [flow])
    wake = env.timeout(1.0)  # scheduled before the train's timer: fires first at t = 1
    train = net.sequence(net.plan([(flow, 1.0, 0.0, 0.0)]))
    ends = []

    def later():
        yield wake
        yield net.transfer(flow, 1.0)
        ends.append(env.now)

    env.process(later())
    env.run()
    assert train.processed and ends == [pytest.approx(2.0, rel=1e-12)]
    assert not any(net._trains)


def _flow(occupancy: dict[int, float]) -> Flow:
    """A flow of the given occupancies (s per byte per edge), one edge per resource."""
    return Flow(name="f", kind="tp", group_size=2, loads=dict.fromkeys(occupancy, 1.0), latency_s=0.0,
                seconds_per_byte=max(occupancy.values()), occupancy=occupancy)


def test_constraints_are_one_per_undominated_vector_of_each_group_of_users_in_the_order_met():
    # Resources 10, 11, 14 and 15 are used by flows 0 and 1 (vectors (1, 3), (2, 1), (0.5, 0.5)
    # dominated by (1, 3), and (2, 1) again), 12 by flows 0 and 2, 13 by flows 1 and 2. Groups are
    # numbered as first met walking flow 0's resources then flow 1's; a group's vectors by
    # decreasing sum; each flow's own bottleneck is -1 - its index.
    flows = [_flow({10: 1.0, 11: 2.0, 12: 0.5, 14: 0.5, 15: 2.0}), _flow({11: 1.0, 10: 3.0, 13: 4.0, 14: 0.5, 15: 1.0}),
             _flow({12: 1.0, 13: 1.0})]
    assert constraints_of(flows) == [((-1, 2.0), (0, 1.0), (1, 2.0), (2, 0.5)),
                                     ((-2, 4.0), (0, 3.0), (1, 1.0), (3, 4.0)),
                                     ((-3, 1.0), (2, 1.0), (3, 1.0))]


def test_constraints_of_flows_sharing_nothing_are_their_own_bottlenecks():
    flows = [_flow({1: 0.5}), _flow({2: 0.25, 3: 0.125}), Flow(name="empty", kind="tp", group_size=1, loads={},
                                                              latency_s=0.0, seconds_per_byte=0.0)]
    assert constraints_of(flows) == [((-1, 0.5),), ((-2, 0.25),), ((-3, 0.0),)]


def test_max_min_rates_is_bertsekas_and_gallagers_example():
    # Three flows on two unit links: A on link 0, B on links 0 and 1, C on link 1 (twice the
    # occupancy): link 1 saturates first at 1/3 for B and C, then A takes what B leaves on link 0.
    rates = max_min_rates([[(0, 1.0)], [(0, 1.0), (1, 1.0)], [(1, 2.0)]])
    assert rates == pytest.approx([2 / 3, 1 / 3, 1 / 3], rel=1e-12)


def _reference_rates(active: list[Flow]) -> list[float]:
    """Max-min rates by progressive filling over every resource of every active transfer (no
    grouping, no components): the model's definition, written plainly."""
    rates, frozen = [0.0] * len(active), [False] * len(active)
    resources = {r for f in active for r in f.occupancy}
    while not all(frozen):
        used = {r: sum(rates[k] * f.occupancy.get(r, 0.0) for k, f in enumerate(active)) for r in resources}
        growth = {r: sum(f.occupancy.get(r, 0.0) for k, f in enumerate(active) if not frozen[k])
                  for r in resources}
        step = min((1.0 - used[r]) / g for r, g in growth.items() if g > 0)
        for k in range(len(active)):
            if not frozen[k]:
                rates[k] += step
        for r in resources:
            if growth[r] > 0 and 1.0 - used[r] - step * growth[r] <= 1e-12:
                for k, f in enumerate(active):
                    if r in f.occupancy:
                        frozen[k] = True
    return rates


def _reference_run(flows: list[Flow], jobs: list[tuple[float, int, float]]) -> list[float]:
    """End times of ``jobs`` by stepping from event to event, rates recomputed at each."""
    remaining = [duration / flows[f].seconds_per_byte for _, f, duration in jobs]
    ends = [math.nan] * len(jobs)
    now, started = 0.0, [False] * len(jobs)
    while any(math.isnan(e) for e in ends):
        running = [k for k in range(len(jobs)) if started[k] and math.isnan(ends[k])]
        rates = _reference_rates([flows[jobs[k][1]] for k in running])
        next_start = min((jobs[k][0] for k in range(len(jobs)) if not started[k]), default=math.inf)
        next_end = min((now + remaining[k] / rate for k, rate in zip(running, rates, strict=True)),
                       default=math.inf)
        t = min(next_start, next_end)
        for k, rate in zip(running, rates, strict=True):
            remaining[k] -= rate * (t - now)
            if remaining[k] <= 1e-9 * jobs[k][2] / flows[jobs[k][1]].seconds_per_byte:
                ends[k] = t
        now = t
        for k in range(len(jobs)):
            if not started[k] and jobs[k][0] <= now:
                started[k] = True
    return ends


pairs = st.tuples(st.integers(0, 15), st.integers(0, 15)).filter(lambda p: p[0] != p[1])


@settings(max_examples=60, deadline=None)
@given(routes=st.lists(st.lists(pairs, min_size=1, max_size=3), min_size=1, max_size=5),
       jobs=st.lists(st.tuples(st.sampled_from([0.0, 0.25, 0.5, 1.0, 1.5]), st.integers(0, 4),
                               st.sampled_from([0.5, 1.0, 2.0, 3.0])), min_size=1, max_size=8))
def test_equals_a_plain_reference_implementation_of_the_same_model(routes, jobs):
    flows = [make_flow(TOPO, f"f{k}", "p2p", edges, 1.0) for k, edges in enumerate(routes)]
    jobs = [(at, f % len(flows), duration) for at, f, duration in jobs]
    assert _run(flows, jobs) == pytest.approx(_reference_run(flows, jobs), rel=1e-9)


@settings(max_examples=20, deadline=None)
@given(tp=st.sampled_from([1, 2, 4]), dp=st.sampled_from([1, 2, 4]), batches=st.integers(1, 4),
       recompute=st.sampled_from(["none", "full"]))
def test_with_nothing_shared_sharing_equals_the_analytical_backend(tp, dp, batches, recompute):
    # One pipeline stage: its transfers run one after another, so no two ever overlap.
    model = load_model("T-18B")
    strategy = Strategy(tp=tp, dp=dp, pp=1, global_batch_size=dp * batches, recompute=recompute, zero_stage=3)
    shared, alone = (simulate(model, HW, strategy, network=n) for n in ("sharing", "analytical"))
    assert shared.feasible == alone.feasible
    assert shared.iteration_time_s == pytest.approx(alone.iteration_time_s, rel=1e-9)


def test_shared_dram_ports_are_never_more_than_fully_busy():
    # 16 one-core stages, four per die, share their die's two DRAM ports: without contention the
    # busiest port would be 146% busy; shared, it is at most fully busy.
    slow_dram = mesh_hardware(dies=(2, 2), cores=(2, 2), dram=20e9)
    model, strategy = load_model("T-18B"), Strategy(pp=16, global_batch_size=32)
    busiest = {n: max(u.max_utilisation for u in simulate(model, slow_dram, strategy, network=n).resources
                      if u.kind == "dram") for n in ("analytical", "sharing")}
    assert busiest["analytical"] > 1.2
    assert 0.5 < busiest["sharing"] <= 1.0 + 1e-9


@pytest.mark.parametrize("strategy", [
    Strategy(pp=16, global_batch_size=32),
    Strategy(tp=2, dp=2, pp=4, global_batch_size=16, recompute="full"),
    Strategy(tp=2, dp=2, pp=4, global_batch_size=16, zero_stage=3, p2p_blocking=True),
    Strategy(tp=4, pp=4, global_batch_size=8, schedule="gpipe"),
])
def test_trains_equal_transfers_run_one_by_one(strategy, monkeypatch):
    # A pass runs as one timer while nothing shares with it, and is materialised when something
    # does: the outcome must be the phase-by-phase one's, on meshes where DRAM ports are shared.
    slow_dram = mesh_hardware(dies=(2, 2), cores=(2, 2), dram=20e9)
    model = load_model("T-18B")
    trains = simulate(model, slow_dram, strategy, network="sharing")
    monkeypatch.setitem(TIMINGS, "sharing", lambda machine: SharingTiming(machine, SharingNetwork(trains=False)))
    plain = simulate(model, slow_dram, strategy, network="sharing")
    assert trains.feasible and plain.feasible
    assert trains.iteration_time_s == pytest.approx(plain.iteration_time_s, rel=1e-9)
    for a, b in zip(trains.stages, plain.stages, strict=True):
        assert (a.compute_s, a.communication_s, a.dram_stall_s, a.bubble_s) == pytest.approx(
            (b.compute_s, b.communication_s, b.dram_stall_s, b.bubble_s), rel=1e-9, abs=1e-12)
    busiest = max(u.max_utilisation for u in plain.resources if u.kind == "dram")
    assert busiest > 0.5  # the DRAM ports are shared, so trains were materialised


@pytest.mark.parametrize("strategy", [
    Strategy(tp=8, pp=4, dp=2, global_batch_size=16, recompute="full", sequence_parallel=True, zero_stage=1),
    Strategy(tp=8, pp=4, dp=2, global_batch_size=16, zero_stage=3, p2p_blocking=True),
    Strategy(tp=4, pp=8, dp=2, global_batch_size=32, schedule="gpipe"),
])
def test_trains_beside_trains_equal_transfers_run_one_by_one(strategy, monkeypatch):
    # On a GPU cluster a send's regroup uses the receiving stage's TP groups, as that stage's
    # passes do: their trains run side by side while their phases on those groups do not meet in
    # time, and the outcome must still be the phase-by-phase one's.
    model, cluster = load_model("T-18B"), load_hardware("h100-cluster")
    met = []
    meets = SharingNetwork._meets
    monkeypatch.setattr(SharingNetwork, "_meets", lambda self, *a: met.append(meets(self, *a)) or met[-1])
    trains = simulate(model, cluster, strategy, network="sharing")
    assert False in met and True in met  # trains ran beside trains, and some were materialised
    monkeypatch.setitem(TIMINGS, "sharing", lambda machine: SharingTiming(machine, SharingNetwork(trains=False)))
    plain = simulate(model, cluster, strategy, network="sharing")
    assert trains.iteration_time_s == pytest.approx(plain.iteration_time_s, rel=1e-9)
    for a, b in zip(trains.stages, plain.stages, strict=True):
        assert (a.compute_s, a.communication_s, a.bubble_s) == pytest.approx(
            (b.compute_s, b.communication_s, b.bubble_s), rel=1e-9, abs=1e-12)
