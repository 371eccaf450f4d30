"""Mixture-of-Experts layers and multi-head latent attention: parameter counts against the model
cards, flops of an MoE layer, expert memory under ZeRO and expert parallelism, loader checks."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from simulator import load_hardware, load_model
from simulator.errors import InputError
from simulator.strategy import Strategy
from simulator.workload import parameter_count
from simulator.workload.memory import sharded_state_bytes
from simulator.workload.operators import kv_cache_bytes, moe_mlp, transformer_layer
from simulator.workload.stages import build_stage_costs

H100 = load_hardware("h100-cluster")

PUBLISHED = [
    # (preset, total, active, tolerance): model cards
    ("Mixtral-8x7B", 46.7e9, 12.9e9, 0.01),      # Jiang et al. 2024, "Mixtral of Experts", §1/§2
    ("Qwen3-30B-A3B", 30.5e9, 3.3e9, 0.02),      # Qwen3 Technical Report, arXiv 2505.09388, Table 2
    ("Qwen3-235B-A22B", 235e9, 22e9, 0.02),      # same table
    ("DeepSeek-V3", 671e9, 37e9, 0.02),          # DeepSeek-V3 Technical Report, arXiv 2412.19437, §1, §4.2
    ("Llama-3.1-405B", 405e9, 405e9, 0.01),      # Dubey et al. 2024, Table 3
]


@pytest.mark.parametrize(("name", "total", "active", "tolerance"), PUBLISHED)
def test_parameter_counts_match_the_model_cards(name, total, active, tolerance):
    count = parameter_count(load_model(name))
    assert count.total == pytest.approx(total, rel=tolerance)
    assert count.active == pytest.approx(active, rel=tolerance)


def test_gpt_oss_counts_match_its_card_without_the_embedding_table():
    # gpt-oss model card (arXiv 2508.10925) Table 1: 116.83B total, 5.13B active; the active
    # count includes the unembedding but not the embedding table. Biases and sinks are not modelled.
    count = parameter_count(load_model("GPT-OSS-120B"))
    assert count.total == pytest.approx(116.83e9, rel=0.002)
    assert count.active - count.embedding == pytest.approx(5.13e9, rel=0.002)


def test_dense_models_are_all_active():
    count = parameter_count(load_model("Llama-3.1-8B"))
    assert count.active == count.total == pytest.approx(8.03e9, rel=0.001)  # meta-llama/Llama-3.1-8B: 8.03B


def test_an_moe_layer_costs_k_experts_per_token():
    # forward GEMM flop of an MoE layer per token, beyond attention: router 2hE, k routed
    # SwiGLU experts 3 x 2 h f_e each (Shazeer et al. ICLR'17; Fedus et al. JMLR'22)
    model = load_model("Mixtral-8x7B")
    strategy = Strategy(microbatch_size=2, precision="bf16")
    tokens = 2 * model.sequence_length
    h, f, k, e = model.hidden_size, model.expert_ffn_hidden_size, model.experts_per_token, model.num_experts
    flops = sum(op.flops for op in moe_mlp(model, strategy) if op.kind == "gemm")
    assert flops == tokens * (2 * h * e + k * 3 * 2 * h * f)


def test_the_busiest_experts_scale_the_expert_time_not_the_model_flops():
    model = load_model("Qwen3-30B-A3B")
    strategy = Strategy(dp=8, ep=8, precision="bf16", zero_stage=1, global_batch_size=8)
    balanced = build_stage_costs(model, H100, strategy)[0]
    skewed = build_stage_costs(dataclasses.replace(model, expert_load_imbalance=2.0), H100, strategy)[0]
    assert skewed.model_flops_per_microbatch == balanced.model_flops_per_microbatch
    assert skewed.forward.compute_s > balanced.forward.compute_s


def test_a_dense_layer_of_deepseek_precedes_its_moe_layers():
    model = load_model("DeepSeek-V3")
    assert [model.is_moe_layer(i) for i in range(5)] == [False, False, False, True, True]
    assert model.num_moe_layers == 58
    names = {op.name for op in transformer_layer(model, Strategy(), moe=False)}
    assert "mlp_gate" in names and "router" not in names


def test_expert_parallelism_splits_the_experts_held():
    model = load_model("Qwen3-30B-A3B")
    held = [sum(op.parameter_bytes for op in moe_mlp(model, Strategy(dp=8, ep=ep)) if op.expert) for ep in (1, 8)]
    assert held[0] == 8 * held[1] == 2 * model.num_experts * 3 * model.hidden_size * model.expert_ffn_hidden_size


@pytest.mark.parametrize("zero_stage", [0, 1, 2, 3])
def test_expert_states_shard_over_the_expert_replicas(zero_stage):
    # ZeRO divides states by dp cp; a device's experts shard over the dp cp / ep ranks holding them
    dp, ep = 8, 4 if zero_stage < 3 else 1
    strategy = Strategy(dp=dp, ep=ep, zero_stage=zero_stage)
    dense = sharded_state_bytes(1e6, strategy)
    experts = sharded_state_bytes(1e6, strategy, expert=True)
    ratio = dp / (dp // ep)
    assert experts.optimizer_bytes == pytest.approx(dense.optimizer_bytes * (ratio if zero_stage >= 1 else 1))
    assert experts.gradients_bytes == pytest.approx(dense.gradients_bytes * (ratio if zero_stage >= 2 else 1))


def test_a_stage_holds_its_experts_states_sharded_over_the_expert_replicas():
    model = load_model("Qwen3-30B-A3B")
    strategy = Strategy(dp=8, ep=8, zero_stage=1, precision="bf16", global_batch_size=8)
    stage = build_stage_costs(model, H100, strategy)[0]
    experts = model.num_moe_layers * 3 * model.hidden_size * model.expert_ffn_hidden_size * model.num_experts / 8
    dense = stage.parameters - experts
    # Adam bf16: 12 optimizer bytes per parameter; dense ones shard over 8 ranks, experts over 8 / 8 = 1
    assert stage.memory.optimizer_bytes == pytest.approx(12 * (dense / 8 + experts))
    assert stage.memory.weights_bytes == pytest.approx(2 * stage.parameters)


def test_latent_attention_caches_the_compressed_latent():
    # DeepSeek-V2 §2.1.2: (d_c + d_rope) elements per token and layer, whatever the heads
    model = load_model("DeepSeek-V3")
    strategy = Strategy(mode="inference", tp=8, microbatch_size=4, decode_context_length=1000, precision="bf16")
    assert kv_cache_bytes(model, strategy) == 4 * 1000 * (512 + 64) * 2


def test_dense_models_have_no_expert_collectives():
    stage = build_stage_costs(load_model("LLaMA2-7B"), H100, Strategy(dp=8, global_batch_size=8))[0]
    assert stage.forward.ep_collectives == () and stage.expert_dp_collectives == ()


def _model_file(tmp_path: Path, extra: str) -> Path:
    path = tmp_path / "m.toml"
    path.write_text('[model]\nsource = "test"\narchitecture = "llama"\nnum_layers = 4\nhidden_size = 64\n'
                    'num_heads = 4\nffn_hidden_size = 128\nsequence_length = 16\nvocab_size = 100\n'
                    f'global_batch_size = 8\n{extra}')
    return path


@pytest.mark.parametrize(("extra", "message"), [
    ("experts_per_token = 2\n", "key 'experts_per_token' needs num_experts > 0"),
    ("num_experts = 4\nexpert_ffn_hidden_size = 32\n", "missing key 'experts_per_token'"),
    ("num_experts = 4\nexperts_per_token = 8\nexpert_ffn_hidden_size = 32\n", "at most num_experts 4, got 8"),
    ("kv_lora_rank = 16\nqk_nope_head_dim = 8\nqk_rope_head_dim = 8\n", "missing key 'v_head_dim'"),
    ("num_experts = 4\nexperts_per_token = 1\nexpert_ffn_hidden_size = 32\nexpert_load_imbalance = 0.5\n",
     "'expert_load_imbalance' must be"),
])
def test_bad_expert_keys_are_one_line_errors(tmp_path, extra, message):
    with pytest.raises(InputError, match=message):
        load_model(_model_file(tmp_path, extra))


def test_ep_must_divide_the_experts_and_the_replicas():
    model = load_model("Mixtral-8x7B")
    with pytest.raises(InputError, match="`ep` = 3 must divide the 8 routed experts"):
        build_stage_costs(model, H100, Strategy(dp=3, ep=3, global_batch_size=3))
    with pytest.raises(InputError, match="`ep` must divide dp \\* cp"):
        Strategy(dp=6, ep=4)
    with pytest.raises(InputError, match="1 for a dense model"):
        build_stage_costs(load_model("LLaMA2-7B"), H100, Strategy(dp=2, ep=2, global_batch_size=2))
