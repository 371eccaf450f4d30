"""A torus of chips (TPU-v4-like): wrap-around routes and the ring all-reduce closed form."""

from __future__ import annotations

import pytest
from fixtures import torus_hardware

import simulator
from simulator.network.collectives import make_flow, ring_edges
from simulator.network.topology import topology_of
from simulator.network.torus import ring_steps


def test_ring_steps_take_the_shorter_way_round():
    assert ring_steps(0, 3, 4) == [3]  # one wrap-around hop, not three
    assert ring_steps(0, 2, 4) == [1, 2]  # a tie goes the positive way
    assert ring_steps(3, 1, 8) == [2, 1]
    assert ring_steps(5, 5, 8) == []


def test_routes_are_dimension_ordered_with_wrap_around():
    topo = topology_of(torus_hardware(chips=(4, 4, 4)))
    links, latency = topo.route(0, 3)  # (0,0,0) -> (3,0,0): one wrap-around link
    assert len(links) == 1 and latency == pytest.approx(1e-6)
    links, _ = topo.route(0, 63)  # (0,0,0) -> (3,3,3): one hop per dimension
    assert [topo.names[r] for r in links] == ["link 0->3", "link 3->15", "link 15->63"]
    assert topo.dram_route(5) == ((), 0.0)


@pytest.mark.parametrize("n", [2, 3, 4, 8])
def test_ring_all_reduce_closed_form_on_an_x_ring(n):
    """Every ring edge of an x ring is one link: 2(n-1)/n S/bw + 2(n-1) hop latencies
    (Thakur et al., IJHPCA 2005; Patarasuk and Yuan 2009)."""
    topo = topology_of(torus_hardware(chips=(n, 2, 1), link=50e9, hop=1e-6))
    flow = make_flow(topo, "tp", "tp", ring_edges((tuple(range(n)),)), efficiency=1.0, group_size=n)
    size = 64e6
    expected = 2 * (n - 1) / n * size / 50e9 + 2 * (n - 1) * 1e-6
    assert flow.collective_time_s("all_reduce", size)[0] == pytest.approx(expected, rel=1e-12)


def test_rings_on_every_x_ring_at_once_do_not_share_links():
    topo = topology_of(torus_hardware(chips=(4, 4, 1)))
    groups = tuple(tuple(range(4 * y, 4 * y + 4)) for y in range(4))
    flow = make_flow(topo, "tp", "tp", ring_edges(groups), efficiency=1.0, group_size=4)
    assert max(flow.loads.values()) == 1


def test_the_tpu_v4_cube_preset_trains_a_model():
    hardware = simulator.load_hardware("tpu-v4-cube")
    assert hardware.kind == "torus" and hardware.num_devices == 64
    strategy = simulator.Strategy(tp=4, pp=4, dp=4, precision="bf16", recompute="full", zero_stage=1)
    result = simulator.simulate(simulator.load_model("T-1.7B"), hardware, strategy)
    assert result.feasible and 0 < result.model_flops_utilisation < 0.87
    assert {r.kind for r in result.resources} == {"link"}
