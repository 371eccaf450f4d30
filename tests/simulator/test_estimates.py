"""``estimate_many`` (the closed form over arrays of plans and placements) against
``estimate_samples_per_s`` (a Python call per strategy) on every kind of route the closed form
times: TP rings and two-level collectives on a mesh, DRAM streams, p2p with adapters, context,
expert and expert-data parallelism, hybrid sharding, interleaving, ZB-H1 and inference."""

from __future__ import annotations

from itertools import product

import pytest

from simulator import (
    InputError,
    Strategy,
    estimate_many,
    estimate_product,
    estimate_samples_per_s,
    load_hardware,
    load_model,
)


def _alone(model, hardware, strategy: Strategy) -> float:
    try:
        return estimate_samples_per_s(model, hardware, strategy)
    except InputError:
        return 0.0


CASES = {
    "T-18B on the wafer": ("T-18B", "wafer", dict(tp=[4, 8], pp=[4, 5], dp=[2], microbatch_size=[1, 2],
                                                   schedule=["1f1b", "zb-h1", "interleaved-1f1b"],
                                                   recompute=["full", "selective"], zero_stage=[1, 3],
                                                   transfer_strategy=[1, 2], placement=["line", "row-snake"],
                                                   global_batch_size=[40])),
    "LLaMA2-70B on H100s": ("LLaMA2-70B", "h100-cluster", dict(tp=[8], pp=[2, 4], dp=[8, 16], cp=[1, 2],
                                                                  microbatch_size=[1], num_chunks=[1, 2],
                                                                  schedule=["1f1b", "interleaved-1f1b", "gpipe"],
                                                                  recompute=["full", "none"], tp_overlap=[False, True],
                                                                  zero_stage=[1, 3], sequence_parallel=[True])),
    "Mixtral on A100s": ("Mixtral-8x7B", "a100-cluster", dict(tp=[2, 4], pp=[2], dp=[16], ep=[1, 4, 8],
                                                                 microbatch_size=[1, 2], recompute=["full"],
                                                                 zero_stage=[1, 2], schedule=["1f1b", "zb-h1"])),
    "Llama decode on an n150": ("Llama-3.2-1B", "wormhole-n150", dict(tp=[4, 8, 16], pp=[1, 2, 4], dp=[1, 2],
                                                                        microbatch_size=[1, 4], mode=["inference"],
                                                                        prompt_length=[128],
                                                                        decode_context_length=[0, 129],
                                                                        global_batch_size=[8])),
    "Llama decode over two chips": ("Llama-3.2-1B", "wormhole-n300", dict(tp=[16, 32, 64], pp=[1, 2], dp=[1, 2],
                                                                          microbatch_size=[1], mode=["inference"],
                                                                          prompt_length=[128],
                                                                          decode_context_length=[0, 129],
                                                                          global_batch_size=[8])),
    "ResNet-50 on the wafer": ("ResNet-50", "wafer", dict(tp=[2, 4], pp=[2, 4], dp=[4, 8], microbatch_size=[8, 16],
                                                          recompute=["none", "full"], global_batch_size=[256])),
    "T-18B on four wafers": ("T-18B", "wafer-4", dict(tp=[8, 16], pp=[5, 20], dp=[8], microbatch_size=[1, 2],
                                                     recompute=["full"], zero_stage=[1, 3], schedule=["1f1b", "zb-h1"],
                                                     placement=["line", "row-snake"], wafer_stages=["span", "within"],
                                                     global_batch_size=[160])),
}


@pytest.mark.parametrize("case", list(CASES))
def test_many_strategies_at_once_are_each_estimated_alone(case):
    name, machine, choices = CASES[case]
    model, hardware = load_model(name), load_hardware(machine)
    strategies = []
    for values in product(*choices.values()):
        fields = dict(zip(choices, values, strict=True))
        if fields.get("schedule") == "interleaved-1f1b":
            fields.setdefault("num_chunks", 2)
        try:
            strategies.append(Strategy(**fields))
        except InputError:
            continue
    alone = [_alone(model, hardware, s) for s in strategies]
    assert sum(v > 0 for v in alone) >= 8, alone
    assert estimate_many(model, hardware, strategies) == pytest.approx(alone, rel=1e-12, abs=0)


def test_hybrid_sharding_and_a_plan_over_memory_or_illegal_are_estimated_as_alone():
    model, hardware = load_model("LLaMA2-70B"), load_hardware("h100-cluster")
    strategies = [Strategy(tp=8, pp=2, dp=8, zero_stage=3, shard_group_size=shard, recompute="full")
                  for shard in (None, 2, 4)]
    strategies += [Strategy(tp=1, pp=1, dp=8), Strategy(tp=8, pp=2, dp=8, microbatch_size=3)]
    alone = [_alone(model, hardware, s) for s in strategies]
    assert alone[-2:] == [0.0, 0.0] and all(v > 0 for v in alone[:3])
    assert estimate_many(model, hardware, strategies) == pytest.approx(alone, rel=1e-12, abs=0)


PLAN_CHOICES = dict(tp=[8, 16], pp=[5, 20], dp=[8], microbatch_size=[1, 2], recompute=["full"], zero_stage=[1, 3],
                    schedule=["1f1b", "zb-h1"], global_batch_size=[160])
LAYOUTS = [dict(placement=placement, wafer_stages=stages, group_layout=layout, transfer_strategy=transfer)
           for placement in ("line", "row-snake") for stages in ("span", "within")
           for layout in ("compact", "strided") for transfer in (1, 2)]


def test_plans_under_layouts_are_each_estimated_alone_illegal_pairs_zero():
    # estimate_product: every plan under every layout, each pair what the strategy gives alone;
    # on four wafers a layout keeping stages within wafers breaks the device rules of some plans
    model, hardware = load_model("T-18B"), load_hardware("wafer-4")
    plans = [Strategy(**dict(zip(PLAN_CHOICES, values, strict=True))) for values in product(*PLAN_CHOICES.values())]
    grid = estimate_product(model, hardware, plans, LAYOUTS)
    alone = [[_alone(model, hardware, plan.with_fields(**layout)) for layout in LAYOUTS] for plan in plans]
    assert grid.shape == (len(plans), len(LAYOUTS))
    assert any(0.0 in row and max(row) > 0 for row in alone)  # a plan legal under some layouts only
    assert grid.tolist() == [pytest.approx(row, rel=1e-12, abs=0) for row in alone]


def test_a_layout_may_set_only_fields_the_stage_costs_do_not_read():
    model, hardware = load_model("T-18B"), load_hardware("wafer")
    with pytest.raises(ValueError, match="microbatch_size"):
        estimate_product(model, hardware, [Strategy(tp=8, pp=5, dp=8)], [dict(microbatch_size=2)])


def test_layouts_setting_different_fields_keep_each_plans_own_where_they_set_none():
    model, hardware = load_model("T-18B"), load_hardware("wafer")
    plans = [Strategy(tp=8, pp=5, dp=2, placement=placement, global_batch_size=40, recompute="full")
             for placement in ("line", "row-snake", "s-shape")]
    layouts = [{}, dict(placement="line"), dict(transfer_strategy=2), dict(placement="row-snake", transfer_strategy=2)]
    alone = [[_alone(model, hardware, plan.with_fields(**layout)) for layout in layouts] for plan in plans]
    assert len({row[0] for row in alone}) > 1  # each plan's own placement counts
    assert estimate_product(model, hardware, plans, layouts).tolist() == [pytest.approx(row, rel=1e-12, abs=0)
                                                                          for row in alone]
