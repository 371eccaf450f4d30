"""The closed form (:func:`simulator.timing.vectorised.iterations`) on every kind of route it
times: TP rings and two-level collectives on a mesh, DRAM streams, p2p with adapters, context,
expert and expert-data parallelism, hybrid sharding, interleaving, ZB-H1 and inference. Its
stage times and bytes against the event engine's running the same passes, sends and updates
alone; ``estimate_many`` (many strategies' pairs at once) against ``estimate_samples_per_s`` (one
strategy's pair)."""

from __future__ import annotations

import math
from itertools import product

import numpy as np
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
from simulator.api import _engine, _prepare
from simulator.engine import Engine
from simulator.network.names import ESTIMATE


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


def _strategies(choices: dict[str, list]) -> list[Strategy]:
    strategies = []
    for values in product(*choices.values()):
        fields = dict(zip(choices, values, strict=True))
        if fields.get("schedule") == "interleaved-1f1b":
            fields.setdefault("num_chunks", 2)
        try:
            strategies.append(Strategy(**fields))
        except InputError:
            continue
    return strategies


EVERY = 7
"""The closed form is checked against the event engine on every ``EVERY``-th strategy of a case
(each strategy is a simulation)."""


@pytest.mark.parametrize("case", list(CASES))
def test_the_closed_forms_stage_times_and_bytes_are_the_event_engines_alone(case):
    # with nothing contending (the analytical timing model) an event run adds up the passes,
    # sends, regroups and updates each alone, as the closed form does: each stage's compute,
    # communication, DRAM stall, optimizer and host time and each flow's bytes agree for any
    # number of microbatches (ZB-H1's gradient sends and their regroups, on the p2p and TP
    # flows, are left out of the closed form: its docstring). Forwards only, one microbatch runs
    # its passes and sends one after the other through the stages (one chunk each): the closed
    # form is that or the busiest resource's busy time (from the event run's bytes and the
    # flows' index), the longer
    name, machine, choices = CASES[case]
    model, hardware = load_model(name), load_hardware(machine)
    checked = 0
    for strategy in _strategies(choices)[::EVERY]:
        try:
            prepared = _prepare(model, hardware, strategy, ESTIMATE)
        except InputError:
            continue
        engine, m = _engine(prepared, ESTIMATE, False, math.inf, None), strategy.pp
        closed, run = engine.estimate(m)[0], engine.run(m)
        fields = ("compute_s", "communication_s", "dram_stall_s", "optimizer_s", "host_s")
        assert [getattr(st, f) for st in closed.stats for f in fields] == pytest.approx(
            [getattr(st, f) for st in run.stats for f in fields], rel=1e-9, abs=1e-15)
        left_out = {"p2p", "tp"} if strategy.schedule == "zb-h1" else set()
        assert [b for f, b in zip(closed.flows, closed.flow_bytes, strict=True) if f.kind not in left_out] == \
            pytest.approx([b for f, b in zip(run.flows, run.flow_bytes, strict=True) if f.kind not in left_out],
                          rel=1e-9, abs=1e-3)
        checked += 1
        if strategy.num_chunks > 1:
            continue
        forwards = Engine(hardware=hardware, topology=prepared.topology, placements=prepared.placements,
                          costs=prepared.costs, schedule=engine.schedule, network="analytical", training=False,
                          transfer_strategy=strategy.transfer_strategy)
        run = forwards.run(1)
        busiest = float(run.index.busy_s(run.flow_bytes).max())
        assert forwards.estimate(1)[0].makespan_s == pytest.approx(max(run.makespan_s, busiest), rel=1e-9)
    assert checked >= 3


@pytest.mark.parametrize("case", list(CASES))
def test_many_strategies_at_once_are_each_estimated_alone(case):
    name, machine, choices = CASES[case]
    model, hardware = load_model(name), load_hardware(machine)
    strategies = _strategies(choices)
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


@pytest.mark.parametrize("name, machine, strategy", [
    ("T-18B", "wafer", Strategy(tp=8, dp=2, pp=5, recompute="full", transfer_strategy=2)),
    ("Mixtral-8x7B", "a100-cluster", Strategy(tp=2, pp=2, dp=16, ep=8, recompute="full")),
])
def test_the_busiest_resource_of_many_pairs_is_each_pairs_sums_over_the_flow_index(name, machine, strategy):
    # the many-pair busy times (two dense products: routes onto flows, flows onto resources) are
    # the flow index's sums per resource of each pair's bytes per flow, for any bytes moved
    from simulator.timing.vectorised import ROUTES, flow_table

    prepared = _prepare(load_model(name), load_hardware(machine), strategy, ESTIMATE)
    machine_state = _engine(prepared, ESTIMATE, False, math.inf, None).machine
    table = flow_table(machine_state.stage_flows, machine_state.p2p, machine_state.index, machine_state.placements,
                       strategy.transfer_strategy)
    moved = np.random.default_rng(0).random((9, strategy.pp * ROUTES)) * 1e9
    moved[0] = 0.0
    alone = [float(table.index.busy_s(table.flow_bytes(row)).max()) for row in moved]
    assert alone[0] == 0.0 and min(alone[1:]) > 0.0
    assert table.busiest_s(moved).tolist() == pytest.approx(alone, rel=1e-12, abs=0)


def test_layouts_that_place_the_stages_alike_share_one_build_of_their_flows(monkeypatch):
    # with TP 1 the group layout changes no group: the two layouts' flows are built once
    import simulator.estimates

    built = []
    machine_flows = simulator.estimates.machine_flows
    monkeypatch.setattr(simulator.estimates, "machine_flows", lambda *a: built.append(a[1]) or machine_flows(*a))
    model, hardware = load_model("T-1.7B"), load_hardware("wafer")
    plan = Strategy(tp=1, pp=4, dp=8, global_batch_size=32, recompute="full")
    layouts = [dict(group_layout=layout, placement=placement) for placement in ("line", "row-snake")
               for layout in ("compact", "strided")]
    grid = estimate_product(model, hardware, [plan], layouts)
    assert len(built) == 2 and built[0] != built[1]
    assert grid[0, 0] == grid[0, 1] > 0 and grid[0, 2] == grid[0, 3] > 0
    assert grid[0].tolist() == [pytest.approx(_alone(model, hardware, plan.with_fields(**layout)), rel=1e-12)
                                for layout in layouts]
