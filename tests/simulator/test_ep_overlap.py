"""Megatron-Core's expert all-to-all overlap (``ep_overlap``): a 1F1B forward and the next
backward run merged, each one's all-to-alls under the other's compute; the warm-up forwards (one
more than the schedule's own) and the last backwards keep theirs exposed."""

from __future__ import annotations

import dataclasses

import pytest

from simulator import InputError, PassKind, Strategy, load_hardware, load_model, simulate
from simulator.api import simulate_with_records
from simulator.workload.stages import build_stage_costs

QWEN = dataclasses.replace(load_model("Qwen3-30B-A3B"), sequence_length=2048)  # two microbatches fit one H100
H100 = load_hardware("h100-cluster")
BASE = Strategy(pp=1, dp=16, ep=16, microbatch_size=1, global_batch_size=64, zero_stage=1, attention="fused",
                partition="uniform")


def _durations(strategy: Strategy, kind: PassKind) -> list[float]:
    _, records = simulate_with_records(QWEN, H100, strategy, steady_state=False)
    return [r.end_s - r.start_s for r in records if r.kind is kind and r.stage == 0]


def test_a_merged_pass_whose_partner_outcomputes_its_all_to_alls_takes_its_compute_alone():
    # one stage (Megatron-Core's combined 1F1B without pipelining): F0, then F1 B0, F2 B1, F3 B2
    # merged, then B3; TP 1, no other collective: a pass is its compute plus its all-to-alls
    strategy = dataclasses.replace(BASE, ep_overlap=True)
    [cost] = build_stage_costs(QWEN, H100, strategy)
    forward, backward = cost.forward, cost.backward
    assert backward.ep_overlap_s == forward.compute_s and forward.ep_overlap_s == backward.compute_s
    plain = _durations(BASE, PassKind.FORWARD)
    exposed = plain[0] - forward.compute_s - forward.launch_s
    assert 0.0 < exposed < backward.compute_s  # the all-to-alls take time, and the backward hides them
    alone = forward.compute_s + forward.launch_s
    assert _durations(strategy, PassKind.FORWARD) == pytest.approx([plain[0], alone, alone, alone], rel=1e-9)
    # the extra warm-up forward: two microbatches' activations held at once
    assert simulate(QWEN, H100, strategy).stages[0].memory_bytes > simulate(QWEN, H100, BASE).stages[0].memory_bytes


def test_warm_up_forwards_and_the_last_backwards_keep_their_all_to_alls():
    pp = 2
    plain = dataclasses.replace(BASE, pp=pp, dp=8, ep=8, schedule="interleaved-1f1b", num_chunks=2)
    merged = dataclasses.replace(plain, ep_overlap=True)
    _, records = simulate_with_records(QWEN, H100, merged, steady_state=False)
    _, alone = simulate_with_records(QWEN, H100, plain, steady_state=False)
    first = [r for r in records if r.stage == 0]
    before = {(r.kind, r.microbatch, r.chunk): r.end_s - r.start_s for r in alone if r.stage == 0}
    warm_up = 2 * (pp - 1) + pp + 1  # Megatron-LM's (p - i - 1) 2 + (v - 1) p, and the extra one
    assert [r.kind for r in first[:warm_up + 1]] == [PassKind.FORWARD] * (warm_up + 1)
    for k, r in enumerate(first):
        merged = (r.kind is PassKind.FORWARD and k + 1 < len(first) and first[k + 1].kind is PassKind.BACKWARD) or \
            (r.kind is PassKind.BACKWARD and first[k - 1].kind is PassKind.FORWARD)
        took, was = r.end_s - r.start_s, before[(r.kind, r.microbatch, r.chunk)]
        assert took < was * (1 - 1e-6) if merged else took == pytest.approx(was, rel=1e-9)


def test_the_overlap_never_slows_an_iteration():
    for strategy in (BASE, dataclasses.replace(BASE, pp=2, dp=8, ep=8, schedule="interleaved-1f1b", num_chunks=2,
                                                global_batch_size=64)):
        plain = simulate(QWEN, H100, strategy)
        merged = simulate(QWEN, H100, dataclasses.replace(strategy, ep_overlap=True))
        assert merged.iteration_time_s < plain.iteration_time_s


@pytest.mark.parametrize(("fields", "message"), [
    ({"ep": 1, "dp": 16}, "needs ep > 1"),
    ({"schedule": "gpipe"}, "schedule 'interleaved-1f1b'"),
    ({"schedule": "zb-h1"}, "schedule 'interleaved-1f1b'"),
    ({"pp": 2, "dp": 8, "ep": 8}, "or '1f1b' with pp 1\\), got ep 8, 'training', '1f1b' with pp 2"),
    ({"recompute": "full"}, "does not go with full recompute"),
])
def test_the_overlap_needs_experts_training_and_a_1f1b_schedule(fields, message):
    with pytest.raises(InputError, match=message):
        dataclasses.replace(BASE, ep_overlap=True, **fields)
