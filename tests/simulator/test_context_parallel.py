"""Context parallelism (ring attention): closed forms of its communication, compute and memory."""

from __future__ import annotations

import dataclasses

import pytest

from simulator import load_hardware, load_model, simulate
from simulator.errors import InputError
from simulator.network.topology import topology_of
from simulator.placement import place
from simulator.strategy import Strategy
from simulator.workload.memory import layer_activation_bytes
from simulator.workload.stages import build_stage_costs

H100 = load_hardware("h100-cluster")
MODEL = dataclasses.replace(load_model("LLaMA2-7B"), sequence_length=16384)
BASE = Strategy(tp=2, dp=4, global_batch_size=8, precision="bf16", recompute="selective", attention="fused")




def test_the_ring_moves_the_keys_and_values_of_the_whole_sequence():
    # per layer and microbatch, forward: all-gather of K and V, 2 b s h / t elements; backward:
    # the all-gather again and the reduce-scatter of their gradients. A ring all-gather moves
    # (cp - 1) / cp of it per device.
    cp, pp = 4, MODEL.num_layers
    strategy = dataclasses.replace(BASE, cp=cp, pp=pp, dp=1, global_batch_size=pp)
    stage = build_stage_costs(MODEL, H100, strategy)[1]
    size = 2 * 1 * MODEL.sequence_length * MODEL.hidden_size / 2 * 2
    assert [(c.kind, c.size_bytes, c.count) for c in stage.forward.cp_collectives] == [("all_gather", size, 1)]
    assert [(c.kind, c.size_bytes) for c in stage.backward.cp_collectives] == \
        [("all_gather", size), ("reduce_scatter", size)]
    run = simulate(MODEL, H100, strategy, network="analytical")
    m, moved = pp, (cp - 1) / cp * size  # microbatches per replica, bytes per device per collective
    devices = strategy.num_devices
    assert run.traffic_bytes["cp"] == pytest.approx(devices * m * 3 * moved)


def test_each_rank_computes_a_cpth_of_the_layer_and_stashes_a_cpth_of_its_activations():
    one = build_stage_costs(MODEL, H100, BASE)[0]
    four = build_stage_costs(MODEL, H100, dataclasses.replace(BASE, cp=4, dp=1))[0]
    assert four.forward.flops == pytest.approx(one.forward.flops / 4)
    assert four.backward.flops == pytest.approx(one.backward.flops / 4)
    assert four.model_flops_per_microbatch == pytest.approx(one.model_flops_per_microbatch / 4)
    for sp in (False, True):
        fields = {"tp": 2, "sequence_parallel": sp, "attention": "fused"}
        assert layer_activation_bytes(MODEL, Strategy(cp=4, **fields)) == \
            pytest.approx(layer_activation_bytes(MODEL, Strategy(**fields)) / 4)


def test_context_parallel_ranks_hold_the_same_weights_and_reduce_gradients_together():
    strategy = dataclasses.replace(BASE, cp=2, dp=2, zero_stage=1)
    [stage] = place(topology_of(H100), strategy)
    assert len(stage.devices) == 2 * 2 * 2
    # TP fastest, then CP, then DP: devices 0-1 a TP group, {0, 2} a CP group, {0, 2, 4, 6} the
    # ranks that hold TP shard 0 and reduce its gradients
    assert set(map(frozenset, stage.cp_groups)) == {frozenset(g) for g in ((0, 2), (4, 6), (1, 3), (5, 7))}
    assert set(map(frozenset, stage.dp_groups)) == {frozenset((0, 2, 4, 6)), frozenset((1, 3, 5, 7))}
    [cost] = build_stage_costs(MODEL, H100, strategy)
    assert cost.memory.optimizer_bytes == pytest.approx(cost.parameters * 12 / 4)  # ZeRO over dp * cp


def test_context_parallelism_fits_a_sequence_that_one_rank_cannot_hold():
    model = dataclasses.replace(load_model("LLaMA2-7B"), sequence_length=262144)
    base = Strategy(tp=8, dp=8, global_batch_size=8, precision="bf16", zero_stage=3, sequence_parallel=True)
    alone = simulate(model, H100, base)
    split = simulate(model, H100, dataclasses.replace(base, cp=8, dp=1))
    assert not alone.feasible and split.feasible


@pytest.mark.parametrize("fields, message", [
    ({"attention": "unfused"}, "runs attention fused"),
    ({"global_batch_size": 8}, None),
])
def test_context_parallelism_needs_fused_attention(fields, message):
    strategy = dataclasses.replace(BASE, cp=4, dp=1, **fields)
    if message is None:
        assert simulate(MODEL, H100, strategy).feasible
        return
    with pytest.raises(InputError, match=message):
        simulate(MODEL, H100, strategy)


def test_context_parallelism_needs_a_sequence_split_in_2cp_chunks():
    odd = dataclasses.replace(MODEL, sequence_length=4100)
    with pytest.raises(InputError, match="2\\*cp = 8 chunks"):
        simulate(odd, H100, dataclasses.replace(BASE, cp=4, dp=1))
