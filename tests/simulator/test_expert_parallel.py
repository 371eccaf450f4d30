"""Expert parallelism: its groups, the all-to-all's volume and time in closed form, and where the
expert-parallel ranks sit changing the links the all-to-all loads on a mesh."""

from __future__ import annotations

import pytest

from simulator import simulate
from simulator.network.topology import topology_of
from simulator.placement import place
from simulator.strategy import Strategy
from simulator.timing.flows import machine_flows
from simulator.workload.spec import ModelSpec
from simulator.workload.stages import build_stage_costs
from tests.simulator.fixtures import cluster_hardware, mesh_hardware

MOE = ModelSpec(name="tiny-moe", architecture="llama", num_layers=4, hidden_size=256, num_heads=4,
                ffn_hidden_size=512, sequence_length=64, vocab_size=1000, global_batch_size=16,
                num_experts=8, experts_per_token=2, expert_ffn_hidden_size=128)


def _ep_flow(hardware, strategy):
    topology = topology_of(hardware)
    flows, _, _ = machine_flows(topology, place(topology, strategy), hardware.calibration, 1, False)
    return flows[0].ep


def test_expert_groups_are_consecutive_replicas_and_experts_reduce_across_them():
    strategy = Strategy(tp=2, dp=8, ep=4, global_batch_size=16)
    stage = place(topology_of(cluster_hardware()), strategy)[0]
    assert len(stage.ep_groups) == 2 * 8 // 4 and all(len(g) == 4 for g in stage.ep_groups)
    assert len(stage.expert_dp_groups) == 2 * 4 and all(len(g) == 2 for g in stage.expert_dp_groups)
    # every device is in one group of each kind, and each expert-dp group takes one rank of each ep group
    devices = sorted(d for g in stage.ep_groups for d in g)
    assert devices == sorted(stage.devices) == sorted(d for g in stage.expert_dp_groups for d in g)
    for group in stage.expert_dp_groups:
        assert all(len(set(group) & set(ep)) <= 1 for ep in stage.ep_groups)


def test_dispatch_and_combine_move_tokens_times_top_k_each_way():
    # per device and MoE layer: b s k h B / t elements each way, (ep - 1) / ep of it to the others
    ep, b = 8, 2
    strategy = Strategy(dp=ep, ep=ep, microbatch_size=b, global_batch_size=16, precision="fp16")
    stage = build_stage_costs(MOE, cluster_hardware(), strategy)[0]
    size = b * MOE.sequence_length * MOE.experts_per_token * MOE.hidden_size * 2
    assert [(c.kind, c.size_bytes, c.count) for c in stage.forward.ep_collectives] == \
        [("all_to_all", size, 2 * MOE.num_layers)]
    assert [(c.kind, c.size_bytes, c.count) for c in stage.backward.ep_collectives] == \
        [("all_to_all", size, 2 * MOE.num_layers)]
    run = simulate(MOE, cluster_hardware(), strategy, network="analytical", steady_state=False)
    m = 16 // (b * ep)
    assert run.traffic_bytes["ep"] == pytest.approx(ep * m * 4 * MOE.num_layers * size * (ep - 1) / ep)


def test_an_all_to_all_in_a_node_takes_its_bytes_over_one_nvlink_port():
    # one step: each GPU sends S/ep to each of ep - 1 peers through its own NVLink port (300 GB/s)
    hardware, ep, size = cluster_hardware(), 8, 1e8
    flow = _ep_flow(hardware, Strategy(dp=ep, ep=ep, global_batch_size=16))
    duration, moved = flow.collective_time_s("all_to_all", size)
    assert moved == size / ep
    assert duration == pytest.approx(2e-6 + (ep - 1) * size / ep / 300e9)


def test_an_all_to_all_across_nodes_waits_for_the_nics():
    # ep 16 over two nodes: 8 of a GPU's 15 peers are on the other node, through its 25 GB/s NIC
    hardware, ep, size = cluster_hardware(), 16, 1.6e8
    flow = _ep_flow(hardware, Strategy(dp=ep, ep=ep, global_batch_size=16))
    duration, _ = flow.collective_time_s("all_to_all", size)
    assert duration == pytest.approx(5e-6 + 8 * size / ep / 25e9)


def test_where_expert_ranks_sit_changes_the_links_the_all_to_all_loads():
    # 4 x 2 cores on two dies side by side: walked x first (tp-major), the ep groups of 4
    # consecutive ranks are rows across both dies; y first (dp-major), each is one die's 2 x 2
    # cores, and the all-to-all crosses no die edge
    hardware = mesh_hardware(dies=(2, 1))
    flows = {order: _ep_flow(hardware, Strategy(dp=8, ep=4, group_order=order, global_batch_size=16))
             for order in ("tp-major", "dp-major")}
    topology = topology_of(hardware)
    inter_die = {order: sum(load for r, load in flow.loads.items()
                            if topology.bandwidth_bytes_per_s[r] == 50e9) for order, flow in flows.items()}
    assert inter_die["dp-major"] == 0 < inter_die["tp-major"]
    assert flows["dp-major"].seconds_per_byte < flows["tp-major"].seconds_per_byte


@pytest.mark.parametrize("seed", range(20))
def test_a_clusters_all_to_all_loads_counted_in_closed_form_are_those_of_routing_every_pair(seed):
    # the cluster counts a direct all-to-all's NVSwitch and NIC loads per GPU (pairs on and off
    # its node) instead of routing every pair: the same loads, in the same order, latency, edges
    import random

    from simulator.network.topology import Topology

    rng = random.Random(seed)
    topology = topology_of(cluster_hardware(nodes=16))
    size, count = rng.choice([2, 3, 8, 16]), rng.choice([1, 2, 4])
    devices = rng.sample(range(topology.num_devices), size * count)
    groups = tuple(tuple(devices[g * size:(g + 1) * size]) for g in range(count))
    counted, routed = topology.all_pairs_loads(groups), Topology.all_pairs_loads(topology, groups)
    assert list(counted[0].items()) == list(routed[0].items()) and counted[1:] == routed[1:]
    assert counted[2] == count * size * (size - 1)
    assert sum(counted[0].values()) == 2 * count * size * (size - 1)  # each pair: an up-port and a down-port


@pytest.mark.parametrize("seed", range(20))
def test_a_clusters_route_loads_counted_in_closed_form_are_those_of_routing_every_edge(seed):
    # the cluster counts the ports an edge crosses arithmetically instead of routing it: the same
    # loads, in the same order, latency and edges, shares and DRAM streams included
    import random

    rng = random.Random(seed)
    topology = topology_of(cluster_hardware(nodes=16))
    routes = []
    for _ in range(rng.randint(0, 60)):
        src, dst = rng.randrange(topology.num_devices), rng.choice([-1, rng.randrange(topology.num_devices)])
        routes.append((src, dst) if rng.random() < 0.5 else (src, dst, rng.choice([1.0, 0.5, 0.125])))
    loads: dict[int, float] = {}
    latency = edges = 0.0
    for src, dst, *share in routes:
        edges += share[0] if share else 1.0
        if dst >= 0:
            resources, route_latency = topology.route(src, dst)
            for r in resources:
                loads[r] = loads.get(r, 0.0) + (share[0] if share else 1.0)
            latency = max(latency, route_latency)
    counted = topology.route_loads(routes)
    assert list(counted[0].items()) == list(loads.items()) and counted[1:] == (latency, edges)
