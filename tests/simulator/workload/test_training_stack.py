"""What a training stack changes in a layer's work: torchtitan's per-op selective checkpointing
(what it re-runs, re-gathers and stashes), eager kernels' element-wise traffic, and FSDP2's
float32 gradient reduction; each against its closed form."""

from __future__ import annotations

import dataclasses

import pytest

from simulator import MEGATRON_CORE, Strategy, load_hardware, load_model, load_stack
from simulator.workload import memory, operators
from simulator.workload.roofline import operator_s, peak_flop_per_s
from simulator.workload.stages import _build_units, build_stage_costs

H100 = load_hardware("h100-cluster")
LLAMA = dataclasses.replace(load_model("Llama-3.1-8B"), num_layers=2, sequence_length=1024, global_batch_size=4)
TITAN, EAGER = load_stack("torchtitan-fsdp2"), load_stack("torchtitan-fsdp2-eager")
SAC = Strategy(dp=2, microbatch_size=2, global_batch_size=4, zero_stage=3, recompute="selective",
               attention="fused")
SAC_TP = dataclasses.replace(SAC, tp=2, sequence_parallel=True)


def _layer(strategy: Strategy, stack=TITAN):
    return _build_units(LLAMA, H100, strategy, False, stack).items[0][1]


@pytest.mark.parametrize("strategy", [SAC, SAC_TP])
def test_alternate_matmuls_recompute_wk_wo_and_w3(strategy):
    # torchtitan's _save_list saves every second aten.mm of wq wk wv wo w1 w3 w2: wk, wo, w3 re-run,
    # 2 b s (h h_kv + h h + h f) / t flop
    b, s, h, t = strategy.microbatch_size, LLAMA.sequence_length, LLAMA.hidden_size, strategy.tp
    expected = 2 * b * s * (h * LLAMA.kv_hidden_size + h * h + h * LLAMA.ffn_hidden_size) / t
    assert _layer(strategy).recompute_gemm_flops == pytest.approx(expected, rel=1e-12)
    assert _layer(strategy, MEGATRON_CORE).recompute_gemm_flops == 0.0  # the attention core, fused: nothing


def test_alternate_matmuls_re_run_every_element_wise_operator_but_the_layers_output():
    recomputed = {op.name for op in _layer(SAC).recomputed if op.kind == "memory"}
    assert recomputed == {"input_norm", "rope", "attention_dropout_residual", "mlp_norm", "silu_multiply"}


def test_alternate_matmuls_re_gather_the_sequence_parallel_inputs():
    # the all-gathers before wq..wv and w1/w3 are not in _save_list: the recompute runs them again
    layer = _layer(SAC_TP)
    forward_gathers = [c for c in layer.forward_collectives if c.kind == "all_gather"]
    regathered = [c for c in layer.backward_collectives if c.kind == "all_gather"]
    assert sum(c.count for c in regathered) == 2 * sum(c.count for c in forward_gathers) == 4


@pytest.mark.parametrize("strategy, per_sbh", [
    # 2 bytes x (input h, wq h, wv h_kv, attention h, w1 f, w2 h) / h = 2 (4 + 1/4 + 3.5)
    (SAC, 15.5),
    # with TP 2 and SP: input h/2, wq h/2, wv h_kv/2, attention h/2, w1 f/2, w2 partial sums h, 2 reduce-scatters h/2
    (SAC_TP, 2 * (0.5 + 0.5 + 0.125 + 0.5 + 1.75 + 1 + 1)),
])
def test_alternate_matmuls_stash_what_they_save(strategy, per_sbh):
    sbh = strategy.microbatch_size * LLAMA.sequence_length * LLAMA.hidden_size
    assert memory.alternate_matmuls_saved_per_sbh(LLAMA, strategy) == pytest.approx(per_sbh, rel=1e-12)
    assert _layer(strategy).activation_bytes == pytest.approx(per_sbh * sbh, rel=1e-12)


def test_eager_kernels_move_the_bytes_the_stack_counts():
    # norm 36, SwiGLU 10, RoPE 20 bytes per output element (torchtitan's code at 9dec370, counted)
    b, s, h = SAC.microbatch_size, LLAMA.sequence_length, LLAMA.hidden_size
    ops = {op.name: op for op in _layer(SAC, EAGER).ops}
    moved = {name: op.input_bytes + op.weight_bytes + op.output_bytes for name, op in ops.items()}
    assert moved["input_norm"] == pytest.approx(36 * b * s * h, rel=1e-12)
    assert moved["silu_multiply"] == pytest.approx(10 * b * s * LLAMA.ffn_hidden_size, rel=1e-12)
    assert moved["rope"] == pytest.approx(20 * b * s * (h + LLAMA.kv_hidden_size), rel=1e-12)
    bandwidth = H100.memory.operand_bandwidth_bytes_per_s * H100.calibration.memory_bound_efficiency
    peak = peak_flop_per_s(H100, SAC)
    assert operator_s(ops["input_norm"], 1.0, 1, H100, peak) == pytest.approx(
        36 * b * s * h / bandwidth + H100.calibration.kernel_overhead_s, rel=1e-12)


def test_compiled_blocks_keep_the_fused_kernels_and_the_eager_loss():
    # inside torch.compile'd blocks the norms and SwiGLU move what Megatron-Core's fused kernels do;
    # the loss (eager at 9dec370) reads bfloat16 logits into float32: 14 bytes per logit
    fused = {op.name: op for op in _layer(SAC, MEGATRON_CORE).ops}
    compiled = {op.name: op for op in _layer(SAC, TITAN).ops}
    assert compiled["input_norm"] == fused["input_norm"] and compiled["silu_multiply"] == fused["silu_multiply"]
    assert "rope" in compiled and "rope" not in fused
    logits = {op.name: op for op in _build_units(LLAMA, H100, SAC, False, TITAN).last.ops}["cross_entropy"]
    assert logits.input_bytes + logits.output_bytes == pytest.approx(
        14 * SAC.microbatch_size * LLAMA.sequence_length * LLAMA.vocab_size, rel=1e-12)


def test_rope_is_only_for_rotary_positions():
    gpt = dataclasses.replace(LLAMA, architecture="gpt")
    assert not any(op.name == "rope" for op in operators.with_traffic(
        operators.transformer_layer(gpt, SAC), gpt, SAC, EAGER.elementwise_bytes))


def test_float32_reduction_doubles_the_reduce_scatter_bytes():
    bf16 = dataclasses.replace(TITAN, zero3_reduction_format=None)
    [fp32_stage] = build_stage_costs(LLAMA, H100, SAC, TITAN)
    [bf16_stage] = build_stage_costs(LLAMA, H100, SAC, bf16)

    def reduced(stage):
        return sum(c.count * c.size_bytes for c in stage.backward.replica_collectives
                   + stage.backward.exposed_dp_collectives if c.kind == "reduce_scatter")

    assert reduced(fp32_stage) == pytest.approx(2 * reduced(bf16_stage), rel=1e-12) and reduced(bf16_stage) > 0
