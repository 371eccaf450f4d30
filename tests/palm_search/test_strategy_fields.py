"""One list of strategy fields: the command line's flags, the trials table's columns, the fields
the stage costs ignore and the fields the placement reads all come from ``Strategy``'s metadata."""

from __future__ import annotations

import dataclasses

import click
import typer
from hypothesis import given, settings
from hypothesis import strategies as st

from palm_search.commands.cli import STRATEGY_FLAGS, app
from simulator import Strategy, load_hardware, load_model, strategy_fields
from simulator.api import PLACEMENT_FIELDS
from simulator.network.topology import topology_of
from simulator.placement import place
from simulator.strategy import projection


def _simulate_options() -> set[str]:
    command = typer.main.get_command(app)
    simulate = command.get_command(click.Context(command), "simulate")  # type: ignore[attr-defined]
    return {p.name for p in simulate.params if p.name}


def test_simulate_has_a_flag_for_every_strategy_field():
    options = _simulate_options()
    assert set(STRATEGY_FLAGS) <= options
    # every strategy field is reachable: its own flag, or one of the explicit-list flags
    assert set(strategy_fields()) - set(STRATEGY_FLAGS) == {"stage_layers", "stage_devices"} <= options


def test_the_cost_key_ignores_exactly_the_fields_no_stage_cost_reads():
    # the fields marked `where` (placement, groups, transfers) must not change a stage's costs; a
    # field wrongly marked would make two different plans share one cost entry
    from simulator.workload import build_stage_costs

    model, wafer = load_model("T-1.7B"), load_hardware("wafer")
    base = Strategy(tp=2, pp=2, dp=2, global_batch_size=16)
    changed = dataclasses.replace(base, **{name: value for name, value in (
        ("placement", "line"), ("group_layout", "strided"), ("group_order", "dp-major"),
        ("transfer_strategy", 2), ("p2p_blocking", True)) if name in PLACEMENT_FIELDS})
    assert build_stage_costs(model, wafer, base) == build_stage_costs(model, wafer, changed)


WAFER = load_hardware("wafer")


@settings(max_examples=40, deadline=None)
@given(tp=st.sampled_from([1, 2, 4]), pp=st.sampled_from([1, 2, 5]), dp=st.sampled_from([1, 2]),
       schedule=st.sampled_from(["gpipe", "1f1b"]), recompute=st.sampled_from(["none", "full"]),
       placement=st.sampled_from(["line", "s-shape", "hilbert"]), layout=st.sampled_from(["compact", "strided"]),
       order=st.sampled_from(["tp-major", "dp-major"]), zero=st.sampled_from([0, 1, 3]))
def test_the_placement_depends_only_on_the_fields_it_reads(tp, pp, dp, schedule, recompute, placement, layout,
                                                           order, zero):
    strategy = Strategy(tp=tp, pp=pp, dp=dp, schedule=schedule, recompute=recompute, placement=placement,
                        group_layout=layout, group_order=order, zero_stage=zero)
    topology = topology_of(WAFER)
    key = projection(strategy, placed=True)
    assert {n for n in strategy_fields() if getattr(key, n) != getattr(strategy, n)} <= set(
        strategy_fields(placed=False))
    assert place(topology, strategy) == place(topology, key)
