"""Megatron-Core's expert all-to-all overlap (``ep_overlap``): a 1F1B forward and the next
backward run merged, each one's all-to-alls under the other's compute; warm-up forwards and the
last backwards keep theirs exposed."""

from __future__ import annotations

import dataclasses

import pytest

from simulator import InputError, PassKind, Strategy, load_hardware, load_model, simulate
from simulator.api import simulate_with_records
from simulator.workload.stages import build_stage_costs

QWEN = load_model("Qwen3-30B-A3B")
H100 = load_hardware("h100-cluster")
BASE = Strategy(pp=1, dp=16, ep=16, microbatch_size=1, global_batch_size=64, zero_stage=1, attention="fused",
                partition="uniform")


def _durations(strategy: Strategy, kind: PassKind) -> list[float]:
    _, records = simulate_with_records(QWEN, H100, strategy, steady_state=False)
    return [r.end_s - r.start_s for r in records if r.kind is kind and r.stage == 0]


def test_a_merged_pass_whose_partner_outcomputes_its_all_to_alls_takes_its_compute_alone():
    # one stage: every forward is followed by a backward, so every pass is merged; TP 1, no
    # other collective: a pass is its compute plus its all-to-alls, which the partner hides
    strategy = dataclasses.replace(BASE, ep_overlap=True)
    [cost] = build_stage_costs(QWEN, H100, strategy)
    forward, backward = cost.forward, cost.backward
    assert backward.ep_overlap_s == forward.compute_s and forward.ep_overlap_s == backward.compute_s
    exposed = _durations(BASE, PassKind.FORWARD)[0] - forward.compute_s - forward.launch_s
    assert 0.0 < exposed < backward.compute_s  # the all-to-alls take time, and the backward hides them
    assert _durations(strategy, PassKind.FORWARD) == pytest.approx([forward.compute_s + forward.launch_s] * 4,
                                                                   rel=1e-9)


def test_warm_up_forwards_and_the_last_backwards_keep_their_all_to_alls():
    pp = 4
    plain = dataclasses.replace(BASE, pp=pp, dp=4, ep=4)
    merged = dataclasses.replace(plain, ep_overlap=True)
    _, records = simulate_with_records(QWEN, H100, merged, steady_state=False)
    _, alone = simulate_with_records(QWEN, H100, plain, steady_state=False)
    first = [r for r in records if r.stage == 0]
    before = {(r.kind, r.microbatch): r.end_s - r.start_s for r in alone if r.stage == 0}
    for k, r in enumerate(first):
        paired = (r.kind is PassKind.FORWARD and k + 1 < len(first) and first[k + 1].kind is PassKind.BACKWARD) or \
            (r.kind is PassKind.BACKWARD and first[k - 1].kind is PassKind.FORWARD)
        took = r.end_s - r.start_s
        if paired:
            assert took < before[(r.kind, r.microbatch)] * (1 - 1e-6)
        else:
            assert took == pytest.approx(before[(r.kind, r.microbatch)], rel=1e-9)
    assert all(r.kind is PassKind.FORWARD for r in first[:pp - 1])  # the warm-up: unmerged


def test_the_overlap_never_slows_an_iteration():
    for strategy in (BASE, dataclasses.replace(BASE, pp=2, dp=8, ep=8, schedule="interleaved-1f1b", num_chunks=2,
                                                global_batch_size=64)):
        plain = simulate(QWEN, H100, strategy)
        merged = simulate(QWEN, H100, dataclasses.replace(strategy, ep_overlap=True))
        assert merged.iteration_time_s < plain.iteration_time_s


@pytest.mark.parametrize(("fields", "message"), [
    ({"ep": 1, "dp": 16}, "needs ep > 1"),
    ({"schedule": "gpipe"}, "schedule '1f1b' or 'interleaved-1f1b'"),
    ({"schedule": "zb-h1"}, "schedule '1f1b' or 'interleaved-1f1b'"),
])
def test_the_overlap_needs_experts_training_and_a_1f1b_schedule(fields, message):
    with pytest.raises(InputError, match=message):
        dataclasses.replace(BASE, ep_overlap=True, **fields)
