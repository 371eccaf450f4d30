"""The min-max partition: optimal, never worse than uniform, within memory."""

from __future__ import annotations

import itertools
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import simulator
from simulator.workload.partition import uniform_partition
from simulator.workload.stages import build_stage_costs
from spaces import partition

times_st = st.lists(st.floats(min_value=0.0, max_value=100.0, allow_nan=False), min_size=1, max_size=14)


def _largest(values, counts):
    starts = list(itertools.accumulate(counts, initial=0))
    return max(sum(values[a:b]) for a, b in itertools.pairwise(starts))


def _brute_force(times, memory, stages, limit):
    best = None
    for cuts in itertools.combinations(range(1, len(times)), stages - 1):
        counts = [b - a for a, b in itertools.pairwise((0, *cuts, len(times)))]
        starts = list(itertools.accumulate(counts, initial=0))
        if all(sum(memory[i][a:b]) <= limit for i, (a, b) in enumerate(itertools.pairwise(starts))):
            value = _largest(times, counts)
            best = value if best is None else min(best, value)
    return best


@settings(max_examples=200, deadline=None)
@given(times=times_st, data=st.data())
def test_never_slower_than_uniform(times, data):
    stages = data.draw(st.integers(1, len(times)))
    counts = partition.min_max_partition(times, [0.0] * len(times), stages, 1.0)
    assert sum(counts) == len(times) and len(counts) == stages and min(counts) >= 1
    assert _largest(times, counts) <= _largest(times, uniform_partition(len(times), stages)) * (1 + 1e-9)


@settings(max_examples=200, deadline=None)
@given(times=times_st, data=st.data())
def test_optimal_under_stage_dependent_memory(times, data):
    n = len(times)
    stages = data.draw(st.integers(1, min(n, 6)))
    memory = [[float(v) for v in data.draw(st.lists(st.integers(0, 9), min_size=n, max_size=n))]
              for _ in range(stages)]
    limit = float(data.draw(st.integers(0, 40)))
    best = _brute_force(times, memory, stages, limit)
    if best is None:
        with pytest.raises(simulator.InputError, match="fits"):
            partition.min_max_partition(times, memory, stages, limit)
        return
    counts = partition.min_max_partition(times, memory, stages, limit)
    starts = list(itertools.accumulate(counts, initial=0))
    assert all(sum(memory[i][a:b]) <= limit for i, (a, b) in enumerate(itertools.pairwise(starts)))
    assert _largest(times, counts) == pytest.approx(best, rel=1e-9, abs=1e-12)


def test_small_cases_and_errors():
    assert partition.min_max_partition([1, 2, 3, 4, 5], [1] * 5, 2, 10) == (3, 2)
    with pytest.raises(simulator.InputError, match="non-empty"):
        partition.min_max_partition([1, 2], [0, 0], 3, 1.0)
    with pytest.raises(simulator.InputError, match="fits"):
        partition.min_max_partition([1, 2, 3], [5, 5, 5], 2, 6.0)
    with pytest.raises(simulator.InputError, match="layer_memory"):
        partition.min_max_partition([1, 2, 3], [[1, 1, 1]], 2, 6.0)


MODEL = simulator.load_model("T-18B")
WAFER = simulator.load_hardware("wafer")


def test_per_layer_costs_add_up_to_the_stage_costs():
    strategy = simulator.Strategy(tp=4, pp=20, dp=4, recompute="full")
    times, static, activations = partition.layer_costs(MODEL, WAFER, strategy)
    stages = build_stage_costs(MODEL, WAFER, replace(strategy, partition="uniform"))
    assert len(times) == MODEL.num_layers
    assert sum(times) == pytest.approx(sum(s.forward.compute_s + s.backward.compute_s for s in stages))
    assert sum(static) == pytest.approx(sum(s.memory.total_bytes(0) for s in stages))
    assert sum(activations) == pytest.approx(sum(s.memory.activation_bytes_per_microbatch for s in stages))
    assert times[0] > times[1] and times[-1] > times[1]  # embedding and logits


@pytest.mark.parametrize("strategy", [
    simulator.Strategy(tp=4, pp=20, dp=4, recompute="full"),
    simulator.Strategy(tp=4, pp=16, dp=5, recompute="full", schedule="gpipe", global_batch_size=80),
    simulator.Strategy(tp=4, pp=10, dp=8, recompute="full", schedule="interleaved-1f1b", num_chunks=2,
                       global_batch_size=2560),
    simulator.Strategy(tp=4, pp=10, dp=8, mode="inference"),
])
def test_min_max_stage_layers_fit_and_beat_uniform(strategy):
    layers = partition.min_max_stage_layers(MODEL, WAFER, strategy)
    explicit = replace(strategy, partition="explicit", stage_layers=layers)
    uniform = replace(strategy, partition="uniform")
    def slowest(s):
        return max(c.forward.compute_s + c.backward.compute_s for c in build_stage_costs(MODEL, WAFER, s))
    assert slowest(explicit) <= slowest(uniform) * (1 + 1e-9)
    in_flight = partition.in_flight_per_virtual_stage(MODEL, strategy)
    per_device = [0.0] * strategy.pp
    for j, cost in enumerate(build_stage_costs(MODEL, WAFER, explicit)):
        per_device[j % strategy.pp] += cost.memory.total_bytes(in_flight[j])
    assert max(per_device) <= WAFER.device_memory_bytes() * (1 + 1e-9)


def test_no_fit_raises_and_enumerate_leaves_min_max_out():
    big = simulator.load_model("T-145B")
    strategy = simulator.Strategy(tp=8, pp=20, dp=2)
    with pytest.raises(simulator.InputError, match="fits"):
        partition.min_max_stage_layers(big, WAFER, strategy)
    assert list(partition.enumerate_partitions(big, WAFER, strategy)) == ["balanced", "uniform"]
    one_stage = simulator.Strategy(tp=4, pp=1, dp=80)
    assert partition.min_max_stage_layers(MODEL, WAFER, one_stage) == (MODEL.num_layers,)


def test_resnet_units():
    resnet = simulator.load_model("ResNet-50")
    layers = partition.min_max_stage_layers(resnet, WAFER, simulator.Strategy(tp=1, pp=6, dp=16))
    assert sum(layers) == 18 and len(layers) == 6
