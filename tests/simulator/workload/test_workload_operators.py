"""Operator FLOPs, bytes and TP collectives against closed forms (PALM Table III, Megatron)."""

from __future__ import annotations

import pytest
from workload_fixtures import gpt, resnet50

from simulator.strategy import Strategy
from simulator.workload import operators


def gemm_flops(ops) -> float:
    return sum(op.flops for op in ops if op.kind == "gemm")


@pytest.mark.parametrize("b, s, h, a", [(1, 2048, 12288, 96), (4, 128, 256, 8), (2, 64, 96, 3)])
def test_gpt_layer_flops_match_palm_table_iii(b, s, h, a):
    model = gpt(layers=2, hidden=h, heads=a, sequence=s)
    ops = operators.transformer_layer(model, Strategy(microbatch_size=b))
    assert gemm_flops(ops) == pytest.approx(24 * b * s * h * h + 4 * b * s * s * h, rel=1e-12)


def test_tensor_parallelism_halves_gemm_flops_and_weights():
    model = gpt(layers=2, hidden=1024, heads=16, sequence=512)
    one = operators.transformer_layer(model, Strategy(tp=1, microbatch_size=2))
    two = operators.transformer_layer(model, Strategy(tp=2, microbatch_size=2))
    assert gemm_flops(two) == pytest.approx(gemm_flops(one) / 2, rel=1e-12)
    for single, split in zip(one, two, strict=True):
        if split.kind == "gemm":
            assert split.flops == pytest.approx(single.flops / 2)


def test_sequence_parallel_shards_elementwise_tokens():
    model = gpt(layers=2, hidden=1024, heads=16, sequence=512)
    plain = {op.name: op for op in operators.transformer_layer(model, Strategy(tp=4))}
    sequence_parallel = Strategy(tp=4, sequence_parallel=True)
    sharded = {op.name: op for op in operators.transformer_layer(model, sequence_parallel)}
    assert sharded["input_norm"].output_bytes == plain["input_norm"].output_bytes / 4
    assert sharded["qkv"].flops == plain["qkv"].flops


def test_tiled_cores_shard_elementwise_without_sequence_parallelism():
    model = gpt(layers=2, hidden=1024, heads=16, sequence=512)
    strategy = Strategy(tp=4)
    plain = operators.transformer_layer(model, strategy)
    grid = operators.transformer_layer(model, strategy, shard_elementwise=True)
    sequence_parallel = operators.transformer_layer(model, Strategy(tp=4, sequence_parallel=True))
    assert grid == sequence_parallel
    assert sum(op.flops for op in grid) < sum(op.flops for op in plain)
    assert [op.flops for op in grid if op.kind == "gemm"] == [op.flops for op in plain if op.kind == "gemm"]


def test_llama_mlp_is_gated_with_three_gemms():
    model = gpt(layers=2, hidden=512, heads=8, sequence=128, architecture="llama")
    names = [op.name for op in operators.transformer_layer(model, Strategy()) if op.kind == "gemm"]
    assert [n for n in names if n.startswith("mlp")] == ["mlp_gate", "mlp_up", "mlp_out"]


def test_logits_gemm_flops():
    model = gpt(layers=2, hidden=512, heads=8, sequence=128, vocab=1000)
    ops = operators.logits(model, Strategy(tp=2, microbatch_size=3))
    assert gemm_flops(ops) == pytest.approx(2 * 3 * 128 * 512 * 1000 / 2)


def test_embedding_lookup_reads_its_rows_but_holds_the_table():
    model = gpt(layers=2, hidden=512, heads=8, sequence=128, vocab=50000)
    lookup = operators.embedding(model, Strategy(tp=4, microbatch_size=2))[0]
    assert lookup.weight_bytes == pytest.approx(2 * 128 * 512 / 4 * 2)
    assert lookup.parameter_bytes == pytest.approx(50000 * 512 / 4 * 2)


def test_layer_collectives_per_table_iii():
    model = gpt(layers=2, hidden=512, heads=8, sequence=128)
    size = 2 * 128 * 512 * 2
    (reduce,) = operators.transformer_layer_collectives(model, Strategy(tp=4, microbatch_size=2))
    assert (reduce.kind, reduce.size_bytes, reduce.count) == ("all_reduce", size, 2)
    gathered = operators.transformer_layer_collectives(
        model, Strategy(tp=4, microbatch_size=2, sequence_parallel=True))
    assert {(c.kind, c.size_bytes, c.count) for c in gathered} == {
        ("all_gather", size, 2), ("reduce_scatter", size, 2)}
    assert operators.transformer_layer_collectives(model, Strategy(tp=1)) == ()


def test_resnet50_units_and_flops_match_he_table_1():
    units = operators.resnet50_units(resnet50(), Strategy())
    assert [name for name, _ in units] == ["stem", *[f"block{i}" for i in range(16)], "head"]
    projections = [op.name for _, ops in units for op in ops if op.name.endswith("projection")]
    assert projections == [f"block{i}_projection" for i in (0, 3, 7, 13)]
    multiply_adds = sum(gemm_flops(ops) for _, ops in units) / 2
    assert multiply_adds == pytest.approx(3.8e9, rel=0.05)


def test_resnet50_tp_splits_each_convolution_over_its_larger_operand():
    one = operators.resnet50_units(resnet50(), Strategy(tp=1))
    four = operators.resnet50_units(resnet50(), Strategy(tp=4))
    assert sum(gemm_flops(o) for _, o in four) == pytest.approx(sum(gemm_flops(o) for _, o in one) / 4, rel=1e-3)
    convs = [(a, b) for (_, x), (_, y) in zip(one, four, strict=True) for a, b in zip(x, y, strict=True)
             if a.kind == "gemm" and a.name != "fc"]
    for a, b in convs:
        if a.input_bytes >= a.weight_bytes:  # image split: weights replicated, activations split
            assert b.weight_bytes == a.weight_bytes and b.input_bytes == pytest.approx(a.input_bytes / 4)
            assert (b.halo_bytes > 0) == b.name.endswith(("conv2", "stem_conv")) and not b.gather_bytes
        else:  # channel split: filters split, input whole, output gathered
            assert b.weight_bytes == pytest.approx(a.weight_bytes / 4) and b.input_bytes == a.input_bytes
            assert b.gather_bytes == pytest.approx(a.output_bytes) and not b.halo_bytes
    assert {a.input_bytes >= a.weight_bytes for a, _ in convs} == {True, False}


def test_resnet50_collectives_follow_the_split():
    units = operators.resnet50_units(resnet50(), Strategy(tp=4))
    forward, backward = operators.convolution_collectives(units[1][1], Strategy(tp=4))
    assert [c.kind for c in forward] == ["all_to_all"]  # block0: image split, one 3x3 convolution
    assert sum(c.kind == "all_reduce" for c in backward) == 4  # conv1..3 + projection weights
    late_forward, _ = operators.convolution_collectives(units[16][1], Strategy(tp=4))
    assert {c.kind for c in late_forward} == {"all_gather"}  # block15: channel split
    assert operators.convolution_collectives(units[1][1], Strategy(tp=1)) == ((), ())


@pytest.mark.parametrize("tp", [1, 4])
def test_a_classification_head_runs_on_the_first_token_only_and_needs_no_collective(tp):
    from simulator import load_model

    model, b, h = load_model("BERT-base-SST-2"), 8, 768
    strategy = Strategy(tp=tp, microbatch_size=b)
    head = operators.logits(model, strategy)
    assert gemm_flops(head) == pytest.approx(2 * b * h * h + 2 * b * h * 2, rel=1e-12)
    assert sum(op.weight_bytes for op in head) == pytest.approx(2 * (h * h + h + h * 2 + 2))
    assert operators.logits_collectives(model, strategy) == ()
    language_model = operators.logits(load_model("BERT-base"), strategy)
    assert gemm_flops(language_model) == pytest.approx(2 * b * 128 * h * 30522 / tp, rel=1e-12)
