"""Expert tensor parallelism (``etp``, Megatron-Core's ``expert_tensor_parallel_size``): the
expert groups it carves from a stage's ranks, legality, the memory of expert states and the
dispatch volume under it, in closed form."""

from __future__ import annotations

import pytest

from simulator import load_hardware, load_model
from simulator.errors import InputError
from simulator.network.topology import topology_of
from simulator.placement import place
from simulator.strategy import Strategy
from simulator.workload.operators import expert_parallel_collectives, moe_mlp, transformer_layer_collectives
from simulator.workload.stages import build_stage_costs
from tests.simulator.fixtures import cluster_hardware

H100 = load_hardware("h100-cluster")
QWEN = load_model("Qwen3-30B-A3B")


def test_the_default_is_tp_and_keeps_the_groups_of_replicas():
    default, explicit = Strategy(tp=2, dp=8, ep=4), Strategy(tp=2, dp=8, ep=4, etp=2)
    assert default.expert_tp == explicit.expert_tp == 2
    topology = topology_of(cluster_hardware())
    assert place(topology, default)[0].ep_groups == place(topology, explicit)[0].ep_groups
    assert default.expert_replicas == explicit.expert_replicas == 8 // 4


def test_etp_1_makes_ep_groups_that_span_tp_ranks():
    # Megatron-Core's expert order etp-ep-edp over the stage's TP-fastest ranks: with etp 1 the
    # EP groups are ep consecutive ranks; tp 2, dp 8 on 16 GPUs: ranks 0-7 and 8-15, and the
    # expert-data-parallel groups {r, r + 8}
    strategy = Strategy(tp=2, dp=8, ep=8, etp=1, sequence_parallel=True)
    stage = place(topology_of(cluster_hardware()), strategy)[0]
    ranks = [d for g in place(topology_of(cluster_hardware()), Strategy(tp=2, dp=8))[0].tp_groups for d in g]
    assert stage.ep_groups == (tuple(ranks[:8]), tuple(ranks[8:]))
    assert sorted(sorted(g) for g in stage.expert_dp_groups) == sorted(sorted((ranks[r], ranks[r + 8]))
                                                                       for r in range(8))
    assert strategy.expert_replicas == 16 // (8 * 1) == 2


def test_ep_may_exceed_dp_cp_once_experts_leave_the_tp_group():
    # Qwen3-235B-A22B's H100 recipe: TP 2, PP 8, EP 32, ETP 1 on 256 GPUs (dp 16)
    strategy = Strategy(tp=2, pp=8, dp=16, ep=32, etp=1, sequence_parallel=True)
    assert strategy.expert_replicas == 1
    with pytest.raises(InputError, match="`ep` must divide dp \\* cp"):
        Strategy(tp=2, pp=8, dp=16, ep=32)


@pytest.mark.parametrize(("fields", "message"), [
    ({"tp": 4, "dp": 4, "ep": 2, "etp": 2, "sequence_parallel": True}, "`etp` must be 1 or tp = 4"),
    ({"tp": 2, "dp": 3, "ep": 4, "etp": 1, "sequence_parallel": True}, "`ep` \\* `etp` = 4\\*1 must divide"),
    ({"tp": 2, "dp": 4, "ep": 2, "etp": 0}, "`etp` must be an integer >= 1"),
])
def test_illegal_expert_degrees_are_one_line_errors(fields, message):
    with pytest.raises(InputError, match=message):
        Strategy(**fields)


@pytest.mark.parametrize("etp", [1, 4])
def test_routed_flop_and_held_experts_per_device(etp):
    # per device: b s k etp / t copies through f_e / etp wide experts: 3 x 2 b s k h f_e / t flop
    # whatever etp, and E / ep experts of 3 h f_e / etp parameters each
    t, ep, b = 4, 8, 2
    strategy = Strategy(tp=t, dp=8, ep=ep, etp=etp, microbatch_size=b, sequence_parallel=True, precision="bf16")
    h, f, k, e = QWEN.hidden_size, QWEN.expert_ffn_hidden_size, QWEN.experts_per_token, QWEN.num_experts
    routed = [op for op in moe_mlp(QWEN, strategy) if op.expert]
    assert sum(op.flops for op in routed) == pytest.approx(3 * 2 * b * QWEN.sequence_length * k * h * f / t)
    assert sum(op.parameter_bytes for op in routed) == pytest.approx(2 * e / ep * 3 * h * f / etp)


def test_etp_below_tp_needs_sequence_parallelism():
    with pytest.raises(InputError, match="`etp` = 1 below tp = 2 needs sequence_parallel"):
        build_stage_costs(QWEN, H100, Strategy(tp=2, dp=8, ep=8, etp=1, global_batch_size=8))


def test_the_dispatch_volume_is_each_ranks_sequence_share_whatever_etp():
    # b s k h / t elements each way per device (its sequence-parallel share of the tokens)
    b, t = 1, 2
    size = b * QWEN.sequence_length * QWEN.experts_per_token * QWEN.hidden_size * 2 / t
    for etp in (1, 2):
        strategy = Strategy(tp=t, dp=8, ep=8, etp=etp, microbatch_size=b, sequence_parallel=True, precision="bf16")
        assert [(c.kind, c.size_bytes, c.count) for c in expert_parallel_collectives(QWEN, strategy)] == \
            [("all_to_all", size, 2)]


def test_etp_1_drops_the_mlp_tensor_parallel_pair_of_an_moe_layer():
    # attention's all-gather and reduce-scatter remain; the experts take each rank's own tokens
    strategy = Strategy(tp=2, dp=8, ep=8, etp=1, sequence_parallel=True, precision="bf16")
    counts = {c.kind: c.count for c in transformer_layer_collectives(QWEN, strategy, moe=True)}
    assert counts == {"all_gather": 1, "reduce_scatter": 1}
    dense = {c.kind: c.count for c in transformer_layer_collectives(QWEN, strategy, moe=False)}
    assert dense == {"all_gather": 2, "reduce_scatter": 2}


def test_etp_tp_gathers_the_k_token_copies_over_the_tensor_parallel_group():
    # Megatron-Core's alltoall dispatcher with expert TP = tp = 2: attention's b s h pair, then
    # an all-gather of the b s k h received copies and a reduce-scatter of the experts' outputs
    b, t = 2, 2
    strategy = Strategy(tp=t, dp=8, ep=4, microbatch_size=b, sequence_parallel=True, precision="bf16")
    bsh = b * QWEN.sequence_length * QWEN.hidden_size * 2
    kinds = [(c.kind, c.size_bytes, c.count) for c in transformer_layer_collectives(QWEN, strategy, moe=True)]
    assert kinds == [("all_gather", bsh, 1), ("reduce_scatter", bsh, 1),
                     ("all_gather", bsh * QWEN.experts_per_token, 1),
                     ("reduce_scatter", bsh * QWEN.experts_per_token, 1)]


def test_expert_states_shard_over_tp_cp_dp_over_ep_etp():
    # zero_stage 1, Adam bf16: a device's routed-expert optimizer states (12 bytes a parameter)
    # over tp dp / (ep etp) = 2 * 8 / (4 * 1) = 4 ranks
    strategy = Strategy(tp=2, dp=8, ep=4, etp=1, zero_stage=1, precision="bf16", sequence_parallel=True,
                        global_batch_size=8)
    stage = build_stage_costs(QWEN, H100, strategy)[0]
    experts = QWEN.num_moe_layers * 3 * QWEN.hidden_size * QWEN.expert_ffn_hidden_size * QWEN.num_experts / 4
    dense = stage.parameters - experts
    assert stage.memory.optimizer_bytes == pytest.approx(12 * (dense / 8 + experts / 4))
    assert [(c.kind, c.size_bytes) for c in stage.expert_dp_collectives] == \
        [("reduce_scatter", 2 * experts), ("all_gather", 2 * experts)]
