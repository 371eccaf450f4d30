"""build_stage_costs: partitions, parameters, model flops, collectives, errors, speed."""

from __future__ import annotations

import itertools
import typing
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from workload_fixtures import a100_cluster, gpt, resnet50, wafer

from simulator import load_hardware, load_model, simulate
from simulator.costs import Collective
from simulator.errors import InputError
from simulator.strategy import Strategy
from simulator.workload import memory, roofline, sram, stages, tiled_stage
from simulator.workload.partition import balanced_partition, uniform_partition
from simulator.workload.stages import build_stage_costs, model_flops_per_iteration

T145 = gpt()


def layers_per_stage(costs) -> list[int]:
    return [sum(name.startswith("layer") for name in stage.units) for stage in costs]


def test_model_flops_match_narayanan_eq3_for_t145b():
    strategy = Strategy(tp=8, pp=8, dp=24, microbatch_size=1)
    costs = build_stage_costs(T145, a100_cluster(), strategy)
    per_sample = sum(stage.model_flops_per_microbatch for stage in costs) * strategy.tp
    assert per_sample * 2304 == pytest.approx(model_flops_per_iteration(T145, 2304), rel=1e-9)


def test_narayanan_eq3_with_recompute_gives_their_iteration_time():
    # 145.6B row of Table 1: 1536 GPUs at 148 TFLOP/s -> about 24.8 s per iteration
    seconds = model_flops_per_iteration(T145, 2304, recompute=True) / (1536 * 148e12)
    assert seconds == pytest.approx(24.8, rel=0.01)


def gpt_parameters(layers: int, h: int, vocab: int = 51200, sequence: int = 2048) -> int:
    return 12 * layers * h * h + 13 * layers * h + (vocab + sequence) * h


@pytest.mark.parametrize("layers, hidden, heads, pp", [(40, 6144, 48, 1), (80, 12288, 96, 8)])
def test_parameters_times_tp_equal_gpt_count(layers, hidden, heads, pp):
    model = gpt(layers=layers, hidden=hidden, heads=heads)
    costs = build_stage_costs(model, a100_cluster(), Strategy(tp=8, pp=pp))
    total = sum(stage.parameters for stage in costs) * 8
    assert total == pytest.approx(gpt_parameters(layers, hidden), rel=0.01)


def test_last_stage_holds_a_copy_of_tied_embeddings():
    model = gpt(layers=4, hidden=256, heads=4, sequence=128, vocab=1000)
    (single,) = build_stage_costs(model, a100_cluster(), Strategy())
    split = build_stage_costs(model, a100_cluster(), Strategy(pp=2))
    assert sum(s.parameters for s in split) - single.parameters == pytest.approx(1000 * 256)


@pytest.mark.parametrize("partition", ["uniform", "balanced"])
@pytest.mark.parametrize("pp, chunks", [(1, 1), (4, 1), (5, 1), (4, 3)])
def test_partition_covers_all_layers(partition, pp, chunks):
    schedule = "interleaved-1f1b" if chunks > 1 else "1f1b"
    strategy = Strategy(pp=pp, num_chunks=chunks, schedule=schedule, partition=partition)
    costs = build_stage_costs(gpt(layers=24, hidden=512, heads=8, sequence=256), wafer(), strategy)
    assert len(costs) == pp * chunks
    assert sum(layers_per_stage(costs)) == 24 and min(layers_per_stage(costs)) >= 1
    assert costs[0].units[0] == "embedding" and costs[-1].units[-1] == "logits"
    names = [name for stage in costs for name in stage.units if name.startswith("layer")]
    assert names == [f"layer{i}" for i in range(24)]


def test_explicit_partition_is_followed():
    strategy = Strategy(pp=3, partition="explicit", stage_layers=(2, 5, 1))
    costs = build_stage_costs(gpt(layers=8, hidden=256, heads=4, sequence=128), wafer(), strategy)
    assert layers_per_stage(costs) == [2, 5, 1]
    assert [stage.forward.segments for stage in costs] == [3, 5, 2]


def stage_time(stage) -> float:
    return stage.forward.compute_s + stage.backward.compute_s


@settings(max_examples=40, deadline=None)
@given(layers=st.integers(2, 24), pp=st.integers(1, 8), vocab=st.sampled_from([1000, 51200, 256000]),
       recompute=st.sampled_from(["none", "selective", "full"]))
def test_balanced_never_slower_than_uniform(layers, pp, vocab, recompute):
    pp = min(pp, layers)
    model = gpt(layers=layers, hidden=256, heads=4, sequence=256, vocab=vocab)
    times = {}
    for partition in ("uniform", "balanced"):
        strategy = Strategy(pp=pp, partition=partition, recompute=recompute)
        times[partition] = max(stage_time(s) for s in build_stage_costs(model, a100_cluster(), strategy))
    assert times["balanced"] <= times["uniform"] * (1 + 1e-12)


def brute_force(costs, parts) -> float:
    best = float("inf")
    for cuts in itertools.combinations(range(1, len(costs)), parts - 1):
        bounds = (0, *cuts, len(costs))
        best = min(best, max(sum(costs[a:b]) for a, b in itertools.pairwise(bounds)))
    return best


@settings(max_examples=200, deadline=None)
@given(costs=st.lists(st.floats(0.01, 100.0), min_size=1, max_size=9), parts=st.integers(1, 9))
def test_balanced_partition_is_optimal(costs, parts):
    parts = min(parts, len(costs))
    counts = balanced_partition(costs, parts)
    assert len(counts) == parts and sum(counts) == len(costs) and min(counts) >= 1
    starts = [sum(counts[:i]) for i in range(parts + 1)]
    largest = max(sum(costs[a:b]) for a, b in itertools.pairwise(starts))
    assert largest <= brute_force(costs, parts) * (1 + 1e-9)


def test_uniform_partition_by_count():
    assert uniform_partition(10, 4) == (3, 3, 2, 2)


@pytest.mark.parametrize("strategy, model", [
    (Strategy(pp=9), gpt(layers=8, hidden=256, heads=4)),
    (Strategy(pp=4, num_chunks=3, schedule="interleaved-1f1b"), gpt(layers=8, hidden=256, heads=4)),
    (Strategy(tp=3), gpt(layers=8, hidden=256, heads=4)),
    (Strategy(tp=8), gpt(layers=8, hidden=256, heads=4)),
    (Strategy(pp=2, partition="explicit", stage_layers=(3, 4)), gpt(layers=8, hidden=256, heads=4)),
    (Strategy(pp=2, partition="explicit", stage_layers=(8, 0)), gpt(layers=8, hidden=256, heads=4)),
    (Strategy(microbatch_size=64, global_batch_size=32), gpt(layers=8, hidden=256, heads=4)),
    (Strategy(precision="bf16"), gpt(layers=8, hidden=256, heads=4)),
    (Strategy(tp=2, sequence_parallel=True), gpt(layers=8, hidden=256, heads=4, sequence=129)),
    (Strategy(pp=19), resnet50()),
    (Strategy(tp=3), resnet50()),
])
def test_impossible_plans_raise(strategy, model):
    with pytest.raises(InputError):
        build_stage_costs(model, wafer(), strategy)


def test_tp_collectives_per_layer():
    model = gpt(layers=8, hidden=256, heads=4, sequence=128)
    (stage,) = build_stage_costs(model, a100_cluster(), Strategy(tp=2, partition="uniform"))
    layer_reduce = 1 * 128 * 256 * 2
    forward = {c.size_bytes: c.count for c in stage.forward.tp_collectives if c.kind == "all_reduce"}
    backward = {c.size_bytes: c.count for c in stage.backward.tp_collectives if c.kind == "all_reduce"}
    assert forward[layer_reduce] == 2 * 8 + 1      # + the vocabulary-parallel embedding
    assert backward[layer_reduce] == 2 * 8
    (full,) = build_stage_costs(model, a100_cluster(), Strategy(tp=2, recompute="full"))
    assert {c.size_bytes: c.count for c in full.backward.tp_collectives}[layer_reduce] == 4 * 8
    (single,) = build_stage_costs(model, a100_cluster(), Strategy(tp=1))
    assert single.forward.tp_collectives == () and single.backward.tp_collectives == ()


def test_tp_overlap_moves_the_backward_collectives_under_the_weight_gradients():
    model = gpt(layers=8, hidden=256, heads=4, sequence=128)
    plain = Strategy(tp=2, recompute="full", partition="uniform")
    (exposed,) = build_stage_costs(model, a100_cluster(), plain)
    (overlapped,) = build_stage_costs(model, a100_cluster(), Strategy(**{**plain.to_dict(), "tp_overlap": True}))
    layer_reduce = 1 * 128 * 256 * 2
    assert {c.size_bytes: c.count for c in overlapped.backward.overlapped_collectives}[layer_reduce] == 2 * 8
    # the recompute forward's all-reduces stay exposed
    assert {c.size_bytes: c.count for c in overlapped.backward.tp_collectives}[layer_reduce] == 2 * 8
    assert exposed.backward.overlapped_collectives == () and exposed.backward.overlap_s == 0.0
    # weight-gradient GEMMs: one per weighted GEMM, each its forward's time, so less than the
    # backward's GEMM time (data + weight gradients)
    assert 0.0 < overlapped.backward.overlap_s < overlapped.backward.compute_s / 2


def test_full_recompute_adds_a_forward():
    model = gpt(layers=4, hidden=256, heads=4, sequence=128)
    stages = build_stage_costs(model, a100_cluster(), Strategy(pp=4, recompute="full"))
    middle = stages[1]
    assert middle.backward.flops == pytest.approx(3 * middle.forward.flops)
    gemm = 24 * 128 * 256**2 + 4 * 128**2 * 256
    assert middle.model_flops_per_microbatch == pytest.approx(3 * gemm)


@pytest.mark.parametrize("zero, kinds", [(0, ["all_reduce"]), (1, ["reduce_scatter", "all_gather"]),
                                         (2, ["reduce_scatter", "all_gather"]),
                                         (3, [])])  # ZeRO-3 reduces every microbatch on a GPU
def test_dp_collectives_by_zero_stage(zero, kinds):
    model = gpt(layers=4, hidden=256, heads=4, sequence=128)
    (stage,) = build_stage_costs(model, a100_cluster(), Strategy(dp=4, zero_stage=zero))
    assert [c.kind for c in stage.dp_collectives] == kinds
    assert all(c.size_bytes == pytest.approx(stage.parameters * 2) for c in stage.dp_collectives)
    assert stage.memory.optimizer_bytes == pytest.approx(stage.parameters * 12 / (4 if zero else 1))


def test_cluster_has_no_dram_bytes_and_mesh_does():
    model = gpt(layers=4, hidden=1024, heads=16, sequence=512)
    (gpu,) = build_stage_costs(model, a100_cluster(), Strategy())
    (core,) = build_stage_costs(model, wafer(), Strategy())
    assert gpu.forward.dram_bytes == 0 and gpu.memory.sram_resident_bytes == 0
    assert core.forward.dram_bytes > 0 and core.backward.dram_bytes > 0 and core.optimizer_step.dram_bytes > 0


def test_inference_has_forward_only():
    model = gpt(layers=4, hidden=256, heads=4, sequence=128)
    (stage,) = build_stage_costs(model, wafer(), Strategy(dp=2, mode="inference", tp=2))
    assert stage.backward.compute_s == 0 and stage.backward.tp_collectives == ()
    assert stage.optimizer_step.compute_s == 0 and stage.dp_collectives == ()
    assert stage.memory.gradients_bytes == 0 and stage.memory.optimizer_bytes == 0
    gemm = (24 * 128 * 256**2 + 4 * 128**2 * 256) / 2
    assert stage.model_flops_per_microbatch == pytest.approx(4 * gemm + 2 * 128 * 256 * 51200 / 2)


def test_send_bytes_use_scatter_gather():
    model = gpt(layers=4, hidden=256, heads=4, sequence=128)
    stages = build_stage_costs(model, a100_cluster(), Strategy(tp=4, pp=2, microbatch_size=2))
    assert stages[0].activation_send_bytes == 2 * 128 * 256 * 2 / 4


def test_resnet50_stages():
    strategy = Strategy(pp=4, microbatch_size=32, precision="int8", mode="inference")
    stages = build_stage_costs(resnet50(), wafer(), strategy)
    assert sum(len(stage.units) for stage in stages) == 18
    total = sum(stage.model_flops_per_microbatch for stage in stages)
    assert total == pytest.approx(32 * model_flops_per_iteration(resnet50(), 1) / 3)


def test_zero3_gathers_each_unit_every_pass_on_a_gpu_cluster():
    # Rajbhandari et al. SC'20 §7.2.2 and FSDP (Zhao et al. VLDB'23 §3): per unit, all-gather
    # before forward and backward, reduce-scatter after backward; one unit of each exposed
    model, a100 = load_model("T-1.7B"), load_hardware("a100-cluster")
    strategy = Strategy(tp=1, pp=2, dp=4, global_batch_size=64, zero_stage=3)
    for cost in build_stage_costs(model, a100, strategy):
        units = len(cost.units)
        unit = cost.parameters * strategy.bytes_per_element / units
        gather, scatter = (Collective(kind=k, size_bytes=unit, count=units - 1)
                           for k in ("all_gather", "reduce_scatter"))
        assert cost.forward.replica_collectives == (gather,)
        assert cost.backward.replica_collectives == (gather, scatter)
        assert cost.forward.exposed_dp_collectives == (replace(gather, count=1),)
        assert cost.backward.exposed_dp_collectives == (replace(gather, count=1), replace(scatter, count=1))
        assert cost.dp_collectives == ()
        # every byte of the stage moves once per pass: (units - 1) hidden + 1 exposed
        assert sum(c.size_bytes * c.count for c in cost.forward.replica_collectives
                   + cost.forward.exposed_dp_collectives) == pytest.approx(cost.parameters * 2)
    below = build_stage_costs(model, a100, replace(strategy, zero_stage=2))
    assert all(c.forward.replica_collectives == () and len(c.dp_collectives) == 2 for c in below)


def test_zero3_holds_two_gathered_units_and_one_units_gradients():
    model, a100 = load_model("T-1.7B"), load_hardware("a100-cluster")
    strategy = Strategy(tp=1, pp=1, dp=8, global_batch_size=64, zero_stage=3)
    [zero3] = build_stage_costs(model, a100, strategy)
    layer = 12 * model.hidden_size**2 + 13 * model.hidden_size  # a GPT layer's weights and biases
    sharded = memory.sharded_state_bytes(zero3.parameters, strategy).weights_bytes
    embedding = model.vocab_size * model.hidden_size + model.sequence_length * model.hidden_size
    largest = max(layer, embedding)
    assert zero3.memory.weights_bytes - sharded == pytest.approx((2 + 1) * largest * 2, rel=1e-3)


def test_zero3_on_a_mesh_keeps_the_weights_its_passes_stream_from_dram():
    model, mesh = load_model("T-18B"), load_hardware("wafer")
    strategy = Strategy(tp=8, pp=20, dp=2, zero_stage=3, recompute="full")
    zero2 = build_stage_costs(model, mesh, replace(strategy, zero_stage=2))
    zero3 = build_stage_costs(model, mesh, strategy)
    assert [(c.forward, c.backward, c.dp_collectives) for c in zero3] == \
        [(c.forward, c.backward, c.dp_collectives) for c in zero2]


def test_zero3_exposes_what_compute_does_not_hide():
    # four microbatches: ZeRO-3 moves 3x the parameters per microbatch where ZeRO-2 moves 2x once
    # per iteration; on a fast network compute hides ZeRO-3's (ZeRO-2's end-of-iteration
    # collectives are exposed, as Megatron-LM 2021 ran them), a slow one exposes it
    model, a100 = load_model("T-1.7B"), load_hardware("a100-cluster")
    strategy = Strategy(tp=1, pp=1, dp=32, global_batch_size=128, zero_stage=2)
    slow = replace(a100, network=replace(a100.network, inter_node_bandwidth_bytes_per_s=1e9))
    fast, slowed = ({z: simulate(model, hw, replace(strategy, zero_stage=z)).iteration_time_s for z in (2, 3)}
                    for hw in (a100, slow))
    assert slowed[3] > slowed[2] and slowed[3] - slowed[2] > fast[3] - fast[2]


def test_costing_after_the_operators_takes_fields_not_the_strategy():
    """Issue 33: costing flows one way (operators -> per-pass costs -> stage); the roofline and
    the DRAM planners take the few fields they need (Costing, PlanFields), not the Strategy."""
    steps = (roofline.cost_unit, roofline.optimizer_step, sram.stage_totals, sram.operator_access,
             sram.update_bytes, sram.plan_stage, tiled_stage.operator_traffic, tiled_stage.plan_stage_tiled)
    for step in steps:
        assert Strategy not in typing.get_type_hints(step).values(), step.__name__


QWEN = load_model("Qwen3-30B-A3B")
STAGE_ONLY_CHANGES = {"pp": 4, "dp": 8, "global_batch_size": 256, "schedule": "gpipe", "num_chunks": 2,
                      "zero_stage": 3, "shard_group_size": 2, "optimizer": "sgd", "partition": "uniform",
                      "stage_layers": (12, 12, 12, 12)}


@pytest.mark.parametrize("name", sorted(stages.STAGE_ONLY_FIELDS))
def test_no_unit_reads_a_field_kept_out_of_the_units_key(name):
    # the units are kept by every strategy field but these: a field wrongly listed would let two
    # plans share units they do not share (tied is the one thing the number of stages decides)
    zero3 = name in ("zero_stage", "shard_group_size")  # not modelled with expert parallelism
    base = Strategy(tp=2, pp=2, dp=4, ep=1 if zero3 else 2, microbatch_size=2, global_batch_size=128,
                    zero_stage=1, recompute="selective", sequence_parallel=True, precision="fp8")
    changed = {name: STAGE_ONLY_CHANGES[name]} | ({"zero_stage": 3} if zero3 else {})
    changed |= {"schedule": "interleaved-1f1b"} if name == "num_chunks" else {}
    changed |= {"partition": "explicit", "pp": 4} if name == "stage_layers" else {}
    other = replace(base, **changed)
    h100 = load_hardware("h100-cluster")
    for tied in (False, True):
        assert stages._build_units(QWEN, h100, base, tied, stages.MEGATRON_CORE) == \
            stages._build_units(QWEN, h100, other, tied, stages.MEGATRON_CORE)
    assert set(STAGE_ONLY_CHANGES) == set(stages.STAGE_ONLY_FIELDS)


@pytest.mark.parametrize(("model", "hardware", "strategy"), [
    (QWEN, "h100-cluster", Strategy(tp=2, pp=4, dp=8, ep=4, microbatch_size=2, global_batch_size=256, zero_stage=1,
                                    sequence_parallel=True, schedule="interleaved-1f1b", num_chunks=2,
                                    precision="fp8")),
    (load_model("T-1.7B"), "a100-cluster", Strategy(pp=2, dp=4, global_batch_size=64, zero_stage=3)),
    (load_model("T-18B"), "wafer", Strategy(tp=8, pp=20, dp=2, zero_stage=3, recompute="full")),
    (load_model("Llama-3.1-8B"), "h100-cluster", Strategy(tp=2, pp=2, mode="inference", decode_context_length=1024,
                                                         microbatch_size=4, global_batch_size=16)),
])
def test_the_memory_alone_is_the_memory_of_the_full_costing(model, hardware, strategy):
    machine = load_hardware(hardware)
    costed = [replace(cost.memory, sram_resident_bytes=0.0) for cost in build_stage_costs(model, machine, strategy)]
    assert list(stages.build_stage_memory(model, machine, strategy)) == costed
    assert any(m.kv_cache_bytes for m in costed) == (strategy.mode == "inference")
