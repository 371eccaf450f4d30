"""The simulator reproduces closed forms when contention is off (STYLE.md, Tests)."""

from __future__ import annotations

import dataclasses

import pytest
from fixtures import cluster_hardware, mesh_hardware, uniform_cost

from simulator.costs import PassCost
from simulator.engine import Engine
from simulator.errors import InputError
from simulator.network.backends import AnalyticalNetwork, ContentionNetwork
from simulator.network.collectives import make_flow, ring_edges
from simulator.network.topology import topology_of
from simulator.passes import PassKind
from simulator.placement import place
from simulator.schedules import GPipe, InterleavedOneFOneB, OneFOneB
from simulator.strategy import Strategy
from simulator.timing.flows import ring_flow


def test_p2p_is_hops_times_latency_plus_size_over_bandwidth():
    hw = mesh_hardware(dies=(1, 1), cores=(4, 1), intra=100e9, hop=1e-9)
    topo = topology_of(hw)
    flow = make_flow(topo, "p2p", "p2p", [(0, 3)], efficiency=1.0)
    size = 1e6
    assert flow.step_time_s(size) == pytest.approx(3 * 1e-9 + size / 100e9, rel=1e-12)


def test_p2p_across_dies_is_limited_by_the_inter_die_link():
    hw = mesh_hardware(dies=(2, 1), cores=(2, 1), intra=100e9, inter=25e9, hop=2e-9)
    flow = make_flow(topology_of(hw), "p2p", "p2p", [(0, 3)], efficiency=1.0)
    assert flow.step_time_s(1e6) == pytest.approx(3 * 2e-9 + 1e6 / 25e9, rel=1e-12)


@pytest.mark.parametrize("shape", [(2, 2), (4, 2), (2, 3), (4, 4)])
def test_ring_all_reduce_closed_form_on_a_hamiltonian_ring(shape):
    n = shape[0] * shape[1]
    hw = mesh_hardware(dies=(1, 1), cores=shape, intra=100e9, hop=1e-9)
    topo = topology_of(hw)
    ring = topo.ring_order(tuple(range(n)))
    flow = make_flow(topo, "tp", "tp", ring_edges((ring,)), efficiency=1.0, group_size=n)
    size = 8e6
    duration, _ = flow.collective_time_s("all_reduce", size)
    expected = 2 * (n - 1) / n * size / 100e9 + 2 * (n - 1) * 1e-9
    assert duration == pytest.approx(expected, rel=1e-12)


def test_ring_all_reduce_on_the_cluster_uses_nvswitch_then_nics():
    hw = cluster_hardware(nodes=2, gpus=8)
    topo = topology_of(hw)
    node = make_flow(topo, "tp", "tp", ring_edges((tuple(range(8)),)), 1.0, 8)
    across = make_flow(topo, "dp", "dp", ring_edges(((0, 8),)), 1.0, 2)
    assert node.collective_time_s("all_reduce", 1e9)[0] == pytest.approx(14 / 8 * 1e9 / 300e9 + 14 * 2e-6)
    assert across.collective_time_s("all_reduce", 1e9)[0] == pytest.approx(1e9 / 25e9 + 2 * 5e-6)


def test_nics_run_at_their_own_efficiency_and_nvswitch_at_the_flows():
    topo = topology_of(cluster_hardware(nodes=2, gpus=8, nic_efficiency=0.8))
    node = make_flow(topo, "tp", "tp", ring_edges((tuple(range(8)),)), 0.5, 8)
    across = make_flow(topo, "p2p", "p2p", [(0, 8)], 0.5)
    assert node.step_time_s(1e9) == pytest.approx(2e-6 + 1e9 / (300e9 * 0.5))
    assert across.step_time_s(1e9) == pytest.approx(5e-6 + 1e9 / (25e9 * 0.8))


def _engine(pp, schedule, forward_s, backward_s, network=None, chunks=1, send=0.0):
    hw = mesh_hardware(dies=(2, 2), cores=(2, 2))
    strategy = Strategy(pp=pp, schedule=schedule.name, num_chunks=chunks)
    topo = topology_of(hw)
    costs = tuple(uniform_cost(forward_s, backward_s, send) for _ in range(pp * chunks))
    return Engine(hardware=hw, topology=topo, placements=place(topo, strategy), costs=costs,
                  schedule=schedule, network=network or "analytical", training=True, record=True)


@pytest.mark.parametrize("schedule_class", [GPipe, OneFOneB])
@pytest.mark.parametrize(("pp", "m"), [(1, 1), (2, 4), (4, 8), (8, 3)])
def test_gpipe_and_1f1b_makespan_and_bubble(schedule_class, pp, m):
    t_f, t_b = 1.0, 2.0
    run = _engine(pp, schedule_class(pp), t_f, t_b).run(m)
    assert run.makespan_s == pytest.approx((m + pp - 1) * (t_f + t_b))
    bubble = 1 - m * (t_f + t_b) / run.makespan_s
    assert bubble == pytest.approx((pp - 1) / (m + pp - 1))


@pytest.mark.parametrize(("schedule", "chunks"), [(GPipe(4), 1), (OneFOneB(4), 1), (InterleavedOneFOneB(4, 2), 2),
                                                 (InterleavedOneFOneB(4, 4), 4)])
@pytest.mark.parametrize("m", [4, 8, 12])
def test_the_estimate_is_the_schedules_closed_form_and_the_engines_makespan(schedule, chunks, m):
    t = 1.0
    engine = _engine(4, schedule, t / chunks, 2 * t / chunks, chunks=chunks)
    run, period = engine.estimate(m)
    assert run.makespan_s == pytest.approx(m * 3 * t + (4 - 1) * 3 * t / chunks)
    assert period == pytest.approx(3 * t)
    assert run.makespan_s == pytest.approx(engine.run(m).makespan_s)


def test_the_estimate_is_at_least_the_busiest_resources_time():
    # Four one-core stages on a 4x1 die: cores 0-1 stream from port 0, cores 2-3 from port 1
    # (nearest), each port at half the die's 1 GB/s. A forward streams 1 GB: 2 s alone. Without
    # contention the pipeline takes m * 2.002 + 3 * 2.002 s; port 0 carries 2 m GB, 4 m s.
    hw = mesh_hardware(dies=(1, 1), cores=(4, 1), dram=1e9)
    topo = topology_of(hw)
    dram = PassCost(compute_s=1e-3, dram_bytes=1e9, tp_collectives=(), segments=1, flops=1.0)
    costs = tuple(dataclasses.replace(uniform_cost(1e-3, 2e-3), forward=dram) for _ in range(4))
    engine = Engine(hardware=hw, topology=topo, placements=place(topo, Strategy(pp=4)), costs=costs,
                    schedule=OneFOneB(4), network="analytical", training=True)
    m = 8
    run, period = engine.estimate(m)
    assert run.makespan_s == pytest.approx(4 * m, rel=1e-9)
    assert period == pytest.approx(4.0, rel=1e-9)
    assert engine.run(m).makespan_s == pytest.approx((m + 3) * 2.002, rel=1e-6)  # over-books the ports


def test_interleaving_divides_the_bubble_by_the_number_of_chunks():
    pp, m, v, t = 4, 8, 2, 1.0
    run = _engine(pp, InterleavedOneFOneB(pp, v), t / v, 2 * t / v, chunks=v).run(m)
    bubble_s = run.makespan_s - m * 3 * t
    assert bubble_s == pytest.approx((pp - 1) * 3 * t / v)


def test_two_flows_sharing_a_link_take_twice_as_long_as_one():
    hw = mesh_hardware(dies=(1, 1), cores=(4, 1), intra=100e9, hop=0.0)
    topo = topology_of(hw)
    first = make_flow(topo, "a", "p2p", [(0, 2)], 1.0)
    second = make_flow(topo, "b", "p2p", [(1, 3)], 1.0)
    shared = set(first.loads) & set(second.loads)
    first.booked = second.booked = tuple(shared)
    duration = first.step_time_s(1e6)
    net = ContentionNetwork()
    ends = [net.book(f, 0.0, duration, 0.0) + duration for f in (first, second)]
    assert max(ends) == pytest.approx(2 * duration)
    analytical = AnalyticalNetwork()
    assert max(analytical.book(f, 0.0, duration, 0.0) + duration for f in (first, second)) == duration


def test_every_forward_precedes_its_backward_on_every_stage():
    engine = _engine(4, OneFOneB(4), 1.0, 2.0, network="contention", send=1e6)
    run = engine.run(8)
    done = {}
    for r in run.records:
        done[(r.stage, r.kind, r.microbatch)] = (r.start_s, r.end_s)
    for stage in range(4):
        for mb in range(8):
            assert done[(stage, PassKind.FORWARD, mb)][1] <= done[(stage, PassKind.BACKWARD, mb)][0]


def test_a_line_of_four_closes_its_ring_over_three_hops():
    hw = mesh_hardware(dies=(1, 1), cores=(4, 1), intra=100e9, hop=1e-9)
    topo = topology_of(hw)
    flow = make_flow(topo, "tp", "tp", ring_edges((topo.ring_order((0, 1, 2, 3)),)), 1.0, 4)
    # the link 1->0 carries the closing edge 3->0 only; 2->1 carries it too: load 1 everywhere
    # but the closing edge's latency is 3 hops
    assert flow.latency_s == pytest.approx(3e-9)


@pytest.mark.parametrize(("rows", "columns", "expected"), [
    (256 * 108, 128, 1.0),                      # one full wave
    (256 * 109, 128, 109 / 216),                # one tile into a second wave
    (2048, 4608, 288 / 324),                    # T-145B QKV at tp 8: 16 x 18 tiles, 3 waves
    (100, 100, 100 * 100 / (108 * 256 * 128)),  # one padded tile in a wave of 108
])
def test_gemm_wave_quantization(rows, columns, expected):
    compute = cluster_hardware().compute
    assert compute.gemm_efficiency(rows, columns) == pytest.approx(expected)


def test_a_ring_across_nodes_uses_every_nic_of_the_node():
    hw = cluster_hardware(nodes=2, gpus=8)
    topo = topology_of(hw)
    group = (tuple(range(16)),)
    flow = make_flow(topo, "dp", "dp", topo.channel_edges(group, ring_edges(group)), 1.0, 16)
    # per step each GPU moves S/16; each node crossing (7 -> 8 out of node 0, 15 -> 0 out of node 1)
    # is shared by the 8 NICs of its node: 1/8 of an edge per NIC at 25 GB/s, against one edge per
    # NVSwitch port at 300 GB/s (a single NIC would carry the whole edge: 8x slower)
    size = 16e9
    expected_step = 5e-6 + size / 16 * max(0.125 / 25e9, 1 / 300e9)
    assert flow.collective_time_s("all_reduce", size)[0] == pytest.approx(30 * expected_step)
    assert flow.num_edges == 16


def _ports(hw, access="nearest", **mesh):
    dram = dataclasses.replace(hw.memory.dram, access=access)
    return dataclasses.replace(hw, network=dataclasses.replace(hw.network, **mesh),
                               memory=dataclasses.replace(hw.memory, dram=dram))


def test_a_core_streams_from_its_nearest_named_port_at_its_share_of_the_bandwidth():
    hw = _ports(mesh_hardware(dies=(1, 1), cores=(4, 4), dram=300e9, hop=1e-9),
                dram_ports_per_die=3, dram_port_cores=((0, 0), (3, 0), (1, 3)))
    topo = topology_of(hw)
    for device, hops in ((0, 0), (7, 1), (13, 0), (10, 2)):  # (0,0) (3,1) (1,3) (2,2)
        flow = make_flow(topo, "dram", "dram", [(device, -1)], efficiency=1.0)
        assert flow.step_time_s(1e6) == pytest.approx(hops * 1e-9 + 1e-7 + 1e6 / 100e9, rel=1e-12)


def test_dram_data_travels_from_the_port_to_the_core_by_xy_routing():
    # one port on core (0, 0); core (3, 1) = device 7 reads: X first from the port along row 0,
    # then south in column 3 (the read response's path), not the path its request takes
    hw = _ports(mesh_hardware(dies=(1, 1), cores=(4, 4), dram=300e9, hop=1e-9),
                dram_ports_per_die=1, dram_port_cores=((0, 0),))
    topo = topology_of(hw)
    links = {r for r in make_flow(topo, "dram", "dram", [(7, -1)], efficiency=1.0).loads if topo.kinds[r] == "link"}
    assert links == {topo._links[hop] for hop in ((0, 1), (1, 2), (2, 3), (3, 7))}


def test_interleaved_traffic_spreads_evenly_over_every_port_of_the_die():
    hw = _ports(mesh_hardware(dies=(1, 1), cores=(4, 4), dram=300e9), dram_ports_per_die=3,
                dram_port_cores=((0, 0), (3, 0), (1, 3)), access="interleaved")
    topo = topology_of(hw)
    flow = make_flow(topo, "dram", "dram", [(d, -1) for d in range(16)], efficiency=1.0)
    ports = {r: load for r, load in flow.loads.items() if topo.kinds[r] == "dram"}
    assert sorted(ports.values()) == pytest.approx([16 / 3] * 3)
    assert flow.num_edges == 16


@pytest.mark.parametrize(("mesh", "message"), [
    ({"dram_ports_per_die": 3}, "must be 1 or 2"),
    ({"dram_ports_per_die": 2, "dram_port_cores": ((0, 0),)}, "must name 2 cores"),
    ({"dram_ports_per_die": 1, "dram_port_cores": ((4, 0),)}, r"\[4, 0\] outside"),
])
def test_bad_port_layouts_are_one_line_errors(mesh, message):
    with pytest.raises(InputError, match=message):
        _ports(mesh_hardware(dies=(1, 1), cores=(4, 4)), **mesh)


@pytest.mark.parametrize("fields", [{"tp": 8, "pp": 20, "dp": 2, "zero_stage": 1, "recompute": "full"},
                                    {"tp": 8, "pp": 20, "dp": 2},  # over the dies' DRAM: 0
                                    {"tp": 4, "pp": 10, "dp": 8, "mode": "inference", "schedule": "gpipe"}])
def test_the_screens_estimate_is_simulates_estimate(fields):
    from simulator import estimate_samples_per_s, load_hardware, load_model, simulate

    model, wafer = load_model("T-145B"), load_hardware("wafer")
    strategy = Strategy(**fields)
    result = simulate(model, wafer, strategy, network="estimate")
    assert estimate_samples_per_s(model, wafer, strategy) == (result.samples_per_s if result.feasible else 0.0)


def _two_chips(collectives):
    # two dies (chips) of 2 x 1 cores side by side: devices 0, 1 | 2, 3; a NoC hop 1 ns at 100 GB/s,
    # the chip-to-chip hop 1 us at 50 GB/s
    hw = mesh_hardware(dies=(2, 1), cores=(2, 1), intra=100e9, inter=50e9, hop=1e-9)
    mesh = dataclasses.replace(hw.network, inter_die_hop_latency_s=1e-6, die_collectives=collectives)
    return topology_of(dataclasses.replace(hw, network=mesh))


def test_a_collective_over_two_chips_runs_within_then_across_then_within_them():
    flow = ring_flow(_two_chips("hierarchical"), "tp", "tp", ((0, 1, 2, 3),), efficiency=1.0)
    within = 1e-9 + 0.5e6 / 100e9  # one ring step of S/2 between the two cores of a chip
    # across: rings 0-2 and 1-3, both over the chips' one link each way (load 2), 2 steps of S/4
    across = 2 * (1e-9 + 1e-6 + 0.25e6 * 2 / 50e9)
    assert flow.collective_time_s("all_reduce", 1e6)[0] == pytest.approx(within + across + within, rel=1e-12)
    assert flow.collective_time_s("all_gather", 1e6)[0] == pytest.approx(across / 2 + within, rel=1e-12)
    assert flow.collective_time_s("reduce_scatter", 1e6)[0] == pytest.approx(within + across / 2, rel=1e-12)
    assert flow.collective_latency_s("all_reduce") == pytest.approx(2e-9 + 2 * 1.001e-6, rel=1e-12)
    # a flat ring 0-1-2-3-0 pays the chip-to-chip hop on each of its 6 steps (3 -> 0 crosses 2 NoC hops too)
    flat = ring_flow(_two_chips("flat"), "tp", "tp", ((0, 1, 2, 3),), efficiency=1.0)
    assert flat.levels is None
    assert flat.collective_time_s("all_reduce", 1e6)[0] == pytest.approx(6 * (1.002e-6 + 0.25e6 / 50e9), rel=1e-12)


def test_a_group_within_one_chip_keeps_its_one_ring():
    topo = _two_chips("hierarchical")
    assert ring_flow(topo, "tp", "tp", ((0, 1), (2, 3)), efficiency=1.0).levels is None
