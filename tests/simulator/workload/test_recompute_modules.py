"""Selective recompute of Megatron-Core's ``recompute_modules``: what each drops from a layer's
stash (closed forms of Korthikanti's terms), what it re-runs, and the plans it refuses."""

from __future__ import annotations

import dataclasses

import pytest

from simulator import InputError, Strategy, load_hardware, load_model, load_stack, simulate
from simulator.strategy import RECOMPUTE_MODULES
from simulator.workload import memory
from simulator.workload.operators import RECOMPUTED_OPERATORS
from simulator.workload.stages import build_stage_costs

QWEN = load_model("Qwen3-30B-A3B")      # h 2048, 128 experts, top-8, f_e 768
DEEPSEEK = load_model("DeepSeek-V3")    # MLA, a shared expert, three dense layers first
LLAMA = load_model("Llama-3.1-8B")      # dense: f 14336
H100 = load_hardware("h100-cluster")


def _selective(modules: str, **fields) -> Strategy:
    return Strategy(recompute="selective", recompute_modules=modules, microbatch_size=1, attention="fused", **fields)


def _drop(model, modules: str, moe: bool, **fields) -> float:
    """Bytes per s b h the modules take off the default selective recompute's stash."""
    base = memory.layer_activation_bytes(model, _selective("core_attn", **fields), moe)
    sbh = model.sequence_length * model.hidden_size
    return (base - memory.layer_activation_bytes(model, _selective(modules, **fields), moe)) / sbh


@pytest.mark.parametrize("sequence_parallel", [False, True])
def test_layernorm_drops_the_two_norm_outputs(sequence_parallel):
    tp = 2
    fields = dict(tp=tp, sequence_parallel=sequence_parallel)
    unsplit = 1 / tp if sequence_parallel else 1
    assert _drop(LLAMA, "layernorm", False, **fields) == pytest.approx(4 * unsplit, rel=1e-12)
    # under FP8 the linear layers keep 1-byte copies of them: those are what is left to drop
    assert _drop(LLAMA, "layernorm", False, precision="fp8", **fields) == pytest.approx(2 * unsplit, rel=1e-12)


def test_moe_act_drops_the_routed_experts_activation_outputs():
    k, f_e, h = QWEN.experts_per_token, QWEN.expert_ffn_hidden_size, QWEN.hidden_size
    assert _drop(QWEN, "moe_act", True, tp=2) == pytest.approx(2 * k * f_e / h / 2, rel=1e-12)
    assert _drop(QWEN, "moe_act", True, precision="fp8") == pytest.approx(k * f_e / h, rel=1e-12)
    assert _drop(QWEN, "moe_act", False) == 0.0  # a dense layer has no experts


def test_the_whole_mlp_or_moe_layer_drops_all_its_tensors_but_its_input():
    f, h = LLAMA.ffn_hidden_size, LLAMA.hidden_size
    assert _drop(LLAMA, "mlp", False) == pytest.approx(2 * 3 * f / h, rel=1e-12)  # gate, up, product
    k, f_e = QWEN.experts_per_token, QWEN.expert_ffn_hidden_size
    moe = 2 * (3 * k * f_e / QWEN.hidden_size + k)  # the experts' three tensors and the k permuted copies
    assert _drop(QWEN, "moe", True) == pytest.approx(moe, rel=1e-12)
    assert _drop(QWEN, "moe,moe_act", True) == pytest.approx(moe, rel=1e-12)  # moe takes in moe_act


def test_mla_up_projection_and_shared_experts_drop_their_outputs():
    a, h = DEEPSEEK.num_heads, DEEPSEEK.hidden_size
    qkv = 2 * a * (2 * DEEPSEEK.head_size + DEEPSEEK.value_head_size) / h
    assert _drop(DEEPSEEK, "mla_up_proj", False) == pytest.approx(qkv, rel=1e-12)
    shared = DEEPSEEK.num_shared_experts * DEEPSEEK.shared_expert_size
    assert _drop(DEEPSEEK, "shared_experts", True) == pytest.approx(6 * shared / h, rel=1e-12)


def test_every_recompute_module_names_the_operators_it_reruns():
    assert set(RECOMPUTED_OPERATORS) == set(RECOMPUTE_MODULES)
    assert all(RECOMPUTED_OPERATORS[m] for m in RECOMPUTE_MODULES)


def test_recompute_modules_rerun_their_operators_and_moe_its_all_to_alls():
    fields = dict(dp=8, ep=8, global_batch_size=64, zero_stage=1)
    default = build_stage_costs(QWEN, H100, _selective("core_attn", **fields))[0]
    norms = build_stage_costs(QWEN, H100, _selective("layernorm,moe_act", **fields))[0]
    layer = build_stage_costs(QWEN, H100, _selective("moe", **fields))[0]
    assert default.backward.compute_s < norms.backward.compute_s < layer.backward.compute_s
    assert norms.forward == default.forward
    exchanged = [sum(c.count for c in cost.backward.tp_collectives if c.kind == "all_to_all")
                 for cost in (default, layer)]
    assert exchanged[1] == exchanged[0] * 3 // 2  # the backward's two all-to-alls and the recompute's two


@pytest.mark.parametrize(("model", "modules", "message"), [
    (LLAMA, "moe_act", "names 'moe_act', which needs Mixture-of-Experts layers"),
    (QWEN, "shared_experts", "names 'shared_experts', which needs shared experts"),
    (LLAMA, "mla_up_proj", "names 'mla_up_proj', which needs multi-head latent attention"),
])
def test_a_module_the_model_lacks_is_refused(model, modules, message):
    with pytest.raises(InputError, match=message):
        simulate(model, H100, _selective(modules, dp=8, global_batch_size=8))


@pytest.mark.parametrize(("fields", "message"), [
    ({"recompute_modules": "layernorm"}, "needs recompute 'selective', got 'none'"),
    ({"recompute": "selective", "recompute_modules": "layernorm,attention"}, "must be a comma-separated list"),
    ({"recompute": "selective", "recompute_modules": ""}, "must be a comma-separated list"),
])
def test_bad_recompute_modules_are_one_line_errors(fields, message):
    with pytest.raises(InputError, match=message):
        Strategy(**fields)


def test_the_torchtitan_stack_keeps_its_own_policy():
    with pytest.raises(InputError, match="recomputes by its own policy"):
        simulate(LLAMA, H100, _selective("layernorm", dp=8, global_batch_size=8), stack=load_stack("torchtitan-fsdp2"))


def test_gpt_oss_fits_more_with_its_recipes_recompute():
    gpt_oss = load_model("GPT-OSS-120B")
    plan = Strategy(pp=4, dp=16, ep=8, microbatch_size=1, global_batch_size=1280, zero_stage=1, attention="fused",
                    partition="uniform")
    without = simulate(gpt_oss, H100, plan)
    recipe = simulate(gpt_oss, H100, dataclasses.replace(plan, recompute="selective",
                                                         recompute_modules="layernorm,moe_act"))
    assert recipe.stages[0].memory_bytes < without.stages[0].memory_bytes
    assert recipe.iteration_time_s > without.iteration_time_s
