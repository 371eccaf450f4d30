"""A serving stack's per-class weight formats, math fidelities, KV-cache format and small-M GEMM
tiles (simulator.stacks.spec.Serving, simulator.workload.formats): closed forms of the bytes held
and read, the loader's one-line errors, and a stack without serving keys changing nothing."""

from __future__ import annotations

import dataclasses

import pytest

from simulator import MEGATRON_CORE, InputError, ModelSpec, Strategy, load_hardware, load_stack, simulate
from simulator.stacks.spec import Serving
from simulator.strategy import BYTES_PER_ELEMENT, FORMAT_BYTES
from simulator.workload import formats, operators
from simulator.workload.roofline import format_peak_flop_per_s
from simulator.workload.stages import build_stage_costs

H100 = load_hardware("h100-cluster")
N150 = load_hardware("wormhole-n150")
TRT = load_stack("tensorrt-llm-fp8")
TT = load_stack("tt-transformers-performance")
LLAMA = ModelSpec(name="llama-small", architecture="llama", num_layers=4, hidden_size=1024, num_heads=16,
                  num_kv_heads=4, ffn_hidden_size=2816, sequence_length=2048, vocab_size=32000, global_batch_size=8)
H, KV, F, V, L = 1024, 256, 2816, 32000, 4
"""The model's hidden, keys' width (4 heads of 64), FFN, vocabulary and layers."""


def _decode(tp: int = 1, precision: str = "fp8", context: int = 1000, users: int = 8) -> Strategy:
    return Strategy(tp=tp, microbatch_size=users, global_batch_size=users, mode="inference", precision=precision,
                    prompt_length=512, decode_context_length=context)


def _write(tmp_path, body: str):
    path = tmp_path / "serve.toml"
    path.write_text(body)
    return path


@pytest.mark.parametrize("stack, precision, tp", [(TRT, "fp8", 2), (TT, "bfloat8_b", 1), (MEGATRON_CORE, "bf16", 2)])
def test_kv_cache_bytes_are_the_closed_form_in_the_stacks_format(stack, precision, tp):
    # 2 x layers x kv_heads x head_size x context x users x bytes(KV format), over the TP group
    hardware = N150 if stack is TT else H100
    [stage] = build_stage_costs(LLAMA, hardware, _decode(tp, precision), stack)
    kv_format = stack.serving.kv_cache_format or precision
    assert stage.memory.kv_cache_bytes == pytest.approx(2 * L * 4 * 64 * 1000 * 8 * FORMAT_BYTES[kv_format] / tp,
                                                        rel=1e-12)


def _layer_weight_bytes(stack, precision: str, tp: int = 1) -> float:
    ops = operators.transformer_layer(LLAMA, _decode(tp, precision))
    hardware = N150 if stack is TT else H100
    return sum(op.weight_bytes for op in formats.serve(ops, LLAMA, hardware, _decode(tp, precision), stack))


def test_a_decode_steps_weight_traffic_is_each_classes_parameters_at_its_format():
    # attention h (h + 2 kv) + h h, mlp_in 2 h f, mlp_out f h, the two RMSNorms' 2 h at the precision
    bf8, bf4 = BYTES_PER_ELEMENT["bfloat8_b"], BYTES_PER_ELEMENT["bfloat4_b"]
    expected = (H * (H + 2 * KV) + H * H) * bf8 + 2 * H * F * bf4 + F * H * bf8 + 2 * H * bf8
    assert _layer_weight_bytes(TT, "bfloat8_b") == pytest.approx(expected, rel=1e-12)
    tp2 = (H * (H + 2 * KV) + H * H + 3 * H * F) / 2 * 1.0 + 2 * H * 2.0  # FP8: 1 byte; norms bf16, whole
    assert _layer_weight_bytes(TRT, "fp8", tp=2) == pytest.approx(tp2, rel=1e-12)


def test_held_weights_are_each_classes_parameters_at_its_format():
    # embedding and LM head V h each (the head bfloat8_b in TT's stack), final norm h
    [stage] = build_stage_costs(LLAMA, N150, _decode(precision="bfloat8_b"), TT)
    bf8, bf4 = BYTES_PER_ELEMENT["bfloat8_b"], BYTES_PER_ELEMENT["bfloat4_b"]
    layer = (H * (H + 2 * KV) + H * H + F * H + 2 * H) * bf8 + 2 * H * F * bf4
    assert stage.memory.weights_bytes == pytest.approx(L * layer + (2 * V * H + H) * bf8, rel=1e-12)
    parameters = L * (H * (H + 2 * KV) + H * H + 3 * H * F + 2 * H) + 2 * V * H + H
    assert stage.parameters == pytest.approx(parameters, rel=1e-12)


def test_formats_equal_to_the_precision_change_nothing():
    same = dataclasses.replace(MEGATRON_CORE, name="same", serving=Serving(
        weight_formats=tuple((c, "bf16") for c in ("attention", "mlp_in", "mlp_out", "logits")),
        kv_cache_format="bf16"))
    for strategy in (_decode(2, "bf16"), _decode(2, "bf16").with_fields(decode_context_length=0)):
        default, served = simulate(LLAMA, H100, strategy), simulate(LLAMA, H100, strategy, stack=same)
        assert served.iteration_time_s == pytest.approx(default.iteration_time_s, rel=1e-12)
        assert served.peak_memory_bytes == pytest.approx(default.peak_memory_bytes, rel=1e-12)


def test_serving_keys_leave_training_alone():
    training = Strategy(tp=2, microbatch_size=1, global_batch_size=8, precision="fp8")
    served, default = simulate(LLAMA, H100, training, stack=TRT), simulate(LLAMA, H100, training)
    assert served.iteration_time_s == default.iteration_time_s


def test_each_class_runs_at_its_fidelitys_peak():
    ops = {op.name: op for op in formats.serve(operators.transformer_layer(LLAMA, _decode(precision="bfloat8_b")),
                                               LLAMA, N150, _decode(precision="bfloat8_b"), TT)}
    assert ops["mlp_gate"].peak_flop_per_s == format_peak_flop_per_s(N150, "bfloat4_b", "LoFi")
    assert ops["qkv"].peak_flop_per_s == format_peak_flop_per_s(N150, "bfloat8_b", "HiFi2")
    assert ops["attention_scores"].peak_flop_per_s == format_peak_flop_per_s(N150, "bfloat8_b", "HiFi2")
    prefill = _decode(precision="bfloat8_b").with_fields(decode_context_length=0)
    core = [op for op in formats.serve(operators.transformer_layer(LLAMA, prefill), LLAMA, N150, prefill, TT)
            if op.name == "attention_scores"][0]
    assert core.peak_flop_per_s == format_peak_flop_per_s(N150, "bfloat8_b", "HiFi4") < ops["qkv"].peak_flop_per_s


@pytest.mark.parametrize("rows, tile", [(1, (64, 64)), (64, (64, 64)), (65, (64, 128)), (128, (64, 128)), (129, None)])
def test_the_small_m_tile_follows_vllms_sm90_fp8_dispatch(rows, tile):
    assert TRT.serving.gemm_tile(rows) == tile


def test_a_64_row_decode_gemm_pads_to_64_not_to_the_256_row_tile():
    # (64 x n) output: ceil(n / 64) tiles of 64 x 64 over 132 SMs, against ceil(n / 128) tiles of 256 x 128
    n = (H + 2 * KV) // 2  # the TP-2 share of qkv
    tiling = H100.compute.gemm_tiling
    assert tiling is not None
    assert tiling.efficiency(64, n, (64, 64)) == pytest.approx(64 * n / (1 * 132 * 64 * 64))
    assert tiling.efficiency(64, n) == pytest.approx(64 * n / (1 * 132 * 256 * 128))


@pytest.mark.parametrize("body, message", [
    ('[stack.weight_formats]\nmlp_up = "bfloat4_b"\nmlp_up_source = "x"\n',
     "serve.toml [stack.weight_formats]: unknown key 'mlp_up'"),
    ('[stack.weight_formats]\nmlp_in = "int4"\nmlp_in_source = "x"\n',
     "serve.toml [stack.weight_formats]: key 'mlp_in' must be one of"),
    ('[stack.weight_formats]\nmlp_in = "bfloat4_b"\n',
     "serve.toml [stack.weight_formats]: missing key 'mlp_in_source'"),
    ('[stack.math_fidelities]\nlogits = "HiFi5"\nlogits_source = "x"\n',
     "serve.toml [stack.math_fidelities]: key 'logits' must be one of ['LoFi', 'HiFi2', 'HiFi3', 'HiFi4']"),
    ('[stack]\nkv_cache_format = "fp4"\nkv_cache_format_source = "x"\n',
     "serve.toml [stack]: key 'kv_cache_format' must be one of"),
    ('[stack]\nsmall_m_gemm_tiles = [[128, 64, 128], [64, 64, 64]]\nsmall_m_gemm_tiles_source = "x"\n',
     "serve.toml [stack]: key 'small_m_gemm_tiles' must list increasing row bounds"),
    ('[stack]\nsmall_m_gemm_tiles = [[64, 64]]\nsmall_m_gemm_tiles_source = "x"\n',
     "serve.toml [stack]: key 'small_m_gemm_tiles' must be a list of [a, b, c] triples of integers >= 1"),
    ('[stack]\nsampling = "cpu"\nsampling_source = "x"\n', "serve.toml [stack]: key 'sampling' must be one of"),
    ('[stack]\nsampling = "host"\nsampling_source = "x"\n',
     "serve.toml [stack]: `sampling = \"host\"` needs `host_read_bandwidth_GB_per_s`"),
    ('[stack]\nhost_step_overhead_us = -1\nhost_step_overhead_us_source = "x"\n',
     "serve.toml [stack]: key 'host_step_overhead_us' must be in"),
])
def test_a_bad_serving_key_is_one_line_naming_file_key_and_value(tmp_path, body, message):
    with pytest.raises(InputError) as error:
        load_stack(_write(tmp_path, body))
    assert message in str(error.value) and "\n" not in str(error.value)


@pytest.mark.parametrize("hardware, body, message", [
    (N150, '[stack.weight_formats]\nmlp_in = "fp8_e4m3"\nmlp_in_source = "x"\n',
     "stack 'serve': class 'mlp_in': weight format 'fp8_e4m3' needs an fp8 peak"),
    (H100, '[stack.weight_formats]\nmlp_in = "bfloat4_b"\nmlp_in_source = "x"\n',
     "stack 'serve': class 'mlp_in': hardware 'h100-cluster' has no peak for precision 'bfloat4_b'"),
])
def test_a_format_the_hardware_cannot_run_is_one_line(tmp_path, hardware, body, message):
    with pytest.raises(InputError) as error:
        build_stage_costs(LLAMA, hardware, _decode(precision="bf16"), load_stack(_write(tmp_path, body)))
    assert message in str(error.value) and "\n" not in str(error.value)


@pytest.mark.parametrize("fields, message", [
    ({"weight_formats": (("mlp", "bf16"),)}, "stack: `weight_formats` takes classes"),
    ({"math_fidelities": (("logits", "HiFi5"),)}, "got 'logits' = 'HiFi5'"),
    ({"kv_cache_format": "fp4"}, "stack: `kv_cache_format` must be one of"),
    ({"small_m_gemm_tiles": ((64, 64, 64), (64, 64, 128))}, "must list increasing row bounds, got [64, 64]"),
])
def test_serving_built_in_python_checks_its_classes_and_values(fields, message):
    with pytest.raises(InputError) as error:
        Serving(**fields)
    assert message in str(error.value) and "\n" not in str(error.value)


def test_host_sampling_adds_the_logits_read_and_the_round_trip_to_a_decode_step(tmp_path):
    # b V logits of 2 bytes at the read rate, plus the fixed host round trip, in series; prefill untouched
    body = ('[stack]\nsampling = "host"\nsampling_source = "x"\nhost_read_bandwidth_GB_per_s = 10\n'
            'host_read_bandwidth_GB_per_s_source = "x"\nhost_step_overhead_us = 400\n'
            'host_step_overhead_us_source = "x"\n')
    host = load_stack(_write(tmp_path, body))
    assert formats.host_sampling_s(LLAMA, _decode(users=8), host) == pytest.approx(8 * V * 2 / 10e9 + 400e-6,
                                                                                 rel=1e-12)
    device = dataclasses.replace(host, serving=Serving())
    step = {s: simulate(LLAMA, N150, _decode(precision="bfloat8_b"), stack=s).iteration_time_s for s in (host, device)}
    assert step[host] - step[device] == pytest.approx(formats.host_sampling_s(LLAMA, _decode(), host), rel=1e-6)
    prefill = dataclasses.replace(_decode(precision="bfloat8_b"), decode_context_length=0)
    assert formats.host_sampling_s(LLAMA, prefill, host) == 0.0
    assert simulate(LLAMA, N150, prefill, stack=host).iteration_time_s == pytest.approx(
        simulate(LLAMA, N150, prefill, stack=device).iteration_time_s, rel=1e-12)


@pytest.mark.parametrize("context, chunk, read", [(129, 256, 256), (256, 256, 256), (257, 256, 512), (129, 0, 129),
                                                  (1000, 128, 1024)])
def test_a_decode_step_reads_its_context_in_whole_key_chunks(context, chunk, read):
    # 2 b read h_kv bytes(KV) of cached keys and values, the fused core's flops scaled alike
    stack = dataclasses.replace(TT, serving=dataclasses.replace(TT.serving, decode_key_chunk=chunk))
    strategy = dataclasses.replace(_decode(precision="bfloat8_b", context=context), attention="fused")
    plain = {op.name: op for op in operators.transformer_layer(LLAMA, strategy)}["fused_attention"]
    served = {op.name: op for op in formats.serve(operators.transformer_layer(LLAMA, strategy), LLAMA, N150,
                                                  strategy, stack)}["fused_attention"]
    cached = 2 * 8 * read * KV * FORMAT_BYTES["bfloat8_b"]
    assert served.input_bytes - (plain.input_bytes - 2 * 8 * context * KV * FORMAT_BYTES["bfloat8_b"]) == (
        pytest.approx(cached, rel=1e-12))
    assert served.flops == pytest.approx(plain.flops * read / context, rel=1e-12)
    assert operators.kv_cache_bytes(LLAMA, strategy) == 2 * 8 * context * KV * FORMAT_BYTES["bfloat8_b"]


@pytest.mark.parametrize("hardware, readers", [(N150, 12), (load_hardware("blackhole-p150"), 8)])
def test_a_prefills_gemms_run_on_the_stacks_grid_and_a_decode_steps_on_one_reader_per_dram_port(hardware, readers):
    prefill = dataclasses.replace(_decode(precision="bfloat8_b"), decode_context_length=0)
    cases = ((prefill, (8, 8), (True, True, True)),
             (_decode(precision="bfloat8_b"), (readers, 1), (False, True, False)))
    for strategy, grid, in_dram in cases:
        served = formats.serve(operators.transformer_layer(LLAMA, strategy), LLAMA, hardware, strategy, TT)
        assert {(op.grid, op.grid_in_dram) for op in served if op.kind == "gemm" and op.weight_bytes} == {
            (grid, in_dram)}
        assert {op.grid for op in served if not op.weight_bytes} == {None}


def test_half_a_prefill_grid_is_one_line(tmp_path):
    with pytest.raises(InputError) as error:
        load_stack(_write(tmp_path, '[stack]\nprefill_gemm_grid_x = 8\nprefill_gemm_grid_x_source = "x"\n'))
    assert "serve.toml [stack]: `prefill_gemm_grid_x` and `prefill_gemm_grid_y` are given together" in str(error.value)
