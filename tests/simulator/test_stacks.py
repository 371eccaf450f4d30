"""Software stacks (simulator.stacks): the loader's errors, the presets, and closed forms of how a
stack changes ZeRO-3's cost."""

from __future__ import annotations

import dataclasses

import pytest

from simulator import MEGATRON_CORE, InputError, ModelSpec, Strategy, load_hardware, load_stack, simulate, stack_presets
from simulator.workload.stages import build_stage_costs

A100 = load_hardware("a100-cluster")
SMALL = ModelSpec(name="GPT-small", architecture="gpt", num_layers=2, hidden_size=256, num_heads=4,
                  ffn_hidden_size=1024, sequence_length=128, vocab_size=51200, global_batch_size=2)
ZERO3 = Strategy(dp=2, microbatch_size=1, global_batch_size=2, zero_stage=3, recompute="full", precision="fp16")
DEEP = dataclasses.replace(SMALL, num_layers=8, vocab_size=512)
"""Layers hold most parameters (the largest unit is a layer)."""
DEEPSPEED = load_stack("deepspeed-0.3-zero3")


def _write(tmp_path, body: str):
    path = tmp_path / "mine.toml"
    path.write_text(body)
    return path


def test_presets_load_and_megatron_core_is_the_default():
    assert stack_presets() == ["deepspeed-0.3-zero3", "megatron-core", "tensorrt-llm-fp8", "torchtitan-fsdp2",
                             "torchtitan-fsdp2-eager",
                             "tt-transformers-performance"]
    assert load_stack("megatron-core") == MEGATRON_CORE
    for name in stack_presets():
        stack = load_stack(name)
        assert stack.name == name and all(source.strip() for _, source in stack.sources)
    # DeepSpeed issue #1069's 0.5 ms a call on 8 ranks: a fixed part and 8 ranks' views and copies
    assert DEEPSPEED.collective_call_overhead_s + 8 * DEEPSPEED.zero3_gather_rank_overhead_s == pytest.approx(5e-4)
    assert load_stack("torchtitan-fsdp2").reshard_after_forward == "except_last"
    for name in ("torchtitan-fsdp2", "torchtitan-fsdp2-eager"):
        titan = load_stack(name)
        assert (titan.selective_recompute, titan.zero3_reduction_format) == ("alternate_matmuls", "fp32")
    assert load_stack("torchtitan-fsdp2-eager").elementwise_bytes("norm") == 36  # RMSNorm's 6 eager kernels
    assert load_stack("torchtitan-fsdp2").elementwise_bytes("norm") is None  # compiled: fused


@pytest.mark.parametrize("body, message", [
    ("[stack]\nzero3_gather = \"bucket\"\nzero3_gather_source = \"x\"\n",
     "mine.toml [stack]: key 'zero3_gather' must be one of ['layer', 'parameter'], got 'bucket'"),
    ("[stack]\noverlap_data_paralel = true\n", "mine.toml [stack]: unknown key 'overlap_data_paralel'"),
    ("[stack]\noverlap_data_parallel = 1\noverlap_data_parallel_source = \"x\"\n",
     "mine.toml [stack]: key 'overlap_data_parallel' must be true or false, got 1"),
    ("[stack]\nreshard_after_forward = \"never\"\n", "mine.toml [stack]: missing key 'reshard_after_forward_source'"),
    ("[stack]\ncollective_call_overhead_us = -1\ncollective_call_overhead_us_source = \"x\"\n",
     "mine.toml [stack]: key 'collective_call_overhead_us' must be in [0, 1,000,000] us"),
    ("[stak]\n", "mine.toml: missing key 'stack'"),
    ("[stack]\nzero3_gather_rank_overhead_us = -1\nzero3_gather_rank_overhead_us_source = \"x\"\n",
     "mine.toml [stack]: key 'zero3_gather_rank_overhead_us' must be in [0, 1,000,000] us"),
    ("[stack]\nselective_recompute = \"op\"\nselective_recompute_source = \"x\"\n",
     "mine.toml [stack]: key 'selective_recompute' must be one of ['attention_core', 'alternate_matmuls'], got 'op'"),
    ("[stack]\nzero3_reduction_format = \"float32\"\nzero3_reduction_format_source = \"x\"\n",
     "mine.toml [stack]: key 'zero3_reduction_format' must be one of ['fp32',"),
    ("[stack.elementwise_bytes_per_element]\nlayernorm = 36\nlayernorm_source = \"x\"\n",
     "mine.toml [stack.elementwise_bytes_per_element]: unknown key 'layernorm'"),
    ("[stack.elementwise_bytes_per_element]\nnorm = 0\nnorm_source = \"x\"\n",
     "mine.toml [stack.elementwise_bytes_per_element]: key 'norm' must be"),
    ("[stack.elementwise_bytes_per_element]\nnorm = 36\n",
     "mine.toml [stack.elementwise_bytes_per_element]: missing key 'norm_source'"),
])
def test_a_bad_stack_file_is_one_line_naming_file_key_and_value(tmp_path, body, message):
    with pytest.raises(InputError) as error:
        load_stack(_write(tmp_path, body))
    assert message in str(error.value) and "\n" not in str(error.value)


def test_an_unknown_preset_lists_the_presets():
    with pytest.raises(InputError, match=r"stack: unknown preset 'deepspeed' \(presets: \['deepspeed-0.3-zero3'"):
        load_stack("deepspeed")


def test_a_file_gives_only_what_differs_from_megatron_core(tmp_path):
    stack = load_stack(_write(tmp_path, "[stack]\nreshard_after_forward = \"never\"\n"
                                        "reshard_after_forward_source = \"Llama 3 Herd, arXiv 2407.21783\"\n"))
    assert stack == dataclasses.replace(MEGATRON_CORE, name="mine", reshard_after_forward="never")


def test_each_call_costs_the_stacks_overhead():
    # 2 layers of hidden 256 hold 3 tensors of at least 1e5 elements each (qkv, mlp_in, mlp_out; the
    # projection has 65,792), the embedding 1 (the word table; 128 positions x 256 persist) and the
    # logits 1 (the tied table, gathered where it is used): 8 tensors, each gathered in the forward
    # and again in the backward and its gradient reduced, one microbatch
    free = dataclasses.replace(DEEPSPEED, collective_call_overhead_s=0.0)
    with_overhead = simulate(SMALL, A100, ZERO3, stack=DEEPSPEED).iteration_time_s
    without = simulate(SMALL, A100, ZERO3, stack=free).iteration_time_s
    assert with_overhead - without == pytest.approx(3 * 8 * DEEPSPEED.collective_call_overhead_s, rel=1e-9)


def test_each_gather_costs_host_time_per_rank():
    # the 8 tensors above gathered in the forward and again in the backward, each gather making a
    # view and copying one chunk per rank of the dp = 2 (then 4) group out of NCCL's flat buffer
    assert DEEPSPEED.zero3_gather_rank_overhead_s == pytest.approx(12.8e-6)
    none = dataclasses.replace(DEEPSPEED, zero3_gather_rank_overhead_s=0.0)
    wider = dataclasses.replace(ZERO3, dp=4, global_batch_size=4)
    for strategy in (ZERO3, wider):
        with_copies = simulate(SMALL, A100, strategy, stack=DEEPSPEED).iteration_time_s
        without = simulate(SMALL, A100, strategy, stack=none).iteration_time_s
        assert with_copies - without == pytest.approx(2 * 8 * strategy.dp * DEEPSPEED.zero3_gather_rank_overhead_s,
                                                      rel=1e-9)


def test_per_parameter_gathers_are_more_calls_of_the_units_tensors():
    per_layer = dataclasses.replace(DEEPSPEED, zero3_gather="layer", collective_call_overhead_s=0.0)
    per_tensor = dataclasses.replace(per_layer, zero3_gather="parameter", zero3_persistence_threshold=0.0)
    [layer] = build_stage_costs(SMALL, A100, ZERO3, per_layer)
    [tensor] = build_stage_costs(SMALL, A100, ZERO3, per_tensor)
    def calls_and_bytes(collectives):
        return sum(c.count for c in collectives), sum(c.count * c.size_bytes for c in collectives)
    layer_calls, layer_bytes = calls_and_bytes(layer.forward.exposed_dp_collectives)
    tensor_calls, tensor_bytes = calls_and_bytes(tensor.forward.exposed_dp_collectives)
    # 4 units (embedding, 2 layers, logits); 2 + 6 + 6 + 2 tensors holding parameters; the same bytes
    # but the tied word table, which the logits gather again (the unit counts it once, in the embedding)
    assert (layer_calls, tensor_calls) == (4, 16)
    assert tensor_bytes - layer_bytes == pytest.approx(51200 * 256 * ZERO3.bytes_per_element, rel=1e-12)
    assert simulate(SMALL, A100, ZERO3, stack=per_tensor).iteration_time_s > \
        simulate(SMALL, A100, ZERO3, stack=per_layer).iteration_time_s


def test_synchronised_gathers_hide_nothing():
    [prefetched] = build_stage_costs(SMALL, A100, ZERO3)
    [synchronised] = build_stage_costs(SMALL, A100, ZERO3,
                                       dataclasses.replace(MEGATRON_CORE, overlap_data_parallel=False))
    assert prefetched.forward.replica_collectives and not synchronised.forward.replica_collectives
    assert sum(c.count for c in synchronised.backward.exposed_dp_collectives) == 8  # 4 gathers, 4 reduce-scatters


def test_not_resharding_drops_the_backward_gathers_and_holds_the_stage():
    never = dataclasses.replace(MEGATRON_CORE, reshard_after_forward="never")
    [always] = build_stage_costs(DEEP, A100, ZERO3)
    [kept] = build_stage_costs(DEEP, A100, ZERO3, never)
    backward = kept.backward.replica_collectives + kept.backward.exposed_dp_collectives
    assert {c.kind for c in backward} == {"reduce_scatter"}
    assert kept.forward == always.forward
    # buffers: two gathered units and one unit's gradients, against the whole stage and one unit's gradients
    held = (always.parameters - 2 * _largest_unit()) * ZERO3.bytes_per_element
    assert kept.memory.weights_bytes - always.memory.weights_bytes == pytest.approx(held, rel=1e-12)
    assert held > 0


def _largest_unit() -> float:
    from simulator.workload import operators

    return sum(op.parameter_bytes for op in operators.transformer_layer(DEEP, ZERO3)) / ZERO3.bytes_per_element


def test_torchtitan_keeps_the_last_block_gathered_and_reshards_nothing_with_pipelines():
    titan = load_stack("torchtitan-fsdp2")
    [default] = build_stage_costs(SMALL, A100, ZERO3)
    [last_kept] = build_stage_costs(SMALL, A100, ZERO3, titan)
    gathers = [c for c in last_kept.backward.replica_collectives + last_kept.backward.exposed_dp_collectives
               if c.kind == "all_gather"]
    assert sum(c.count for c in gathers) == 3 and not any(c.kind == "all_gather"
                                                          for c in last_kept.backward.exposed_dp_collectives)
    assert last_kept.memory == default.memory
    piped = dataclasses.replace(ZERO3, pp=2, dp=2, global_batch_size=4)
    for stage in build_stage_costs(SMALL, A100, piped, titan):
        assert not any(c.kind == "all_gather" for c in stage.backward.replica_collectives
                       + stage.backward.exposed_dp_collectives)


def test_the_default_stack_gives_todays_table2_zero3_figures():
    # Narayanan SC'21 Table 2's ZeRO-3 rows as the simulator costed them before stacks existed
    # (studies/validation/narayanan-sc21/table2/SOURCE.md: 210 / 207 / 199 TFLOP/s per GPU)
    from simulator.workload import model_flops_per_iteration

    model = ModelSpec(name="GPT-174.6B", architecture="gpt", num_layers=96, hidden_size=12288, num_heads=96,
                      ffn_hidden_size=4 * 12288, sequence_length=2048, vocab_size=51200, global_batch_size=1536)
    flop = model_flops_per_iteration(model, 1536, recompute=True)
    for gpus, size, published in ((384, 4, 210), (768, 2, 207), (1536, 1, 199)):
        strategy = Strategy(dp=gpus, microbatch_size=size, global_batch_size=1536, zero_stage=3, recompute="full",
                            precision="fp16")
        for stack in (MEGATRON_CORE, load_stack("megatron-core")):
            result = simulate(model, A100, strategy, stack=stack)
            assert round(flop * result.samples_per_s / 1536 / gpus / 1e12) == published


def test_a_stack_built_in_code_checks_its_training_keys():
    with pytest.raises(InputError, match="`elementwise_bytes_per_element` takes classes"):
        dataclasses.replace(MEGATRON_CORE, elementwise_bytes_per_element=(("norm", -1.0),))
    with pytest.raises(InputError, match="`selective_recompute` must be one of"):
        dataclasses.replace(MEGATRON_CORE, selective_recompute="op")  # type: ignore[arg-type]
