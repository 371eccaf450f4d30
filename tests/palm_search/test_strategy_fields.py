"""One list of strategy fields: the command line's flags, the trials table's columns, the fields
the stage costs ignore and the fields the placement reads all come from ``Strategy``'s metadata."""

from __future__ import annotations

import dataclasses

import click
import typer
from hypothesis import given, settings
from hypothesis import strategies as st

from palm_search.commands.cli import STRATEGY_FLAGS, app
from palm_search.views.outputs import COLUMNS
from simulator import Strategy, load_hardware, strategy_fields
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


def test_the_trials_table_and_the_cost_key_come_from_the_strategy_fields():
    assert COLUMNS[1:COLUMNS.index("samples_per_s")] == strategy_fields(column=True)
    defaults = {f.name: f.default for f in dataclasses.fields(Strategy)}
    assert PLACEMENT_FIELDS == {name: defaults[name] for name in strategy_fields(where=True)}


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
