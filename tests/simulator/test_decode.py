"""LLM inference: a prefill of the prompt and a decode step against a KV cache, by closed forms."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator import InputError, Strategy, load_hardware, load_model, simulate

LLAMA = load_model("LLaMA2-7B")  # 32 layers, h 4096, 32 heads (no grouped-query attention)
H100 = load_hardware("h100-cluster")
N150 = load_hardware("wormhole-n150")


def _decode(users: int, context: int, **fields) -> Strategy:
    return Strategy(global_batch_size=users, microbatch_size=users, mode="inference", decode_context_length=context,
                    **fields)


@settings(max_examples=20, deadline=None)
@given(users=st.sampled_from([1, 4, 32]), context=st.sampled_from([2, 128, 2048]), kv_heads=st.sampled_from([8, 32]),
       tp=st.sampled_from([1, 2, 8]))
def test_the_kv_cache_is_two_layers_kv_heads_head_size_context_users_bytes(users, context, kv_heads, tp):
    # the memory a context of c tokens adds over a context of 1: the KV cache of c - 1 tokens
    model = dataclasses.replace(LLAMA, num_kv_heads=kv_heads)
    longer, one = (simulate(model, H100, _decode(users, c, tp=tp)).stages[0].memory_bytes for c in (context, 1))
    head_size = model.hidden_size // model.num_heads
    cache = 2 * model.num_layers * kv_heads * head_size * (context - 1) * users * 2  # fp16: 2 bytes
    assert (longer - one) * tp == pytest.approx(cache, rel=1e-9)


@pytest.mark.parametrize("hardware", [H100, N150], ids=["h100", "n150"])
@pytest.mark.parametrize("users, context", [(1, 128), (32, 128), (8, 1024)])
def test_a_decode_step_never_beats_its_bytes_at_the_memory_bandwidth_nor_its_flops_at_peak(hardware, users, context):
    precision = "bfloat8_b" if "bfloat8_b" in hardware.compute.peak_flop_per_s else "fp16"
    tp = 1 if hardware is H100 else 32
    strategy = _decode(users, context, tp=tp, precision=precision)
    result = simulate(LLAMA, hardware, strategy)
    assert result.feasible, result.reason
    bpe = strategy.bytes_per_element
    parameters = 32 * (4 * 4096**2 + 3 * 4096 * 11008) + 2 * 32000 * 4096
    kv = 2 * 32 * 4096 * context * users * bpe
    if hardware is H100:
        bandwidth = hardware.memory.hbm.bandwidth_bytes_per_s
    else:
        bandwidth = hardware.memory.dram.bandwidth_bytes_per_s  # the chip's, shared by its cores
    assert result.iteration_time_s >= (parameters * bpe * 0.99 + kv) / bandwidth
    flops = 2 * parameters * users
    assert result.iteration_time_s >= flops / (hardware.compute.peak_flop_per_s[precision] * strategy.num_devices)


def test_a_prefill_is_the_forward_of_a_model_whose_sequence_is_the_prompt():
    prompt = Strategy(global_batch_size=8, microbatch_size=8, mode="inference", prompt_length=512, tp=2)
    short = dataclasses.replace(LLAMA, sequence_length=512)
    a, b = simulate(LLAMA, H100, prompt), simulate(short, H100, dataclasses.replace(prompt, prompt_length=None))
    assert a.iteration_time_s == pytest.approx(b.iteration_time_s, rel=1e-12)
    assert a.tokens_per_s == pytest.approx(b.tokens_per_s, rel=1e-12)


def test_a_longer_context_makes_a_decode_step_slower_and_it_produces_one_token_per_user():
    short, long = (simulate(LLAMA, H100, _decode(32, c)) for c in (128, 1024))
    assert long.iteration_time_s > short.iteration_time_s
    assert short.tokens_per_s == pytest.approx(32 / short.iteration_time_s, rel=1e-12)


@pytest.mark.parametrize(("fields", "needle"), [
    ({"prompt_length": 5000}, "`prompt_length` = 5000 exceeds the context of LLaMA2-7B, 4096"),
    ({"decode_context_length": 4097}, "`decode_context_length` = 4097 exceeds"),
])
def test_a_prompt_or_context_longer_than_the_model_takes_is_an_input_error(fields, needle):
    with pytest.raises(InputError, match=needle.replace("(", r"\(")):
        simulate(LLAMA, H100, Strategy(mode="inference", global_batch_size=1, **fields))


def test_an_encoder_has_no_decode_step_and_training_no_prompt():
    with pytest.raises(InputError, match="causal decoder"):
        simulate(load_model("BERT-base"), H100, _decode(1, 16))
    with pytest.raises(InputError, match="for mode 'inference'"):
        Strategy(prompt_length=16)


def test_kv_heads_are_replicated_where_tensor_parallelism_exceeds_them():
    # 8 KV heads on tp 16 or 32: each device holds one head's keys and values (vLLM's
    # QKVParallelLinear replicates each on tp / kv_heads devices); tp 12 neither divides nor is a multiple
    model = dataclasses.replace(LLAMA, num_kv_heads=8)
    head_size = model.hidden_size // model.num_heads
    for tp in (16, 32):
        longer, one = (simulate(model, H100, _decode(4, c, tp=tp)).stages[0].memory_bytes for c in (65, 1))
        assert longer - one == pytest.approx(2 * model.num_layers * head_size * 64 * 4 * 2, rel=1e-9)
    with pytest.raises(InputError, match="neither divides nor is a multiple of its 8 KV heads"):
        wider = dataclasses.replace(model, num_heads=48, hidden_size=6144, ffn_hidden_size=12288)
        simulate(wider, H100, _decode(1, 8, tp=12))


def test_on_the_wafer_decode_placement_moves_only_the_latency_bound_tp_all_reduces():
    # studies/wafer-llm-decode.md: same compute and DRAM stream for every placement and layout;
    # the 64 KiB all-reduces' hops are what differ (column-wise compact groups the fewest)
    model, wafer = load_model("Llama-3.1-8B"), load_hardware("wafer")
    results = {(placement, layout): simulate(model, wafer, Strategy(
        tp=32, dp=4, microbatch_size=8, global_batch_size=32, mode="inference", prompt_length=2047,
        decode_context_length=2048, placement=placement, group_layout=layout))
        for placement in ("s-shape-transposed", "s-shape") for layout in ("compact", "strided")}
    compute = {r.stages[0].compute_s for r in results.values()}
    assert max(compute) == pytest.approx(min(compute), rel=1e-12)
    times = {key: r.iteration_time_s for key, r in results.items()}
    assert times[("s-shape-transposed", "compact")] < times[("s-shape", "compact")] < times[("s-shape", "strided")]
    assert max(times.values()) / min(times.values()) > 1.05


LLAMA31_8B = load_model("Llama-3.1-8B")  # 8 KV heads of 32


def test_split_by_users_no_kv_head_is_replicated_until_the_group_exceeds_the_pairs():
    # 32 users x 8 KV heads = 256 pairs: over 64 devices each holds 1/64 of the cache (by heads:
    # one whole head each, 8x the cache); 2 users x 8 KV heads = 16 pairs: each of the 64 holds a
    # pair's cache, 4 devices per pair
    for users, replicas in ((32, 1), (2, 4)):
        one, longer = (simulate(LLAMA31_8B, N150, _decode(users, c, tp=64, precision="bfloat8_b",
                                                           attention_split="users")).stages[0].memory_bytes
                       for c in (1, 129))
        cache = 2 * 32 * 8 * 128 * 128 * users * (1 + 1 / 16)
        assert (longer - one) * 64 == pytest.approx(cache * replicas, rel=1e-9)
    with pytest.raises(InputError, match="kv_heads|KV heads|num_heads"):
        simulate(LLAMA31_8B, N150, _decode(32, 129, tp=64, precision="bfloat8_b"))
    with pytest.raises(InputError, match="attention_split"):
        Strategy(attention_split="users")


def test_a_decode_over_the_whole_n150_grid_streams_dram_at_the_rate_tt_metal_measures():
    # tt-metal tech_reports/Saturating_DRAM_bandwidth (Wormhole, 12 GT/s): microbenchmark 267 GB/s,
    # "Llama3-70 decode 239-260" GB/s; llms.md 4.6.1: DRAM-sharded matmuls "around 240 GB/s". The
    # read data's XY route from the ports spreads over the grid; a decode step is weight streaming
    strategy = _decode(32, 129, tp=64, precision="bfloat8_b", attention_split="users", prompt_length=128)
    result = simulate(LLAMA31_8B, N150, strategy)
    achieved = result.traffic_bytes["dram"] / result.iteration_time_s
    assert 239e9 <= achieved <= 267e9
