"""Sliding-window attention: which layers are windowed, the products a windowed layer executes,
the KV cache it keeps and reads, and its Hugging Face and TOML spellings."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator import InputError, Strategy, load_hardware, load_model, simulate
from simulator.workload import operators
from simulator.workload.stages import build_stage_memory

CONFIGS = Path(__file__).parent / "hf_configs"
GPT_OSS = load_model("GPT-OSS-120B")  # 36 layers, windowed 128 tokens on layers 0, 2, 4, ...
LLAMA = load_model("Llama-3.1-8B")
H100 = load_hardware("h100-cluster")


def _fused(ops):
    [core] = [op for op in ops if op.name == "fused_attention"]
    return core


@settings(max_examples=60, deadline=None)
@given(s=st.integers(1, 300), window=st.integers(1, 400))
def test_a_windowed_causal_sequence_executes_each_querys_last_window_keys(s, window):
    # by counting: query i meets keys max(0, i - W + 1) ... i, min(i + 1, W) of them
    model = dataclasses.replace(LLAMA, sequence_length=s)
    pairs = sum(min(i + 1, window) for i in range(s))
    fraction = operators.executed_fraction(model, Strategy(), window)
    assert fraction == (0.5 if window >= s else pytest.approx(pairs / s**2, rel=1e-12))


def test_gpt_oss_alternates_windowed_and_full_layers_from_a_windowed_first():
    windows = [GPT_OSS.attention_window(index) for index in range(GPT_OSS.num_layers)]
    assert windows == [128, 0] * 18
    mistral_v01 = dataclasses.replace(LLAMA, sliding_window=4096)  # every layer windowed
    assert {mistral_v01.attention_window(index) for index in range(32)} == {4096}
    gemma3_like = dataclasses.replace(LLAMA, sliding_window=1024, sliding_window_pattern=6)
    assert [index for index in range(32) if not gemma3_like.attention_window(index)] == [5, 11, 17, 23, 29]


def test_a_windowed_layer_executes_the_windowed_fraction_of_the_full_layers_products():
    strategy = Strategy(microbatch_size=1, attention="fused")
    full = _fused(operators.transformer_layer(GPT_OSS, strategy))
    windowed = _fused(operators.transformer_layer(GPT_OSS, strategy, window=128))
    s, w = GPT_OSS.sequence_length, 128
    assert full.flops == windowed.flops and full.executed_fraction == 0.5
    assert windowed.executed_fraction == pytest.approx((w * (w + 1) / 2 + (s - w) * w) / s**2, rel=1e-12)


@pytest.mark.parametrize("context", [64, 128, 8192])
def test_a_decode_step_keeps_and_reads_the_last_window_of_its_context(context):
    strategy = Strategy(global_batch_size=4, microbatch_size=4, mode="inference", decode_context_length=context,
                        attention="fused")
    full = operators.kv_cache_bytes(GPT_OSS, strategy)
    windowed = operators.kv_cache_bytes(GPT_OSS, strategy, window=128)
    assert windowed == pytest.approx(full * min(context, 128) / context, rel=1e-12)
    core = _fused(operators.transformer_layer(GPT_OSS, strategy, window=128))
    assert core.executed_fraction == 1.0
    assert core.flops == pytest.approx(_fused(operators.transformer_layer(GPT_OSS, strategy)).flops
                                       * min(context, 128) / context, rel=1e-12)


def test_a_stage_holds_the_kv_cache_of_its_full_and_windowed_layers():
    strategy = Strategy(global_batch_size=8, microbatch_size=8, mode="inference", decode_context_length=4096, tp=8,
                        pp=2)
    [first, second] = build_stage_memory(GPT_OSS, H100, strategy)
    per_layer = operators.kv_cache_bytes(GPT_OSS, strategy)
    # 18 layers a stage, 9 full and 9 windowed to 128 of the 4,096 tokens
    assert first.kv_cache_bytes == pytest.approx(9 * per_layer * (1 + 128 / 4096), rel=1e-12)
    assert second.kv_cache_bytes == pytest.approx(first.kv_cache_bytes, rel=1e-12)


def test_windows_make_a_training_step_faster_and_change_nothing_else():
    strategy = Strategy(tp=1, pp=4, dp=16, ep=8, microbatch_size=1, global_batch_size=1280, zero_stage=1,
                        attention="fused")
    windowed = simulate(GPT_OSS, H100, strategy)
    full = simulate(dataclasses.replace(GPT_OSS, sliding_window=0, sliding_window_pattern=0), H100, strategy)
    assert windowed.iteration_time_s < full.iteration_time_s
    assert windowed.stages[0].memory_bytes == pytest.approx(full.stages[0].memory_bytes, rel=1e-12)


def _config(tmp_path: Path, name: str, **changes) -> str:
    config = json.loads((CONFIGS / f"{name}.json").read_text())
    config.update(changes)
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    return str(path)


def test_hugging_face_layer_types_give_the_window_and_its_pattern(tmp_path):
    types = ["sliding_attention"] * 5 + ["full_attention"]
    model = load_model(_config(tmp_path, "Llama-3.1-8B", sliding_window=1024, layer_types=types * 5 + types[:2]))
    assert (model.sliding_window, model.sliding_window_pattern) == (1024, 6)
    mistral = load_model(_config(tmp_path, "Mixtral-8x7B", sliding_window=4096))
    assert (mistral.sliding_window, mistral.sliding_window_pattern) == (4096, 0)
    qwen = load_model(_config(tmp_path, "Qwen3-30B-A3B", sliding_window=4096, use_sliding_window=False))
    assert qwen.sliding_window == 0


@pytest.mark.parametrize(("name", "changes", "message"), [
    ("Llama-3.1-8B", {"sliding_window": 512, "layer_types": ["full_attention"] * 31 + ["sliding_attention"]},
     "key 'layer_types': windowed layers \\[31\\]"),
    ("Llama-3.1-8B", {"sliding_window": 512, "layer_types": ["sliding_attention"] * 3}, "key 'layer_types' must list"),
    ("Qwen3-30B-A3B", {"sliding_window": 4096, "use_sliding_window": True, "max_window_layers": 28},
     "key .max_window_layers. = 28: windowed layers from 28"),
])
def test_a_window_layout_not_modelled_is_a_one_line_error(tmp_path, name, changes, message):
    path = _config(tmp_path, name, **changes)
    with pytest.raises(InputError, match=message) as info:
        load_model(path)
    assert path in str(info.value) and "\n" not in str(info.value)


@pytest.mark.parametrize(("lines", "message"), [
    ('architecture = "bert"\nsliding_window = 128', "key 'sliding_window' needs a causal architecture"),
    ('architecture = "llama"\nsliding_window_pattern = 2', "key 'sliding_window_pattern' needs sliding_window"),
])
def test_a_model_file_with_a_window_it_cannot_have_is_refused(tmp_path, lines, message):
    path = tmp_path / "m.toml"
    path.write_text(f'[model]\nsource = "a test"\n{lines}\nnum_layers = 4\nhidden_size = 256\nnum_heads = 4\n'
                    "ffn_hidden_size = 1024\nsequence_length = 512\nvocab_size = 1000\nglobal_batch_size = 8\n")
    with pytest.raises(InputError, match=message):
        load_model(path)
