"""One list of strategy fields: the command line's flags, the trials table's columns, the fields
the stage costs ignore and the fields the placement reads all come from ``Strategy``'s metadata."""

from __future__ import annotations

import dataclasses
import inspect
import re
from pathlib import Path
from typing import Literal

import click
import pytest
import typer
from hypothesis import given, settings
from hypothesis import strategies as st

from palm_search.commands.cli import app, simulate_command, with_strategy_flags
from simulator import (
    Strategy,
    StrategyFlag,
    is_inference,
    load_hardware,
    load_model,
    strategy_fields,
    strategy_flags,
)
from simulator.api import PLACEMENT_FIELDS
from simulator.network.topology import topology_of
from simulator.placement import place
from simulator.strategy import projection


def _simulate_options() -> dict[str, click.Option]:
    command = typer.main.get_command(app)
    simulate = command.get_command(click.Context(command), "simulate")  # type: ignore[attr-defined]
    return {p.name: p for p in simulate.params if p.name}


def test_simulate_options_are_the_strategy_flags_and_its_own_parameters():
    code = simulate_command.__code__
    own = set(code.co_varnames[:code.co_argcount + code.co_kwonlyargcount])  # what its `def` lists
    assert set(_simulate_options()) == set(strategy_fields(flag=True)) | own
    assert not own & set(strategy_fields(flag=True))
    # every strategy field is reachable: its own flag, or one of the explicit-list flags
    assert set(strategy_fields()) - set(strategy_fields(flag=True)) == {"stage_layers", "stage_devices"} <= own


def test_each_strategy_flag_is_an_option_with_the_field_help_and_switches_for_bools():
    options = _simulate_options()
    for flag in strategy_flags():
        option = options[flag.name]
        dashed = flag.name.replace("_", "-")
        assert option.help == flag.help and "{" not in flag.help and flag.help.endswith(".")
        assert option.default is None
        assert (option.opts, option.secondary_opts) == (
            ([f"--{dashed}"], [f"--no-{dashed}"]) if flag.value_type is bool else ([f"--{dashed}"], []))


def test_a_literal_field_lists_its_values_in_its_help():
    schedule = next(flag for flag in strategy_flags() if flag.name == "schedule")
    assert schedule == StrategyFlag("schedule", str, "gpipe, 1f1b, interleaved-1f1b or zb-h1.")


def test_the_decorator_puts_the_flags_after_the_named_parameter_and_passes_them_as_keywords():
    def command(first: int = 1, second: int = 2, **flags):
        return first, second, flags

    names = list(inspect.signature(with_strategy_flags(after="first")(command)).parameters)
    assert names == ["first", *strategy_fields(flag=True), "second"]
    assert command(tp=4, first=3) == (3, 2, {"tp": 4})


def test_a_flag_must_take_a_scalar():
    from simulator.strategy import _flag

    assert _flag("mode", Literal["training", "inference"] | None).value_type is str
    with pytest.raises(TypeError, match="stage_layers"):
        _flag("stage_layers", tuple[int, ...] | None)


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


def test_the_mode_is_read_in_one_place():
    assert is_inference("inference") and not is_inference("training") and not is_inference(None)
    assert Strategy().training and not Strategy(mode="inference").training
    root = Path(__file__).resolve().parents[2]
    readers = {str(path.relative_to(root)) for package in ("simulator", "spaces", "palm_search")
               for path in (root / package).rglob("*.py")
               if re.search(r"""(==|!=)\s*["'](inference|training)["']|mode\s*(==|!=)""", path.read_text())}
    assert readers == {"simulator/strategy.py"}
