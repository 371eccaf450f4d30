"""Grouped-query attention: the keys and values of ``kv_heads`` heads, in FLOPs, bytes and memory."""

from __future__ import annotations

import dataclasses

import pytest
from workload_fixtures import gpt

from simulator.strategy import Strategy
from simulator.workload.memory import layer_activation_bytes
from simulator.workload.operators import context_parallel_collectives, transformer_layer

MHA = dataclasses.replace(gpt(layers=2, hidden=1024, heads=16, sequence=512), architecture="llama")
GQA = dataclasses.replace(MHA, num_kv_heads=4)  # 4 query heads per key/value head


def test_qkv_projects_to_the_query_width_plus_two_key_value_widths():
    t = 2
    h, kv = GQA.hidden_size, GQA.hidden_size * 4 // 16
    [qkv] = [op for op in transformer_layer(GQA, Strategy(tp=t)) if op.name == "qkv"]
    assert qkv.columns == (h + 2 * kv) / t
    assert qkv.flops == pytest.approx(2 * 512 * h * (h + 2 * kv) / t)
    [mha] = [op for op in transformer_layer(MHA, Strategy(tp=t)) if op.name == "qkv"]
    assert mha.columns == 3 * h / t


def test_the_attention_products_keep_every_query_head():
    core = {op.name: op for op in transformer_layer(GQA, Strategy(attention="fused"))}["fused_attention"]
    full = {op.name: op for op in transformer_layer(MHA, Strategy(attention="fused"))}["fused_attention"]
    assert core.flops == full.flops
    assert core.input_bytes == pytest.approx(512 * (1024 + 2 * 256) * 2)  # Q, and K and V of 4 heads


def test_keys_and_values_take_less_memory_and_move_fewer_bytes_over_a_context_parallel_ring():
    s, b, h, t = 512, 1, 1024, 2
    strategy = Strategy(tp=t, attention="fused")
    saved = layer_activation_bytes(MHA, strategy) - layer_activation_bytes(GQA, strategy)
    assert saved == pytest.approx(s * b * h * 4 * (1 - 4 / 16) / t)  # K and V: 2 sbh / t each at MHA
    ring = Strategy(tp=t, cp=2, attention="fused")
    [gathered] = context_parallel_collectives(GQA, ring, backward=False)
    assert gathered.size_bytes == 2 * b * s * 256 / t * 2
