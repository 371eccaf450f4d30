"""Hybrid sharding (FSDP ``HYBRID_SHARD``, MiCS): ZeRO-3 within shard groups, replicas across them."""

from __future__ import annotations

from dataclasses import replace

import pytest

from simulator import load_hardware, load_model, simulate
from simulator.errors import InputError
from simulator.network.topology import topology_of
from simulator.placement import place
from simulator.strategy import Strategy
from simulator.workload.stages import build_stage_costs

H100 = load_hardware("h100-cluster")
MODEL = load_model("LLaMA2-7B")
HYBRID = Strategy(tp=2, dp=16, zero_stage=3, shard_group_size=4, global_batch_size=64)


def test_shard_groups_are_consecutive_dp_ranks_and_replicas_every_fth():
    [stage] = place(topology_of(H100), HYBRID)
    full = [tuple(g[r] for g in stage.tp_groups) for r in range(2)]  # the DP groups without hybrid sharding
    assert len(stage.dp_groups) == 2 * 16 // 4 and all(len(g) == 4 for g in stage.dp_groups)
    assert len(stage.replica_groups) == 2 * 4 and all(len(g) == 4 for g in stage.replica_groups)
    for group in full:
        shards = [set(group[k:k + 4]) for k in range(0, 16, 4)]
        replicas = [set(group[k::4]) for k in range(4)]
        assert all(s in [set(g) for g in stage.dp_groups] for s in shards)
        assert all(r in [set(g) for g in stage.replica_groups] for r in replicas)
    assert place(topology_of(H100), replace(HYBRID, shard_group_size=None))[0].replica_groups == ()


def test_states_shard_over_the_group_and_the_shard_is_all_reduced_over_replicas_once():
    [hybrid] = build_stage_costs(MODEL, H100, HYBRID)
    [full] = build_stage_costs(MODEL, H100, replace(HYBRID, shard_group_size=None))
    parameters = hybrid.parameters
    assert hybrid.memory.optimizer_bytes == pytest.approx(parameters * 12 / 4)
    assert full.memory.optimizer_bytes == pytest.approx(parameters * 12 / 16)
    assert [(c.kind, c.size_bytes) for c in hybrid.dp_collectives] == [("all_reduce", parameters * 2 / 4)]
    assert full.dp_collectives == ()
    assert hybrid.forward.replica_collectives == full.forward.replica_collectives  # gathers move the same bytes


def test_shard_groups_within_a_node_keep_gathers_off_the_nics():
    # tp 1, F = 8 GPUs of a node: every gather and reduce-scatter stays on NVSwitch, so slowing the
    # NICs only slows the once-per-iteration all-reduce across replicas; full sharding feels it
    # in every microbatch's collectives
    strategy = Strategy(tp=1, dp=64, zero_stage=3, shard_group_size=8, global_batch_size=256)
    slow = replace(H100, network=replace(H100.network, inter_node_bandwidth_bytes_per_s=12.5e9))
    times = {(name, f): simulate(MODEL, hw, replace(strategy, shard_group_size=f)).iteration_time_s
             for name, hw in (("fast", H100), ("slow", slow)) for f in (8, None)}
    assert times["slow", 8] < times["slow", None]
    assert times["slow", 8] - times["fast", 8] < times["slow", None] - times["fast", None]


def test_shard_group_size_needs_zero3_and_a_divisor_of_dp():
    for fields in ({"zero_stage": 2, "shard_group_size": 4}, {"zero_stage": 3, "shard_group_size": 5}):
        with pytest.raises(InputError, match="shard_group_size"):
            Strategy(dp=16, **fields)
