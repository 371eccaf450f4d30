"""Fused attention (FlashAttention): closed forms of its flops, time and memory, and where it applies."""

from __future__ import annotations

import dataclasses

import pytest
from workload_fixtures import gpt

from simulator import load_hardware, load_model, simulate
from simulator.errors import InputError
from simulator.legality import attention_of
from simulator.strategy import Strategy
from simulator.workload.memory import layer_activation_bytes
from simulator.workload.operators import transformer_layer
from simulator.workload.roofline import FUSED_ATTENTION_BACKWARD, _pass_times, peak_flop_per_s

H100 = load_hardware("h100-cluster")
MODEL = gpt(layers=4, hidden=1024, heads=8, sequence=8192)


CORE = {"attention_scores", "attention_softmax", "attention_dropout", "attention_values", "fused_attention"}


def _core(strategy: Strategy) -> list:
    return [op for op in transformer_layer(MODEL, strategy) if op.name in CORE]


def test_the_fused_kernel_does_the_two_products_arithmetic_without_the_scores_in_memory():
    unfused = _core(Strategy(tp=2, attention="unfused"))
    [fused] = _core(Strategy(tp=2, attention="fused"))
    b, s, h, t = 1, MODEL.sequence_length, MODEL.hidden_size, 2
    assert fused.flops == pytest.approx(sum(op.flops for op in unfused if op.kind == "gemm"))
    assert fused.flops == pytest.approx(4 * b * s * s * h / t)
    assert fused.executed_fraction == 0.5  # a causal decoder skips the masked half
    assert fused.input_bytes + fused.output_bytes == pytest.approx(4 * b * s * h / t * 2)  # Q, K, V in, O out


def test_its_time_is_the_executed_flops_at_the_kernels_efficiency():
    strategy = Strategy(tp=2, attention="fused", precision="bf16")
    [fused] = _core(strategy)
    peak = peak_flop_per_s(H100, strategy)
    forward, backward = _pass_times([fused], H100, peak)
    efficiency = H100.calibration.fused_attention_efficiency
    backward_efficiency = H100.calibration.fused_attention_backward_efficiency
    assert backward_efficiency is not None and backward_efficiency < efficiency  # FlashAttention-2 on H100
    overhead = H100.calibration.kernel_overhead_s
    assert forward == pytest.approx(fused.flops * 0.5 / (peak * efficiency) + overhead)
    assert backward == pytest.approx(FUSED_ATTENTION_BACKWARD * fused.flops * 0.5 / (peak * backward_efficiency)
                                     + overhead)
    # a hardware stating no backward figure runs the backward at the forward's
    same = dataclasses.replace(H100, calibration=dataclasses.replace(H100.calibration,
                                                                     fused_attention_backward_efficiency=None))
    assert _pass_times([fused], same, peak)[1] == pytest.approx(
        FUSED_ATTENTION_BACKWARD * fused.flops * 0.5 / (peak * efficiency) + overhead)


def test_fused_attention_stashes_what_selective_recompute_stashes():
    for sp in (False, True):
        fused = layer_activation_bytes(MODEL, Strategy(tp=4, sequence_parallel=sp, attention="fused"))
        selective = layer_activation_bytes(MODEL, Strategy(tp=4, sequence_parallel=sp, recompute="selective",
                                                           attention="unfused"))
        unfused = layer_activation_bytes(MODEL, Strategy(tp=4, sequence_parallel=sp, attention="unfused"))
        s, b, h, a, t = MODEL.sequence_length, 1, MODEL.hidden_size, MODEL.num_heads, 4
        assert fused == pytest.approx(selective)
        assert unfused - fused == pytest.approx(5 * a * s / (h * t) * s * b * h)


def test_auto_is_fused_where_the_hardware_states_the_kernel_and_unfused_elsewhere():
    llama = load_model("LLaMA2-7B")
    assert attention_of(llama, H100, Strategy()) == "fused"
    assert attention_of(llama, load_hardware("a100-cluster"), Strategy()) == "unfused"  # the 2021 suites ran unfused
    assert attention_of(llama, load_hardware("wafer"), Strategy()) == "unfused"
    for name in ("a100-cluster", "wafer"):
        with pytest.raises(InputError, match="attention 'fused'"):
            attention_of(llama, load_hardware(name), Strategy(attention="fused"))


def test_fusing_pays_more_the_longer_the_sequence():
    # Against Megatron's unfused attention with selective recompute (the scores recomputed, not
    # stashed), which fits the same memory.
    speedups = []
    for sequence in (2048, 8192, 32768):
        model = dataclasses.replace(load_model("LLaMA2-7B"), sequence_length=sequence)
        base = Strategy(tp=8, dp=8, global_batch_size=64, precision="bf16", zero_stage=1, sequence_parallel=True)
        fused = simulate(model, H100, base.with_fields(attention="fused"))
        unfused = simulate(model, H100, base.with_fields(attention="unfused", recompute="selective"))
        assert fused.feasible and unfused.feasible  # unfused keeps the scores only with selective recompute
        speedups.append(fused.samples_per_s / unfused.samples_per_s)
    assert 1.0 < speedups[0] < speedups[1] < speedups[2]
