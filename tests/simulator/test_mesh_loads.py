"""A mesh counts the loads of many never-routed routes at once (runs of links,
simulator/network/mesh_loads.py): the same loads, in the same order, latency and edges as routing
every edge (Topology.route_loads)."""

from __future__ import annotations

import dataclasses
import random

import pytest
from fixtures import mesh_hardware

from simulator import load_hardware
from simulator.hardware.spec import Dram
from simulator.network.mesh import BATCHED_ROUTES, MeshTopology
from simulator.network.topology import Topology


def _machines():
    """Small meshes of one and several wafers (2-D grids of wafers, one or more links per die
    edge, die hops slower than core hops), nearest and interleaved DRAM, and two presets."""
    small = mesh_hardware(dies=(2, 3), cores=(3, 2))
    slow_dies = dataclasses.replace(small, network=dataclasses.replace(small.network, inter_die_hop_latency_s=5e-7))
    assert small.memory.dram is not None
    spread = dataclasses.replace(small, memory=dataclasses.replace(
        small.memory, dram=dataclasses.replace(small.memory.dram, access="interleaved")))
    machines = {"one wafer": small, "slow die hops": slow_dies, "interleaved DRAM": spread}
    for wafers, links in (((2, 2), 1), ((3, 2), None), ((1, 3), 2)):
        network = dataclasses.replace(slow_dies.network, wafers_x=wafers[0], wafers_y=wafers[1],
                                      inter_wafer_link_bandwidth_bytes_per_s=10e9, inter_wafer_hop_latency_s=1e-6,
                                      inter_wafer_links_per_die=links)
        machines[f"{wafers[0]} x {wafers[1]} wafers, {links} links a die"] = dataclasses.replace(small, network=network)
    machines["wafer-4"] = load_hardware("wafer-4")
    machines["wormhole-galaxy"] = load_hardware("wormhole-galaxy")
    return machines


MACHINES = _machines()


def _routes(rng: random.Random, devices: int) -> list:
    """Random edges, enough to be counted at once: pairs, DRAM streams and edges carrying a share
    of an edge's bytes."""
    routes = []
    for _ in range(rng.randint(BATCHED_ROUTES, 3 * BATCHED_ROUTES)):
        src, dst = rng.randrange(devices), rng.choice([-1, rng.randrange(devices)])
        routes.append((src, dst) if rng.random() < 0.5 else (src, dst, rng.choice([1.0, 0.5, 1 / 3])))
    return routes


def _fresh(name: str) -> MeshTopology:
    """A new topology of machine ``name``, nothing routed yet."""
    hardware = MACHINES[name]
    return MeshTopology(hardware.network, hardware.memory.dram)  # type: ignore[arg-type]


@pytest.mark.parametrize("name", list(MACHINES))
@pytest.mark.parametrize("seed", range(6))
def test_a_meshs_route_loads_counted_by_runs_are_those_of_routing_every_edge(name, seed):
    topology = _fresh(name)
    routes = _routes(random.Random(seed), topology.num_devices)
    counted = topology.route_loads(routes)
    assert not topology._routed and not topology._dram_routed  # counted by runs, nothing routed
    routed = Topology.route_loads(topology, routes)
    assert list(counted[0].items()) == list(routed[0].items())
    assert counted[1] == routed[1]
    assert counted[2] == pytest.approx(routed[2], rel=1e-12)


def test_routes_routed_before_are_counted_route_by_route_with_the_same_loads():
    topology = _fresh("2 x 2 wafers, 1 links a die")
    routes = _routes(random.Random(1), topology.num_devices)
    first = topology.route_loads(routes)
    Topology.route_loads(topology, routes)  # routes and keeps every one
    assert topology._routed
    assert topology.route_loads(routes) == first


def test_a_route_between_wafers_crosses_each_wafer_link_it_names_once():
    # corner to corner of a 2 x 2 grid of wafers: two links between wafers, east then south
    topology = _fresh("2 x 2 wafers, 1 links a die")
    src, dst = 0, topology.num_devices - 1
    routes = [(src, dst)] + [(d, -1) for d in range(BATCHED_ROUTES)]
    loads, latency, edges = topology.route_loads(routes)
    links, _ = topology.route(src, dst)
    wafer = {r for r in links if topology.bandwidth_bytes_per_s[r] == 10e9}
    assert len(wafer) == 2 and all(loads[r] == 1.0 for r in wafer)
    assert edges == 1.0 + BATCHED_ROUTES and latency > 2e-6


def test_no_routes_load_nothing():
    assert _fresh("one wafer").route_loads([]) == ({}, 0.0, 0.0)


def test_dram_access_is_a_field_the_tests_cover():
    assert {m.memory.dram.access for m in MACHINES.values() if isinstance(m.memory.dram, Dram)} == {"nearest",
                                                                                                   "interleaved"}
