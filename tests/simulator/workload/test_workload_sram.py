"""PALM Algorithm 1 (arXiv 2406.03868, §IV-C) on hand-built operators."""

from __future__ import annotations

import pytest

from simulator.strategy import Strategy
from simulator.workload.operators import Operator
from simulator.workload.sram import PlanFields, operator_access, plan_stage, stage_totals

CAPACITY = 100.0
INFERENCE = PlanFields.of(Strategy(mode="inference"))
TRAINING = PlanFields.of(Strategy())


def gemm(weight: float, inputs: float, outputs: float = 10.0, name: str = "op") -> Operator:
    return Operator(name=name, kind="gemm", flops=1.0, weight_bytes=weight, input_bytes=inputs,
                    output_bytes=outputs)


def access(op: Operator, fields: PlanFields = INFERENCE):
    return operator_access(op, stage_totals([((op,), 1)], fields), CAPACITY, fields)


def test_activation_stream_when_weights_fit():
    result = access(gemm(weight=50, inputs=500))
    assert (result.strategy, result.forward_dram_bytes) == ("activation_stream", 510)


def test_weight_stream_when_activations_fit():
    result = access(gemm(weight=500, inputs=50))
    assert (result.strategy, result.forward_dram_bytes) == ("weight_stream", 500)


def test_weight_stationary_when_phi1_smaller():
    # Phi1 = ceil(200/100) * 150 = 300 < Phi2 = ceil(150/100) * 200 = 400
    result = access(gemm(weight=200, inputs=150))
    assert (result.strategy, result.forward_dram_bytes) == ("weight_stationary", 300 + 10)


def test_input_stationary_when_phi2_smaller():
    # Phi1 = ceil(150/100) * 200 = 400 >= Phi2 = ceil(200/100) * 150 = 300
    result = access(gemm(weight=150, inputs=200))
    assert (result.strategy, result.forward_dram_bytes) == ("input_stationary", 300 + 10)


def test_stage_sums_decide_for_every_operator():
    small = gemm(weight=40, inputs=30, name="a")
    plan = plan_stage([((small, small), 3)], CAPACITY, TRAINING)   # Wt = 240 >= S, ACT = 180 > S
    assert set(plan.strategies) == {"weight_stationary"}
    assert plan.forward_dram_bytes == pytest.approx(6 * (1 * 30 + 10))


def test_inference_keeps_only_the_live_activations():
    small = gemm(weight=40, inputs=30, name="a")
    plan = plan_stage([((small, small), 3)], CAPACITY, INFERENCE)   # Wt = 240 >= S, ACT = 30 + 10 <= S
    assert set(plan.strategies) == {"weight_stream"}
    assert plan.forward_dram_bytes == pytest.approx(6 * 40)


def test_everything_resident_when_states_and_activations_fit():
    op = gemm(weight=30, inputs=40, outputs=10)
    result = access(op)  # inference: WSG = Wt = 30, ACT = 50
    assert (result.strategy, result.forward_dram_bytes) == ("resident", 0.0)
    assert plan_stage([((op,), 1)], CAPACITY, INFERENCE).resident_bytes == pytest.approx(80)


def test_backward_and_update_in_stationary_branch():
    op = gemm(weight=200, inputs=150)
    result = access(op, TRAINING)
    data = min(2 * 10, 1 * 200) + 150              # Phi(dY=10, W=200) + dX
    weight = min(2 * 160, 2 * 200) + 200           # Phi(X + dY = 160, G=200) + G
    assert result.backward_dram_bytes == pytest.approx(data + weight)
    plan = plan_stage([((op,), 1)], CAPACITY, PlanFields.of(Strategy(dp=2, zero_stage=1)))
    assert plan.update_dram_bytes == pytest.approx(100 / 2 * 28)   # 100 parameters of 2 bytes


def test_everything_on_chip_needs_no_update_traffic():
    plan = plan_stage([((gemm(weight=4, inputs=500),), 1)], CAPACITY, TRAINING)   # WSG = 2 * 16 = 32
    assert plan.update_dram_bytes == 0
    assert plan.resident_bytes == pytest.approx(32)


def test_recompute_adds_forward_traffic_to_backward():
    op = gemm(weight=40, inputs=500)
    plain = plan_stage([((op,), 2)], CAPACITY, TRAINING)
    recomputed = plan_stage([((op,), 2)], CAPACITY, TRAINING, recomputed=[((op,), 2)])
    assert recomputed.backward_dram_bytes - plain.backward_dram_bytes == pytest.approx(2 * 510)
    assert plan_stage([((op,), 2)], CAPACITY, INFERENCE).backward_dram_bytes == 0
