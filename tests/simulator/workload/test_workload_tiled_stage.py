"""The tiled dataflow of a stage: lower bounds, closed forms, sharing, and the stage's wiring."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from workload_fixtures import gpt, wafer

from simulator.strategy import Strategy
from simulator.workload import operators
from simulator.workload.sram import PlanFields, plan_stage, replicas_per_chip
from simulator.workload.stages import build_stage_costs
from simulator.workload.tiled import GemmShape, universal_lower_bound_bytes
from simulator.workload.tiled_stage import operator_traffic, plan_stage_tiled, product_traffic

SIDES = st.sampled_from([32, 96, 256, 768, 1024, 3072, 12288])
SRAM = st.sampled_from([256e3, 1e6, 1.5e6, 3.75e6, 16e6])
GRIDS = st.sampled_from([(1, 1), (1, 2), (1, 8), (4, 1), (8, 8), (10, 2)])


@settings(max_examples=150, deadline=None)
@given(m=SIDES, k=SIDES, n=SIDES, sram=SRAM, grid=GRIDS)
def test_a_grid_never_beats_the_lower_bound_of_its_pooled_sram(m, k, n, sram, grid):
    rows, columns = grid
    per_device = product_traffic(m, k, n, 2, sram, grid=grid)
    whole = GemmShape(m=m * rows, k=k, n=n * columns, bytes_per_element=2)
    assert per_device.dram_bytes * rows * columns >= universal_lower_bound_bytes(whole, sram * rows * columns) * (
        1 - 1e-12)


@settings(max_examples=150, deadline=None)
@given(m=SIDES, k=SIDES, n=SIDES, sram=SRAM, columns=st.sampled_from([2, 4, 8]))
def test_sharing_the_input_never_costs_a_device_more_dram(m, k, n, sram, columns):
    alone = product_traffic(m, k, n, 2, sram)
    shared = product_traffic(m, k, n, 2, sram, grid=(1, columns))
    assert shared.dram_bytes <= alone.dram_bytes * (1 + 1e-12)
    assert shared.multicast_bytes > 0 and alone.multicast_bytes == 0


@settings(max_examples=150, deadline=None)
@given(m=SIDES, k=SIDES, n=SIDES)
def test_traffic_falls_as_sram_grows(m, k, n):
    moved = [product_traffic(m, k, n, 2, sram).dram_bytes for sram in (256e3, 1e6, 4e6, 16e6, 64e6)]
    assert all(b <= a * (1 + 1e-12) for a, b in zip(moved, moved[1:], strict=False))


def test_a_square_gemm_that_fits_moves_each_operand_once():
    side, e = 256, 2
    assert product_traffic(side, side, side, e, 4 * side * side * e).dram_bytes == 3 * side * side * e


def test_an_elementwise_operator_streams_once_forward_twice_backward():
    op = operators.transformer_layer(gpt(), Strategy(tp=8))[0]
    forward, backward = operator_traffic(op, PlanFields.of(Strategy(tp=8)), 1e6)
    assert forward.dram_bytes == op.input_bytes + op.weight_bytes + op.output_bytes
    assert backward.dram_bytes == 2 * forward.dram_bytes


def test_a_column_parallel_gemm_is_multicast_only_with_tensor_parallelism():
    model = gpt()
    for tp, multicast in ((1, False), (8, True)):
        strategy = Strategy(tp=tp)
        layer = {op.name: op for op in operators.transformer_layer(model, strategy)}
        qkv, projection = layer["qkv"], layer["attention_projection"]
        assert qkv.shared_input and not projection.shared_input
        assert (operator_traffic(qkv, PlanFields.of(strategy), 3.75e6)[0].multicast_bytes > 0) == multicast
        assert operator_traffic(projection, PlanFields.of(strategy), 3.75e6)[0].multicast_bytes == 0


def test_weights_are_multicast_to_the_replicas_only_with_data_parallelism():
    model = gpt()
    for dp in (1, 4):
        strategy = Strategy(tp=8, dp=dp)
        layer = {op.name: op for op in operators.transformer_layer(model, strategy)}
        forward, backward = operator_traffic(layer["qkv"], PlanFields.of(strategy), 3.75e6)
        assert (forward.replica_bytes > 0) == (dp > 1)
        assert operator_traffic(layer["attention_scores"], PlanFields.of(strategy), 3.75e6)[0].replica_bytes == 0
        if dp > 1:
            # each device receives every weight it multiplies at least once
            assert forward.replica_bytes >= layer["qkv"].weight_bytes * 0.999


def test_replicas_on_other_chips_read_their_own_weights():
    model, strategy = gpt(), Strategy(tp=8, dp=4)
    qkv = {op.name: op for op in operators.transformer_layer(model, strategy)}["qkv"]
    shared, apart = (operator_traffic(qkv, PlanFields.of(strategy, n), 3.75e6)[0] for n in (4, 1))
    assert shared.replica_bytes > 0 and apart.replica_bytes == 0
    # apart, each replica reads the weights its chip holds: dp times the DRAM bytes of sharing them
    assert apart.dram_bytes > shared.dram_bytes


@pytest.mark.parametrize(("tp", "cp", "dp", "cores", "expected"), [
    (8, 1, 4, 64, 4),     # four replicas of 8 cores on one 64-core chip
    (16, 1, 8, 64, 4),    # four fit a chip, the other four on the next
    (8, 2, 2, 64, 2),     # a replica is tp x cp cores
    (512, 1, 4, 64, 1),   # each replica spans 8 chips (a Galaxy submesh)
    (64, 1, 1, 64, 1),
])
def test_replicas_per_chip_counts_whole_replica_groups(tp, cp, dp, cores, expected):
    assert replicas_per_chip(Strategy(tp=tp, cp=cp, dp=dp), cores) == expected


def test_a_wafer_multicasts_weights_to_replicas_on_other_dies():
    # T-145B at TP 8 / DP 8 on the tiled wafer: a die holds two 8-core replicas; the wafer's dies are
    # one fabric (flat collectives), so all eight share each weight read; chips joined by tt-metal's
    # collective library (hierarchical) read it once per chip
    model, strategy = gpt(), Strategy(tp=8, pp=20, dp=8, recompute="full")
    tiled = replace(wafer(), memory=replace(wafer().memory, dram=replace(wafer().memory.dram, dataflow="tiled")))
    chips = replace(tiled, network=replace(tiled.network, die_collectives="hierarchical"))
    assert tiled.network.cores_x * tiled.network.cores_y // strategy.tp < strategy.dp
    one_fabric, per_chip = (build_stage_costs(model, hw, strategy)[1] for hw in (tiled, chips))
    assert one_fabric.forward.dram_bytes < per_chip.forward.dram_bytes


def test_a_stage_that_fits_moves_nothing_under_both_dataflows():
    ops = operators.transformer_layer(gpt(hidden=256, heads=4, sequence=64), Strategy(tp=1))
    for planner in (plan_stage, plan_stage_tiled):
        plan = planner([(ops, 1)], 1e9, PlanFields.of(Strategy(tp=1)))
        assert plan.forward_dram_bytes == plan.backward_dram_bytes == plan.update_dram_bytes == 0


def test_t145b_on_the_wafer_moves_over_twice_fewer_bytes_tiled():
    model, strategy = gpt(), Strategy(tp=8, pp=20, dp=2, recompute="full")
    palm = build_stage_costs(model, wafer(), strategy)[1]
    tiled_hw = replace(wafer(), memory=replace(wafer().memory, dram=replace(wafer().memory.dram, dataflow="tiled")))
    tiled = build_stage_costs(model, tiled_hw, strategy)[1]
    assert tiled.forward.dram_bytes < palm.forward.dram_bytes / 2
    assert tiled.backward.dram_bytes < palm.backward.dram_bytes / 2
    assert tiled.forward.overlapped_collectives[0].kind == "all_gather"
    assert tiled.forward.overlap_s == pytest.approx(tiled.forward.compute_s)
