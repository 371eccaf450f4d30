"""The search proposes only what the simulator accepts: one set of rules (simulator.legality)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import simulator
from simulator.legality import check_plan, divisors
from spaces import parallelism
from spaces.parallelism import ParallelDegrees

PAIRS = [("T-18B", "wafer"), ("LLaMA2-7B", "grayskull"), ("ResNet-50", "grayskull"), ("GPT3-175B", "a100-cluster")]
LOADED = {pair: (simulator.load_model(pair[0]), simulator.load_hardware(pair[1])) for pair in PAIRS}


@st.composite
def plans(draw):
    """A model, a machine and a strategy with arbitrary (often illegal) degrees and batch split."""
    model, hardware = LOADED[draw(st.sampled_from(PAIRS))]
    devices = draw(st.sampled_from(divisors(hardware.num_devices)))
    tp = draw(st.sampled_from(divisors(devices)))
    pp = draw(st.sampled_from(divisors(devices // tp)))
    schedule, chunks = draw(st.sampled_from([("gpipe", 1), ("1f1b", 1), ("interleaved-1f1b", 2),
                                             ("interleaved-1f1b", 4)]))
    strategy = simulator.Strategy(
        tp=tp, pp=pp, dp=devices // (tp * pp), microbatch_size=draw(st.integers(1, 64)), schedule=schedule,
        num_chunks=chunks, sequence_parallel=draw(st.booleans()))
    return model, hardware, strategy


def proposed(model, hardware, strategy) -> bool:
    """True if ``spaces`` enumerates this point (degrees, microbatch, schedule, sequence parallelism)."""
    degrees = ParallelDegrees(strategy.tp, strategy.pp, strategy.dp)
    if degrees not in parallelism.enumerate_degrees(model, hardware, devices=strategy.num_devices):
        return False
    if strategy.microbatch_size not in parallelism.enumerate_microbatch_sizes(model, degrees):
        return False
    choices = parallelism.enumerate_schedules(model, degrees, strategy.microbatch_size)
    return (parallelism.ScheduleChoice(strategy.schedule, strategy.num_chunks) in choices
            and strategy.sequence_parallel in parallelism.enumerate_sequence_parallel(model, degrees))


def accepted(model, hardware, strategy) -> bool:
    try:
        check_plan(model, hardware, strategy)
    except simulator.InputError:
        return False
    return True


@settings(max_examples=400, deadline=None)
@given(plans())
def test_what_spaces_proposes_the_simulator_accepts(plan):
    model, hardware, strategy = plan
    if proposed(model, hardware, strategy):
        assert accepted(model, hardware, strategy)
    if not accepted(model, hardware, strategy):
        assert not proposed(model, hardware, strategy)


@pytest.mark.parametrize(("model_name", "hardware_name"), PAIRS)
def test_every_enumerated_degree_has_an_accepted_plan(model_name, hardware_name):
    model, hardware = LOADED[(model_name, hardware_name)]
    for degrees in parallelism.enumerate_degrees(model, hardware):
        for b in parallelism.enumerate_microbatch_sizes(model, degrees, choices=[1, 2, 4, 8]):
            for choice in parallelism.enumerate_schedules(model, degrees, b):
                strategy = simulator.Strategy(tp=degrees.tp, pp=degrees.pp, dp=degrees.dp, microbatch_size=b,
                                              schedule=choice.schedule, num_chunks=choice.num_chunks)
                assert accepted(model, hardware, strategy), strategy


def test_simulator_rejects_what_the_rules_forbid():
    model, hardware = LOADED[("T-18B", "wafer")]
    with pytest.raises(simulator.InputError, match="not divisible by tp = 5"):
        check_plan(model, hardware, simulator.Strategy(tp=5, dp=64))
    with pytest.raises(simulator.InputError, match="exceeds its 40 layers"):
        check_plan(model, hardware, simulator.Strategy(pp=80))
    with pytest.raises(simulator.InputError, match="devices, the machine has 320"):
        check_plan(model, hardware, simulator.Strategy(tp=8, pp=40, dp=2))
    with pytest.raises(simulator.InputError, match="multiple of microbatch_size"):
        check_plan(model, hardware, simulator.Strategy(dp=5, microbatch_size=7))
