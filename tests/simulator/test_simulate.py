"""End-to-end properties of simulate() on the presets."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import simulator
from simulator import BudgetExceeded, Strategy, load_hardware, load_model, simulate

WAFER = load_hardware("wafer")
A100 = load_hardware("a100-cluster")


@pytest.mark.parametrize("network", ["sharing", "contention", "analytical"])
def test_steady_state_extrapolation_is_within_half_a_percent_of_a_full_run(network):
    model = load_model("T-18B")
    strategy = Strategy(tp=8, dp=2, pp=20, recompute="full", global_batch_size=512)
    full = simulate(model, WAFER, strategy, network=network, steady_state=False)
    extrapolated = simulate(model, WAFER, strategy, network=network)
    assert extrapolated.extrapolated and not full.extrapolated
    assert extrapolated.simulated_microbatches < full.num_microbatches
    assert extrapolated.iteration_time_s == pytest.approx(full.iteration_time_s, rel=5e-3)


def test_palms_wafer_baseline_extrapolates_from_2_and_4_microbatches():
    # T-18B at TP 8 / DP 2 / PP 20 (PALM §V-B): the first short runs' period agrees with the
    # closed-form steady state to 0.1%, so 2 + 4 microbatches stand for 256.
    model = load_model("T-18B")
    strategy = Strategy(tp=8, dp=2, pp=20, recompute="full", global_batch_size=512)
    full = simulate(model, WAFER, strategy, steady_state=False)
    short = simulate(model, WAFER, strategy)
    assert short.simulated_microbatches == 2 + 4 and full.num_microbatches == 256
    assert short.iteration_time_s == pytest.approx(full.iteration_time_s, rel=5e-3)


def test_deep_pipelines_extrapolate_from_a_few_microbatches_when_the_period_is_the_steady_one():
    # PP 40 of T-18B: the period of 4 and 8 microbatches agrees with the closed-form steady state
    # (that of 2 and 4 not to 0.1%), so 2 + 4 + 8 microbatches are simulated instead of 40 + 80,
    # with the full run's answer.
    model, strategy = load_model("T-18B"), Strategy(tp=4, dp=2, pp=40, recompute="full", global_batch_size=512)
    wide = dataclasses.replace(WAFER, network=dataclasses.replace(WAFER.network, dies_x=10, dies_y=4))
    full = simulate(model, wide, strategy, steady_state=False)
    short = simulate(model, wide, strategy)
    assert short.simulated_microbatches == 2 + 4 + 8
    assert short.iteration_time_s == pytest.approx(full.iteration_time_s, rel=5e-3)


def test_when_the_first_short_runs_are_not_yet_steady_doubled_ones_are_tried_before_p_and_2p():
    # PP 20 of T-18B at TP 4: the periods of 2 and 4, and of 4 and 8 microbatches are not yet the
    # steady one, that of 8 and 16 is; 2 + 4 + 8 + 16 microbatches are simulated instead of 20 + 40.
    model, strategy = load_model("T-18B"), Strategy(tp=4, pp=20, recompute="full", global_batch_size=96)
    wide = dataclasses.replace(WAFER, network=dataclasses.replace(WAFER.network, dies_x=10, dies_y=4))
    full = simulate(model, wide, strategy, steady_state=False)
    short = simulate(model, wide, strategy)
    assert short.simulated_microbatches == 2 + 4 + 8 + 16
    assert short.iteration_time_s == pytest.approx(full.iteration_time_s, rel=5e-3)


def test_over_capacity_is_reported_not_simulated():
    model = load_model("T-145B")
    result = simulate(model, WAFER, Strategy(tp=8, dp=2, pp=20, recompute="none"))
    assert not result.feasible
    assert "GiB" in result.reason and "stage" in result.reason
    assert result.events_simulated == 0 and result.samples_per_s == 0


def test_result_round_trips_through_json():
    model = load_model("T-1.7B")
    result = simulate(model, A100, Strategy(tp=1, pp=2, dp=4, global_batch_size=32))
    import json

    doc = json.loads(result.to_json())
    assert doc["samples_per_s"] == pytest.approx(result.samples_per_s)
    assert len(doc["stages"]) == 2


def _scaled(hardware, factor):
    """``hardware`` with every link, NIC and DRAM bandwidth multiplied by ``factor``."""
    net, dram = hardware.network, hardware.memory.dram
    names = [f for f in net.__dataclass_fields__ if f.endswith("bandwidth_bytes_per_s")]
    net = dataclasses.replace(net, **{f: getattr(net, f) * factor for f in names if getattr(net, f) is not None})
    if dram is not None:
        dram = dataclasses.replace(dram, bandwidth_bytes_per_s=dram.bandwidth_bytes_per_s * factor)
    return dataclasses.replace(hardware, network=net, memory=dataclasses.replace(hardware.memory, dram=dram))


small_strategies = st.builds(
    lambda tp, pp, b, sched, rc, place, layout: Strategy(
        tp=tp, pp=pp, dp=16 // (tp * pp) if 16 % (tp * pp) == 0 else 1, microbatch_size=b,
        global_batch_size=64, schedule=sched, recompute=rc, placement=place, group_layout=layout),
    tp=st.sampled_from([1, 2, 4]), pp=st.sampled_from([1, 2, 4]), b=st.sampled_from([1, 2]),
    sched=st.sampled_from(["gpipe", "1f1b"]), rc=st.sampled_from(["none", "selective", "full"]),
    place=st.sampled_from(["line", "s-shape"]), layout=st.sampled_from(["compact", "strided"]),
)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(strategy=small_strategies, factor=st.sampled_from([1.5, 2.0, 4.0]),
       hardware=st.sampled_from([WAFER, A100]))
def test_more_bandwidth_is_never_slower(strategy, factor, hardware):
    model = load_model("T-1.7B")
    slow = simulate(model, hardware, strategy)
    fast = simulate(model, _scaled(hardware, factor), strategy)
    assert slow.feasible == fast.feasible
    if slow.feasible:
        assert fast.iteration_time_s <= slow.iteration_time_s * (1 + 1e-9)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(strategy=small_strategies, hardware=st.sampled_from([WAFER, A100]))
def test_throughput_never_exceeds_the_compute_roofline(strategy, hardware):
    result = simulate(load_model("T-1.7B"), hardware, strategy)
    if result.feasible:
        assert 0 < result.model_flops_utilisation <= result.hardware_flops_utilisation <= 1.0


# (switch, +1 if turning it on may only slow an iteration down / -1 if only speed it up, when it has no effect)
SWITCHES = [("tp_overlap", -1, lambda s: s.tp == 1), ("p2p_blocking", +1, lambda s: s.pp == 1)]


@pytest.mark.parametrize("switch, sign, inert", SWITCHES, ids=[name for name, _, _ in SWITCHES])
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(strategy=small_strategies, hardware=st.sampled_from([WAFER, A100]))
def test_a_waiting_switch_moves_time_one_way_only(switch, sign, inert, strategy, hardware):
    model = load_model("T-1.7B")
    off = simulate(model, hardware, strategy, network="analytical")
    on = simulate(model, hardware, dataclasses.replace(strategy, **{switch: True}), network="analytical")
    assert on.feasible == off.feasible
    if off.feasible:
        assert sign * (on.iteration_time_s - off.iteration_time_s) >= -1e-9 * off.iteration_time_s
        if inert(strategy):
            assert on.iteration_time_s == pytest.approx(off.iteration_time_s, rel=1e-12)


def test_public_api_is_importable_from_the_package():
    assert callable(simulator.simulate) and callable(simulator.load_strategy)


def test_a_simulation_over_its_event_or_time_budget_stops_with_the_reason():
    model, strategy = load_model("T-18B"), Strategy(tp=8, dp=2, pp=20, recompute="full")
    whole = simulate(model, WAFER, strategy)
    assert simulate(model, WAFER, strategy, event_limit=whole.events_simulated * 2,
                    time_limit_s=600).iteration_time_s == whole.iteration_time_s
    with pytest.raises(BudgetExceeded, match="over its budget of 100"):
        simulate(model, WAFER, strategy, event_limit=100)
    with pytest.raises(BudgetExceeded, match="wall-clock budget"):
        simulate(model, WAFER, strategy, time_limit_s=1e-9)


@pytest.mark.parametrize("network", ["sharing", "contention"])
def test_remembered_passes_count_the_same_bytes_and_time_as_computed_ones(network, monkeypatch):
    # The engine remembers each pass's segments and phases with the bytes they count, and counts
    # them again on reuse: the outcome must equal computing every pass afresh.
    from simulator.timing.machine import Machine

    model, strategy = load_model("T-18B"), Strategy(tp=4, dp=2, pp=8, recompute="full", zero_stage=3)
    remembered = simulate(model, WAFER, strategy, network=network)
    monkeypatch.setattr(Machine, "memo", lambda self, kind, i, what, compute, *args: compute(*args))
    computed = simulate(model, WAFER, strategy, network=network)
    assert remembered.traffic_bytes == pytest.approx(computed.traffic_bytes, rel=1e-12)
    assert remembered.iteration_time_s == pytest.approx(computed.iteration_time_s, rel=1e-12)
    assert [r.max_utilisation for r in remembered.resources] == pytest.approx(
        [r.max_utilisation for r in computed.resources], rel=1e-12)
