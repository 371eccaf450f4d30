"""Model states (ZeRO §3.1) and activations (Korthikanti et al. MLSys'23 §4) per device."""

from __future__ import annotations

import pytest
from workload_fixtures import gpt

from simulator.strategy import Strategy
from simulator.workload import memory


@pytest.mark.parametrize("strategy, total", [
    (Strategy(optimizer="adam", precision="fp16"), 16),
    (Strategy(optimizer="adam", precision="bf16"), 16),
    (Strategy(optimizer="sgd", precision="fp16"), 8),
    (Strategy(optimizer="adam", precision="fp32"), 16),
    (Strategy(optimizer="sgd", precision="fp32"), 8),
    (Strategy(mode="inference", precision="fp16"), 2),
])
def test_state_bytes_per_parameter(strategy, total):
    assert memory.state_bytes_per_parameter(strategy).total_bytes == total


def test_mixed_precision_adam_is_2_2_12():
    per = memory.state_bytes_per_parameter(Strategy())
    assert (per.weights_bytes, per.gradients_bytes, per.optimizer_bytes) == (2, 2, 12)


@pytest.mark.parametrize("zero, expected", [
    (0, (2, 2, 12)), (1, (2, 2, 3)), (2, (2, 0.5, 3)), (3, (0.5, 0.5, 3))])
def test_zero_stages_shard_over_dp(zero, expected):
    states = memory.sharded_state_bytes(1.0, Strategy(dp=4, zero_stage=zero))
    assert (states.weights_bytes, states.gradients_bytes, states.optimizer_bytes) == expected


def test_zero3_divides_everything_by_dp():
    states = memory.sharded_state_bytes(1e9, Strategy(dp=8, zero_stage=3))
    assert states.total_bytes == pytest.approx(16e9 / 8)


def test_optimizer_step_traffic():
    assert memory.optimizer_step_bytes_per_parameter(Strategy()) == 28
    assert memory.optimizer_step_bytes_per_parameter(Strategy(optimizer="sgd")) == 12
    assert memory.optimizer_step_bytes_per_parameter(Strategy(precision="fp32")) == 28
    assert memory.optimizer_step_bytes_per_parameter(Strategy(mode="inference")) == 0


# s=64, b=2, h=128, a=4, t=2: sbh = 16384, 5as/(ht) = 5*4*64/(128*2) = 5
SBH = 64 * 2 * 128


@pytest.mark.parametrize("recompute, sequence_parallel, per_sbh", [
    ("none", False, 10 + 24 / 2 + 5),
    ("none", True, 34 / 2 + 5),
    ("selective", False, 10 + 24 / 2),
    ("selective", True, 34 / 2),
    ("full", False, 2),
    ("full", True, 2 / 2),
])
def test_layer_activations_match_korthikanti(recompute, sequence_parallel, per_sbh):
    model = gpt(layers=2, hidden=128, heads=4, sequence=64)
    strategy = Strategy(tp=2, microbatch_size=2, recompute=recompute, sequence_parallel=sequence_parallel)
    assert memory.layer_activation_bytes(model, strategy) == pytest.approx(SBH * per_sbh)


def test_activations_scale_with_precision():
    model = gpt(layers=2, hidden=128, heads=4, sequence=64)
    half = memory.layer_activation_bytes(model, Strategy(tp=2, microbatch_size=2))
    full = memory.layer_activation_bytes(model, Strategy(tp=2, microbatch_size=2, precision="fp32"))
    assert full == pytest.approx(2 * half)


def test_logits_activations_with_sequence_parallelism():
    model = gpt(layers=2, hidden=128, heads=4, sequence=64, vocab=1000)
    strategy = Strategy(tp=2, microbatch_size=2, sequence_parallel=True)
    expected = 4 * SBH / 2 * (1 + 1000 / 128)
    assert memory.logits_activation_bytes(model, strategy) == pytest.approx(expected)
