"""Named placements give pp disjoint groups of tp*dp valid devices; custom placements are checked."""

from __future__ import annotations

from dataclasses import replace

import optuna
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import simulator
from simulator.legality import divisors
from simulator.network.topology import topology_of
from simulator.placement import place
from spaces import placement
from spaces.parallelism import ParallelDegrees

WAFER = simulator.load_hardware("wafer")


def small_mesh(dies=(3, 2), cores=(2, 3)):
    """The wafer preset shrunk to ``dies`` of ``cores`` (odd sizes on purpose)."""
    network = replace(WAFER.network, dies_x=dies[0], dies_y=dies[1], cores_x=cores[0], cores_y=cores[1])
    return replace(WAFER, name="small-mesh", network=network)


MACHINES = [WAFER, simulator.load_hardware("grayskull"), small_mesh(), small_mesh((1, 3), (4, 1))]


def _degrees(hardware):
    n = hardware.num_devices
    return [ParallelDegrees(tp, pp, n // (tp * pp)) for tp in divisors(n)
            for pp in divisors(n // tp)]


@pytest.mark.parametrize("hardware", MACHINES, ids=lambda h: h.name + str(h.num_devices))
def test_every_placement_has_pp_groups_of_distinct_valid_devices(hardware):
    topology = topology_of(hardware)
    for degrees in _degrees(hardware)[::3]:
        names = placement.enumerate_placements(hardware, degrees)
        assert names == placement.placement_names(hardware)
        for name in names:
            strategy = simulator.Strategy(tp=degrees.tp, pp=degrees.pp, dp=degrees.dp, placement=name)
            placed = place(topology, strategy)
            devices = [d for stage in placed for d in stage.devices]
            assert len(placed) == degrees.pp
            assert all(len(stage.devices) == degrees.tp * degrees.dp for stage in placed)
            assert len(set(devices)) == len(devices) == hardware.num_devices
            assert all(0 <= d < hardware.num_devices for d in devices)


@pytest.mark.parametrize("hardware", MACHINES, ids=lambda h: h.name + str(h.num_devices))
def test_offered_names_are_distinct_orders_led_by_line(hardware):
    orders = topology_of(hardware).device_orders()
    names = placement.placement_names(hardware)
    assert names[0] == "line" and ("s-shape" in names or orders["s-shape"] == orders["line"])
    assert len({tuple(orders[n]) for n in names}) == len(names)
    assert {tuple(o) for o in orders.values()} == {tuple(orders[n]) for n in names}


def test_a_cluster_only_has_line():
    cluster = simulator.load_hardware("a100-cluster")
    assert placement.enumerate_placements(cluster, ParallelDegrees(8, 12, 32)) == ("line",)


def test_too_many_devices_is_an_input_error():
    with pytest.raises(simulator.InputError, match="exceeds"):
        placement.enumerate_placements(WAFER, ParallelDegrees(8, 40, 2))


def test_custom_placements_are_validated():
    hardware, degrees = small_mesh(), ParallelDegrees(1, 2, 2)  # 36 devices
    good = placement.custom_placements({"mine": [[0, 1], [2, 3]]}, hardware, degrees)
    assert good == {"mine": ((0, 1), (2, 3))}
    bad = [
        ({"x": [[0, 1], [2, 36]]}, "not in 0..35"),
        ({"x": [[0, 1], [1, 2]]}, "used twice"),
        ({"x": [[0, 1], [2]]}, "same number"),
        ({"x": [[0, 1, 2], [3, 4, 5]]}, "needs pp = 2 stages of tp\\*cp\\*dp = 2"),
        ({"x": [0, 1]}, "every stage must be a list"),
        ({"x": []}, "non-empty"),
        ({"x": [[0, True], [2, 3]]}, "device id True"),
        ({"hilbert": [[0, 1], [2, 3]]}, "taken"),
    ]
    for spec, message in bad:
        with pytest.raises(simulator.InputError, match=message) as error:
            placement.custom_placements(spec, hardware, degrees)
        assert "\n" not in str(error.value)


def test_suggest_placement_keeps_choices_fixed_with_custom_placements():
    hardware = small_mesh()
    custom = placement.custom_placements({"pairs": [[0, 1], [2, 3]], "quads": [[0, 1, 2, 3]]}, hardware)
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    choices = [ParallelDegrees(1, 2, 1), ParallelDegrees(2, 1, 2), ParallelDegrees(1, 2, 2)]
    for number in range(50):
        trial = study.ask()
        degrees = choices[number % 3]
        fields = placement.suggest_placement(trial, hardware, degrees, custom)
        strategy = simulator.Strategy(tp=degrees.tp, pp=degrees.pp, dp=degrees.dp, **fields)
        place(topology_of(hardware), strategy)
        study.tell(trial, 0.0)
    names = {name for t in study.trials for name in t.params}
    assert "placement|without=quads" in names and "placement|without=pairs" in names


@settings(max_examples=200, deadline=None)
@given(tp=st.integers(1, 4), pp=st.integers(1, 4), dp=st.integers(1, 4), cp=st.integers(2, 4),
       stages=st.integers(1, 4), per_stage=st.integers(1, 64))
def test_fits_agrees_with_strategy_under_context_parallelism(tp, pp, dp, cp, stages, per_stage):
    """A custom placement fits the degrees exactly when ``simulator.Strategy`` takes it: ``pp``
    stages of ``tp * cp * dp`` devices (context parallelism included)."""
    degrees = ParallelDegrees(tp, pp, dp, cp)
    stage_devices = tuple(tuple(range(k * per_stage, (k + 1) * per_stage)) for k in range(stages))
    try:
        simulator.Strategy(tp=tp, pp=pp, dp=dp, cp=cp, placement="explicit", stage_devices=stage_devices)
        accepted = True
    except simulator.InputError:
        accepted = False
    assert placement.fits(stage_devices, degrees) == accepted
    exact = tuple(tuple(range(k * tp * cp * dp, (k + 1) * tp * cp * dp)) for k in range(pp))
    assert placement.fits(exact, degrees)


@pytest.mark.parametrize(("degrees", "offered"), [
    (ParallelDegrees(16, 20, 4), ["span", "within"]),   # stages of 64 cores: five a wafer
    (ParallelDegrees(16, 10, 6), ["span"]),             # stages of 96 cores: stage 3 would cross a wafer
])
def test_several_wafers_offer_stages_within_a_wafer_where_none_would_cross(degrees, offered):
    hardware = simulator.load_hardware("wafer-4")
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    seen = set()
    for _ in range(30):
        trial = study.ask()
        fields = placement.suggest_placement(trial, hardware, degrees)
        seen.add(fields["wafer_stages"])
        strategy = simulator.Strategy(tp=degrees.tp, pp=degrees.pp, dp=degrees.dp, **fields)
        simulator.legality.check_plan(simulator.load_model("T-145B"), hardware, strategy)
        study.tell(trial, 0.0)
    assert sorted(seen) == offered


def test_one_wafer_is_asked_no_wafer_stages():
    trial = optuna.create_study().ask()
    assert "wafer_stages" not in placement.suggest_placement(trial, WAFER, ParallelDegrees(16, 5, 4))
    assert set(trial.params) == {"placement"}
