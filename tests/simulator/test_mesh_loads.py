"""A mesh counts the loads of many routes at once (runs of links, simulator/network/mesh_loads.py),
where many never-routed ones join two wafers: the same loads, in the same order, latency and edges
as routing every edge (Topology.route_loads)."""

from __future__ import annotations

import dataclasses
import random

import pytest
from fixtures import mesh_hardware

import simulator.network.mesh as mesh_module
from simulator import load_hardware
from simulator.network.mesh import ACROSS_WAFERS, BATCHED_ROUTES, KEPT_ROUTES, MeshTopology
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
    column = mesh_hardware(dies=(1, 2), cores=(1, 2))  # one core wide: a step south is also one id
    machines["a column of 3 one-core-wide wafers"] = dataclasses.replace(column, network=dataclasses.replace(
        column.network, wafers_y=3, inter_wafer_link_bandwidth_bytes_per_s=10e9, inter_wafer_hop_latency_s=1e-6))
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
def test_loads_counted_by_runs_are_those_of_routing_every_edge(name, seed):
    topology = _fresh(name)
    routes = _routes(random.Random(seed), topology.num_devices)
    counted = topology._loads_by_runs(routes)
    routed = Topology.route_loads(topology, routes)
    assert list(counted[0].items()) == list(routed[0].items())
    assert counted[1] == routed[1]
    assert counted[2] == pytest.approx(routed[2], rel=1e-12)


@pytest.mark.parametrize("name", ["one wafer", "2 x 2 wafers, 1 links a die", "wafer-4"])
def test_whole_pairs_counted_together_are_those_counted_one_resource_at_a_time(name):
    # Topology.route_loads counts routes of whole pairs only with a Counter; as edges of share 1
    # each resource is summed one crossing at a time: the same loads, order, latency and edges
    topology = _fresh(name)
    rng = random.Random(7)
    pairs = [(rng.randrange(topology.num_devices), rng.randrange(topology.num_devices)) for _ in range(300)]
    pairs = [(a, b) for a, b in pairs if a != b]
    together = Topology.route_loads(topology, pairs)
    one_by_one = Topology.route_loads(topology, [(a, b, 1.0) for a, b in pairs])
    assert list(together[0].items()) == list(one_by_one[0].items())
    assert together[1:] == one_by_one[1:]
    assert Topology.route_loads(topology, []) == ({}, 0.0, 0.0)


def _between_wafers(topology: MeshTopology, count: int) -> list[tuple[int, int]]:
    """``count`` pairs of cores on different wafers."""
    rng = random.Random(0)
    pairs: list[tuple[int, int]] = []
    while len(pairs) < count:
        a, b = rng.randrange(topology.num_devices), rng.randrange(topology.num_devices)
        if topology.wafer_of(a) != topology.wafer_of(b):
            pairs.append((a, b))
    return pairs


def test_pairs_counted_by_runs_are_kept_as_routing_each_would_route_them():
    topology, alone = _fresh("2 x 2 wafers, 1 links a die"), _fresh("2 x 2 wafers, 1 links a die")
    routes = _routes(random.Random(3), topology.num_devices)
    topology._loads_by_runs(routes)
    pairs = {(a, b) for a, b, *_ in routes if b >= 0}
    assert topology._routed == pairs
    assert all(topology.route(a, b) == alone.route(a, b) for a, b in pairs)
    assert not topology._batched  # each kept route handed to route()


def test_never_routed_pairs_are_counted_by_runs_from_a_threshold_those_between_wafers_weighing_more():
    needed = -(-BATCHED_ROUTES // ACROSS_WAFERS)  # pairs between wafers that reach the threshold
    for count, by_runs in ((needed - 1, False), (needed, True)):
        topology = _fresh("2 x 2 wafers, 1 links a die")
        routes = _between_wafers(topology, count)
        assert topology.route_loads(routes) == Topology.route_loads(_fresh("2 x 2 wafers, 1 links a die"), routes)
        assert topology._routed == set(routes)
        assert bool(topology._batched) == by_runs  # kept by the runs, not yet asked for one by one


def test_pairs_routed_before_are_counted_route_by_route_with_the_same_loads():
    # pairs only: the runs keep no DRAM stream
    topology = _fresh("2 x 2 wafers, 1 links a die")
    routes = [r for r in _routes(random.Random(1), topology.num_devices) if r[1] >= 0]
    first = topology._loads_by_runs(routes)
    assert topology.route_loads(routes) == first  # nothing new: route by route
    assert not topology._batched


def test_a_flow_of_more_routes_than_are_kept_is_counted_by_runs_without_keeping_them():
    topology = _fresh("one wafer")  # an all-to-all over all 36 cores: 1,260 pairs
    routes = [(a, b) for a in range(topology.num_devices) for b in range(topology.num_devices) if a != b]
    assert len(routes) > KEPT_ROUTES
    assert topology.route_loads(routes) == Topology.route_loads(_fresh("one wafer"), routes)
    assert not topology._routed and not topology._batched


def test_on_one_wafer_fewer_pairs_than_the_threshold_are_routed_one_at_a_time_and_kept():
    topology = _fresh("one wafer")
    routes = [(a, b) for a in range(8) for b in range(8, 8 + (BATCHED_ROUTES - 1) // 8)]
    topology.route_loads(routes)
    assert topology._routed == set(routes) and not topology._batched


def test_a_route_between_wafers_crosses_each_wafer_link_it_names_once():
    # corner to corner of a 2 x 2 grid of wafers: two links between wafers, east then south
    topology = _fresh("2 x 2 wafers, 1 links a die")
    src, dst = 0, topology.num_devices - 1
    routes = [(src, dst)] + [(d, -1) for d in range(BATCHED_ROUTES)]
    loads, latency, edges = topology._loads_by_runs(routes)
    links, _ = topology.route(src, dst)
    wafer = {r for r in links if topology.bandwidth_bytes_per_s[r] == 10e9}
    assert len(wafer) == 2 and all(loads[r] == 1.0 for r in wafer)
    assert edges == 1.0 + BATCHED_ROUTES and latency > 2e-6


def test_no_routes_load_nothing():
    assert _fresh("one wafer").route_loads([]) == ({}, 0.0, 0.0)


def test_counted_route_sets_are_remembered_as_counted_the_least_recently_used_forgotten(monkeypatch):
    import simulator.network.topology as topology_module

    topology, fresh = _fresh("2 x 2 wafers, 1 links a die"), _fresh("2 x 2 wafers, 1 links a die")
    routes = _routes(random.Random(5), topology.num_devices)
    groups = ((0, 5, 9, 14), (1, 6, 10, 15))
    first = topology.remembered_loads(routes)
    assert first == fresh.route_loads(routes) and list(first[0]) == list(fresh.route_loads(routes)[0])
    assert topology.remembered_all_pairs_loads(groups) == fresh.all_pairs_loads(groups)
    assert topology.remembered_loads(list(routes)) is first  # asked again: not counted again
    monkeypatch.setattr(topology_module, "COUNTS_REMEMBERED", 2)
    topology.remembered_loads(routes[:3])  # a third set: the all-pairs one, least recently used, goes
    assert list(topology._counted) == [("routes", tuple(routes)), ("routes", tuple(routes[:3]))]
    assert topology.remembered_loads(routes) is first


def test_an_occupancy_is_remembered_for_the_counted_loads_and_efficiency_it_was_computed_for():
    topology = _fresh("one wafer")
    counted = topology.remembered_loads(_routes(random.Random(9), topology.num_devices))
    occupancy, seconds_per_byte = topology.remembered_occupancy(counted, 0.8)
    assert occupancy == topology.occupancy(counted[0], 0.8) and seconds_per_byte == max(occupancy.values())
    assert topology.remembered_occupancy(counted, 0.8)[0] is occupancy
    assert topology.remembered_occupancy(counted, 0.5)[0] == topology.occupancy(counted[0], 0.5) != occupancy
    equal = (dict(counted[0]), *counted[1:])  # equal loads, another object: counted anew, not found
    assert topology.remembered_occupancy(equal, 0.8)[0] is not occupancy


def _groups(rng: random.Random, topology: MeshTopology, one_wafer: bool) -> tuple[tuple[int, ...], ...]:
    """A few groups of random distinct cores, each on one wafer (``one_wafer``) or anywhere."""
    groups = []
    for _ in range(rng.choice([1, 2, 3, 5])):
        wafer = rng.randrange(topology.mesh.wafers)
        cores = [d for d in range(topology.num_devices) if not one_wafer or topology.wafer_of(d) == wafer]
        groups.append(tuple(rng.sample(cores, rng.randint(1, min(len(cores), 40)))))
    return tuple(groups)


@pytest.mark.parametrize("name", list(MACHINES))
@pytest.mark.parametrize("seed", range(8))
def test_all_to_all_loads_counted_in_closed_form_are_those_of_routing_every_pair(name, seed, monkeypatch):
    # groups on one wafer each are counted without routing a pair (however few their pairs): the
    # same loads, in the same order, latency and edges as routing every pair source-major
    monkeypatch.setattr(mesh_module, "PAIRS_PER_GRID", 0)
    monkeypatch.setattr(mesh_module, "CELLS_PER_PAIR", 10**9)
    topology = _fresh(name)
    groups = _groups(random.Random(seed), topology, one_wafer=True)
    counted, routed = topology.all_pairs_loads(groups), Topology.all_pairs_loads(_fresh(name), groups)
    assert list(counted[0].items()) == list(routed[0].items()) and counted[1:] == routed[1:]
    assert not topology._routed  # nothing routed
    pairs = [(a, b) for g in groups for a in g for b in g if a != b]
    assert counted[2] == len(pairs)
    assert sum(counted[0].values()) == sum(len(topology.route(a, b)[0]) for a, b in pairs)  # a link per hop


@pytest.mark.parametrize("name", ["2 x 2 wafers, 1 links a die", "a column of 3 one-core-wide wafers", "wafer-4"])
@pytest.mark.parametrize("seed", range(4))
def test_all_to_all_loads_of_groups_spanning_wafers_or_repeating_a_core_are_routed(name, seed):
    topology = _fresh(name)
    groups = _groups(random.Random(seed), topology, one_wafer=False)
    groups = (*groups, (groups[0][0], groups[0][0], *groups[0][1:2]))  # a core twice: pairs of it with itself
    counted, routed = topology.all_pairs_loads(groups), Topology.all_pairs_loads(_fresh(name), groups)
    assert list(counted[0].items()) == list(routed[0].items()) and counted[1:] == routed[1:]


def test_an_all_to_all_of_few_pairs_for_its_grid_is_routed_and_one_of_many_counted():
    topology = _fresh("wafer-4")
    cores = [d for d in range(topology.num_devices) if topology.wafer_of(d) == 0]
    few = (tuple(cores[:2]), tuple(cores[2:4]))  # 4 pairs: routed
    topology.all_pairs_loads(few)
    assert topology._routed == {(a, b) for g in few for a in g for b in g if a != b}
    many = (tuple(cores[:32]),)  # 992 pairs over a 20 x 2 box
    assert len(many[0]) * (len(many[0]) - 1) >= mesh_module.PAIRS_PER_GRID
    fresh = _fresh("wafer-4")
    counted = fresh.all_pairs_loads(many)
    assert not fresh._routed and counted == Topology.all_pairs_loads(_fresh("wafer-4"), many)


def test_all_to_all_loads_of_single_cores_are_none():
    assert _fresh("one wafer").all_pairs_loads(((3,), (5,))) == ({}, 0.0, 0.0)
    assert _fresh("one wafer").all_pairs_loads(()) == ({}, 0.0, 0.0)
