"""Identical data-parallel replicas simulated once (simulator/replicas.py): on small machines the
result equals the simulation of every replica to 1e-9 relative, under every network and schedule;
the cluster's symmetry rule agrees with the comparison of flow signatures; a mesh, whose replicas
differ, says so and simulates them all."""

from __future__ import annotations

import dataclasses
import math

import pytest
from fixtures import cluster_hardware, mesh_hardware

from simulator import NETWORKS, Strategy, load_model, simulate
from simulator.network.names import ESTIMATE
from simulator.network.topology import topology_of
from simulator.placement import place
from simulator.replicas import simulated_replicas
from simulator.timing.flows import all_flows, flow_signature, machine_flows

MODEL = dataclasses.replace(load_model("T-1.7B"), num_layers=4, global_batch_size=64)
_SMALL = cluster_hardware(nodes=8, gpus=8)
CLUSTER = dataclasses.replace(_SMALL, calibration=dataclasses.replace(_SMALL.calibration,
                                                                     fused_attention_efficiency=0.5))
SCHEDULES = [dict(schedule="gpipe"), dict(schedule="1f1b"), dict(schedule="zb-h1"),
             dict(schedule="interleaved-1f1b", num_chunks=2)]
MAPPINGS = [  # (strategy fields, replicas simulated)
    (dict(tp=8, pp=2, dp=4), 2),  # a replica per node
    (dict(tp=4, pp=2, dp=8), 4),  # two replicas per node: a window of two nodes
    (dict(tp=2, pp=1, dp=32, zero_stage=3), 8),  # ZeRO-3's exposed gathers on the DP ring
    (dict(tp=2, cp=2, pp=2, dp=8, zero_stage=1), 4),  # context parallelism inside a replica
    (dict(tp=8, pp=2, dp=4, transfer_strategy=2, p2p_blocking=True), 2),
]


def _relative(a: float, b: float) -> float:
    return abs(a - b) / max(abs(a), abs(b), 1e-300)


def _assert_same(reduced, full) -> None:
    numbers = ["iteration_time_s", "samples_per_s", "model_flops_utilisation"]
    for name in numbers:
        assert _relative(getattr(reduced, name), getattr(full, name)) <= 1e-9, name
    assert reduced.events_simulated == full.events_simulated
    assert reduced.simulated_microbatches == full.simulated_microbatches
    for a, b in zip(reduced.stages, full.stages, strict=True):
        assert a.devices == b.devices
        for name in ("compute_s", "communication_s", "dram_stall_s", "optimizer_s", "bubble_s"):
            assert _relative(getattr(a, name), getattr(b, name)) <= 1e-9 or abs(getattr(a, name)) < 1e-15, name
    assert reduced.traffic_bytes.keys() == full.traffic_bytes.keys()
    for kind, moved in full.traffic_bytes.items():
        assert _relative(reduced.traffic_bytes[kind], moved) <= 1e-9, kind
    for a, b in zip(reduced.resources, full.resources, strict=True):
        assert (a.kind, a.count) == (b.kind, b.count)
        assert _relative(a.max_utilisation, b.max_utilisation) <= 1e-9
        assert _relative(a.mean_utilisation, b.mean_utilisation) <= 1e-9


@pytest.mark.parametrize("network", list(NETWORKS))
@pytest.mark.parametrize("schedule", SCHEDULES, ids=lambda s: s["schedule"])
@pytest.mark.parametrize(("fields", "window"), MAPPINGS, ids=lambda x: str(x))
def test_replicas_simulated_once_equal_every_replica(network, schedule, fields, window):
    strategy = Strategy(recompute="full", microbatch_size=1, global_batch_size=64, **fields, **schedule)
    reduced = simulate(MODEL, CLUSTER, strategy, network=network)
    full = simulate(MODEL, CLUSTER, strategy, network=network, every_replica=True)
    assert reduced.feasible and full.feasible
    assert (reduced.replicas_simulated, full.replicas_simulated) == (window, strategy.dp)
    _assert_same(reduced, full)


@pytest.mark.parametrize("network", list(NETWORKS))
@pytest.mark.parametrize("decode_context_length", [0, 129], ids=["prefill", "decode"])
def test_inference_replicas_simulated_once_equal_every_replica(network, decode_context_length):
    strategy = Strategy(tp=8, pp=2, dp=4, mode="inference", prompt_length=128, microbatch_size=1,
                        global_batch_size=8, decode_context_length=decode_context_length)
    reduced = simulate(MODEL, CLUSTER, strategy, network=network)
    full = simulate(MODEL, CLUSTER, strategy, network=network, every_replica=True)
    assert (reduced.replicas_simulated, full.replicas_simulated) == (2, 4)
    _assert_same(reduced, full)


def test_strided_layouts_and_explicit_stages_are_simulated_whole():
    """The cluster's rule covers compact replicas of its id order only."""
    explicit = dict(placement="explicit", stage_devices=(tuple(range(32)), tuple(range(32, 64))))
    for fields in (dict(group_layout="strided"), explicit):
        strategy = Strategy(tp=8, pp=2, dp=4, recompute="full", global_batch_size=64, **fields)
        assert simulate(MODEL, CLUSTER, strategy, network=ESTIMATE).replicas_simulated == 4


@pytest.mark.parametrize("gpus", [6, 8])
@pytest.mark.parametrize("tp", [1, 2, 3, 4, 8, 16])
@pytest.mark.parametrize("dp", [2, 3, 4, 6, 8, 12, 16])
@pytest.mark.parametrize("pp", [1, 2])
@pytest.mark.parametrize("cp", [1, 2])
def test_cluster_rule_agrees_with_the_comparison_of_flows(gpus, tp, dp, pp, cp):
    """Where the cluster's rule picks a window, that window's flows, counted dp / window times,
    have the signature of all replicas' (every distinct column of loads, as often), on nodes of
    8 GPUs and of 6 (replicas of 3 or 6 GPUs tile them, of 4 do not)."""
    hardware = cluster_hardware(nodes=32, gpus=gpus)
    topology = topology_of(hardware)
    strategy = Strategy(tp=tp, dp=dp, pp=pp, cp=cp, global_batch_size=dp * 8, zero_stage=1)
    if strategy.num_devices > topology.num_devices:
        return
    window = simulated_replicas(topology, strategy)
    assert dp % window == 0
    signatures = [flow_signature(topology, all_flows(*machine_flows(
        topology, place(topology, strategy, n), hardware.calibration, 1, False)[:2]), dp // n) for n in (dp, window)]
    assert signatures[0] == signatures[1]


def test_a_mesh_whose_replicas_differ_says_so_and_simulates_them_all():
    """On a mesh the ring joining four replicas runs over other links than a ring of two would
    (their flow signatures differ): every replica is simulated, and the result says so."""
    hardware = mesh_hardware(dies=(2, 2), cores=(2, 2))
    topology = topology_of(hardware)
    strategy = Strategy(tp=2, dp=4, pp=2, recompute="full", global_batch_size=64)
    signatures = [flow_signature(topology, all_flows(*machine_flows(
        topology, place(topology, strategy, n), hardware.calibration, 1, False)[:2]), 4 // n) for n in (4, 2)]
    assert signatures[0] != signatures[1]
    result = simulate(MODEL, hardware, strategy)
    assert result.replicas_simulated == strategy.dp
    assert math.isclose(result.samples_per_s, simulate(MODEL, hardware, strategy, every_replica=True).samples_per_s,
                        rel_tol=0.0)


def test_cost_of_a_large_cluster_does_not_build_it():
    """A 131,072-GPU cluster: the first simulation builds the flows of two replicas only."""
    big = dataclasses.replace(CLUSTER, network=dataclasses.replace(CLUSTER.network, nodes=16384))
    strategy = Strategy(tp=8, pp=2, dp=8192, recompute="full", global_batch_size=8192)
    result = simulate(MODEL, big, strategy)
    assert result.replicas_simulated == 2
    assert [r.count for r in result.resources] == [2 * 131072, 2 * 131072]
    assert result.stages[1].devices == tuple(range(65536, 131072))


def _flow_fields(flow):
    """What a flow is, its loads' and occupancies' order included (its levels too)."""
    levels = None if flow.levels is None else tuple(_flow_fields(level) for level in flow.levels)
    return (flow.name, flow.kind, flow.group_size, list(flow.loads.items()), flow.latency_s, flow.seconds_per_byte,
            flow.num_edges, list(flow.occupancy.items()), levels)


@pytest.mark.parametrize("fields", [dict(tp=2, pp=4, dp=8, ep=8, zero_stage=1),  # whole nodes: moved
                                    dict(tp=2, pp=2, dp=16, zero_stage=3, shard_group_size=4),
                                    dict(tp=8, pp=4, dp=2),
                                    dict(tp=2, pp=8, dp=2)])  # stages of half a node: routed
def test_stage_flows_moved_onto_a_later_stage_are_the_flows_routed_there(fields):
    # a stage whose placement is the first's moved by whole nodes takes the first's flows moved
    # (topology.resource_shift), and so do the sends between such stages: the same flows, names,
    # loads and order as routing their own
    from simulator.timing import flows

    strategy = Strategy(**fields)
    topology = topology_of(CLUSTER)
    placements = place(topology, strategy, strategy.dp)
    built, sends, _ = machine_flows(topology, placements, CLUSTER.calibration, 1, False)
    for i, placement in enumerate(placements):
        routed = flows._stage_flows(topology, CLUSTER.calibration, i, placement, False)
        assert [_flow_fields(f) for f in flows.own_flows(built[i])] == \
            [_flow_fields(f) for f in flows.own_flows(routed)]
    for (i, j), flow in sends.items():
        assert _flow_fields(flow) == _flow_fields(flows._p2p_flow(topology, CLUSTER.calibration, placements, 1, i, j))
    origins = [p.shifted(-p.devices[0]) for p in placements]
    moved = [flows._moved_by(topology, placements, origins, i, 0) for i in range(len(placements))]
    assert all(m is not None for m in moved[1:]) == (strategy.dp * strategy.tp % 8 == 0)
