"""Precision ``fp8`` (Transformer Engine): which GEMMs run in FP8 and at what rate, the memory it
saves and adds, and where it is legal."""

from __future__ import annotations

import dataclasses

import pytest
from workload_fixtures import gpt

from simulator import load_hardware, load_model, simulate
from simulator.errors import InputError
from simulator.strategy import Strategy
from simulator.workload.memory import FP8_WEIGHT_COPY_BYTES, layer_activation_bytes
from simulator.workload.operators import transformer_layer
from simulator.workload.roofline import operator_s, peak_flop_per_s
from simulator.workload.stages import build_stage_costs

H100 = load_hardware("h100-cluster")
MODEL = gpt(layers=4, hidden=4096, heads=32, sequence=2048)
LINEAR = {"qkv", "attention_projection", "mlp_in", "mlp_out"}


def _ops(precision: str, **fields) -> dict:
    return {op.name: op for op in transformer_layer(MODEL, Strategy(tp=2, precision=precision, **fields))}


def test_only_the_linear_layers_gemms_run_in_fp8():
    fp8, bf16 = _ops("fp8", attention="unfused"), _ops("bf16", attention="unfused")
    assert {name for name, op in fp8.items() if op.fp8} == LINEAR
    # the attention core's GEMMs stay bf16 (TE's default), and every operator moves bf16 bytes
    assert not fp8["attention_scores"].fp8 and not fp8["attention_values"].fp8
    for name, op in fp8.items():
        assert (op.flops, op.input_bytes, op.weight_bytes, op.output_bytes) == \
            (bf16[name].flops, bf16[name].input_bytes, bf16[name].weight_bytes, bf16[name].output_bytes)


def test_an_fp8_gemm_runs_at_the_fp8_peak_and_efficiency_and_the_rest_as_bf16():
    fp8, bf16 = _ops("fp8", attention="fused"), _ops("bf16", attention="fused")
    cal, compute = H100.calibration, H100.compute
    peak = peak_flop_per_s(H100, Strategy(precision="fp8"))
    assert peak == H100.compute.peak_flop_per_s["bf16"]
    op = fp8["mlp_in"]
    rate = H100.compute.peak_flop_per_s["fp8"] * cal.fp8_gemm_efficiency * compute.gemm_efficiency(op.rows, op.columns)
    assert operator_s(op, 1.0, 1, H100, peak) == pytest.approx(op.flops / rate + cal.kernel_overhead_s)
    for name in ("fused_attention", "input_norm", "gelu"):
        assert operator_s(fp8[name], 1.0, 1, H100, peak) == operator_s(bf16[name], 1.0, 1, H100, peak)


def test_fp8_keeps_each_linear_input_at_one_byte():
    # Korthikanti's linear inputs: QKV and MLP-in 2sbh (2sbh/t with SP), projection 2sbh/t, MLP-out 2f/h sbh/t
    s, b, h, f, t = MODEL.sequence_length, 2, MODEL.hidden_size, MODEL.ffn_hidden_size, 4
    for sp, shared in ((False, 2.0), (True, 2.0 / t)):
        fields = {"tp": t, "microbatch_size": b, "sequence_parallel": sp, "attention": "fused"}
        saved = (layer_activation_bytes(MODEL, Strategy(precision="bf16", **fields))
                 - layer_activation_bytes(MODEL, Strategy(precision="fp8", **fields)))
        assert saved == pytest.approx(s * b * h * (shared + (1 + f / h) / t))
    full = {"tp": t, "recompute": "full"}
    assert layer_activation_bytes(MODEL, Strategy(precision="fp8", **full)) == \
        layer_activation_bytes(MODEL, Strategy(precision="bf16", **full))


@pytest.mark.parametrize("zero, dp", [(1, 4), (3, 4)])
def test_fp8_caches_an_fp8_weight_and_its_transpose(zero, dp):
    strategy = Strategy(dp=dp, zero_stage=zero, global_batch_size=8)
    [fp8] = build_stage_costs(MODEL, H100, strategy.with_fields(precision="fp8"))
    [bf16] = build_stage_costs(MODEL, H100, strategy.with_fields(precision="bf16"))
    h, f = MODEL.hidden_size, MODEL.ffn_hidden_size
    linear = MODEL.num_layers * (4 * h * h + 2 * h * f + 3 * h + h + f + h)  # weights and biases
    added = fp8.memory.weights_bytes - bf16.memory.weights_bytes
    assert added == pytest.approx(linear * FP8_WEIGHT_COPY_BYTES / (dp if zero == 3 else 1))
    assert (fp8.memory.gradients_bytes, fp8.memory.optimizer_bytes) == \
        (bf16.memory.gradients_bytes, bf16.memory.optimizer_bytes)


def test_fp8_needs_an_fp8_peak_and_gemm_efficiency():
    with pytest.raises(InputError, match="precision 'fp8' has no peak"):  # an A100 has no FP8 tensor cores
        simulate(MODEL, load_hardware("a100-cluster"), Strategy(precision="fp8"))
    unstated = dataclasses.replace(H100, calibration=dataclasses.replace(H100.calibration, fp8_gemm_efficiency=None))
    with pytest.raises(InputError, match="fp8_gemm_efficiency"):
        simulate(MODEL, unstated, Strategy(precision="fp8"))


def test_fp8_speeds_training_up_by_less_than_its_gemm_speedup():
    # Megatron-LM issue #396 reports 1.42x for a 13B GPT on H100; the GEMMs alone gain
    # (1979 x 0.624) / (989 x 0.803) = 1.56x with their quantization, which the bf16 rest of the
    # step dilutes.
    model = load_model("LLaMA2-7B")
    base = Strategy(tp=1, dp=8, global_batch_size=64, zero_stage=1)
    bf16, fp8 = (simulate(model, H100, base.with_fields(precision=p)) for p in ("bf16", "fp8"))
    gemm = (H100.compute.peak_flop_per_s["fp8"] * H100.calibration.fp8_gemm_efficiency
            / (H100.compute.peak_flop_per_s["bf16"] * H100.calibration.gemm_efficiency))
    assert 1.2 < fp8.samples_per_s / bf16.samples_per_s < gemm


@pytest.mark.parametrize("recipe", ["current", "blockwise"])
def test_a_scaling_recipe_prices_its_fp8_gemms_at_its_stated_efficiency(recipe):
    # a stage's forward is its operators' sum: the FP8 GEMMs' compute (compute-bound at this
    # size) scales by the ratio of the recipes' efficiencies, nothing else moves
    delayed = build_stage_costs(MODEL, H100, Strategy(tp=2, precision="fp8", attention="fused"))[0]
    other = build_stage_costs(MODEL, H100, Strategy(tp=2, precision="fp8", attention="fused", fp8_recipe=recipe))[0]
    ops = _ops("fp8", attention="fused")
    peak = peak_flop_per_s(H100, Strategy(precision="fp8"))
    gemms = sum(operator_s(op, 1.0, 0, H100, peak) for op in ops.values() if op.fp8) * MODEL.num_layers
    ratio = H100.calibration.fp8_gemm_efficiency / H100.calibration.fp8_efficiency(recipe)
    assert ratio > 1.0
    assert other.forward.compute_s - delayed.forward.compute_s == pytest.approx(gemms * (ratio - 1.0), rel=1e-9)


def test_a_recipe_needs_fp8_and_a_stated_efficiency():
    with pytest.raises(InputError, match="`fp8_recipe` 'current' needs precision 'fp8'"):
        Strategy(precision="bf16", fp8_recipe="current")
    with pytest.raises(InputError, match="`fp8_recipe` must be one of"):
        Strategy(precision="fp8", fp8_recipe="mxfp8")
    bare = dataclasses.replace(H100, calibration=dataclasses.replace(H100.calibration,
                                                                     fp8_current_scaling_gemm_efficiency=None))
    with pytest.raises(InputError, match="states no fp8_current_scaling_gemm_efficiency"):
        simulate(MODEL, bare, Strategy(tp=2, precision="fp8", fp8_recipe="current"))
