"""Convolutions as tt-metal computes them: padded implicit GEMM, halo, tilize, sharded traffic."""

from __future__ import annotations

from dataclasses import replace

import pytest
from workload_fixtures import resnet50

from simulator import Strategy, load_hardware
from simulator.workload import operators
from simulator.workload.roofline import operator_s, peak_flop_per_s
from simulator.workload.sram import PlanFields
from simulator.workload.stages import _resnet_units
from simulator.workload.tiled_stage import operator_traffic
from simulator.workload.tt_conv import aligned_channels, implicit_gemm, is_matmul, tilize_bytes

GRAYSKULL, N150 = load_hardware("grayskull"), load_hardware("wormhole-n150")


def _inference(tp: int = 1, b: int = 1, precision: str = "bfloat8_b") -> Strategy:
    return Strategy(tp=tp, microbatch_size=b, global_batch_size=b, mode="inference", precision=precision)


def test_the_first_layer_pads_three_channels_to_eight_and_k_to_a_tile():
    # 7x7 over 3 channels: sticks of 8 (16-byte L1 alignment / bfloat16), K = 49 x 8 = 392 -> 416
    stem = implicit_gemm(112 * 112, 3, 64, kernel=7, stride=2)
    assert (stem.k, stem.logical_k) == (416, 147)
    assert (stem.m, stem.n) == (112 * 112, 64)


@pytest.mark.parametrize(("c_in", "kernel", "stride", "expected"),
                         [(3, 7, 2, 8), (64, 3, 1, 64), (24, 3, 1, 24), (20, 3, 1, 24), (3, 1, 1, 32), (64, 1, 2, 64)])
def test_channel_alignment_follows_the_stick_width(c_in, kernel, stride, expected):
    assert aligned_channels(c_in, kernel, stride) == expected


def test_padding_adds_flops_in_the_closed_form():
    # conv5_x 1x1 at batch 1: 7 x 7 = 49 positions pad to 64 rows; K = 512 and N = 2048 are tiles
    gemm = implicit_gemm(49, 512, 2048, kernel=1, stride=1)
    assert gemm.flops == 2 * 64 * 512 * 2048
    assert gemm.logical_flops == 2 * 49 * 512 * 2048
    assert gemm.flops / gemm.logical_flops == pytest.approx(64 / 49)


def test_a_matmul_convolution_tilizes_nothing():
    assert is_matmul(1, 1) and not is_matmul(1, 2) and not is_matmul(3, 1)
    assert tilize_bytes(implicit_gemm(3136, 64, 256, 1, 1), 1, 1, 2.0) == 0.0
    assert tilize_bytes(implicit_gemm(3136, 64, 64, 3, 1), 3, 1, 2.0) == 2 * 3136 * 576 * 2.0


def test_every_non_matmul_convolution_follows_a_halo():
    # stem 7x7/2, 16 3x3 convolutions, 3 strided 1x1 conv1 and 3 strided projections (He et al. Table 1)
    units = operators.resnet50_units(resnet50(), _inference(), tt_metal=True)
    ops = [op for _, unit in units for op in unit]
    halos = [i for i, op in enumerate(ops) if op.l1_only]
    assert len(halos) == 1 + 16 + 3 + 3
    assert all(ops[i + 1].name == ops[i].name.removesuffix("_halo") for i in halos)


@pytest.mark.parametrize("hardware", [GRAYSKULL, N150], ids=["grayskull", "n150"])
@pytest.mark.parametrize(("tp", "b"), [(1, 1), (4, 2), (8, 1), (64, 16)])
def test_a_convolution_is_never_faster_than_its_padded_gemm_at_peak(hardware, tp, b):
    strategy = _inference(tp, b)
    peak = peak_flop_per_s(hardware, strategy)
    convs = [op for _, unit in operators.resnet50_units(resnet50(), strategy, tt_metal=True) for op in unit
             if op.kind == "gemm" and op.name != "fc"]
    assert len(convs) == 53
    for op in convs:
        assert op.executed_fraction >= 1.0
        padded_at_peak = op.flops * op.executed_fraction / hardware.compute.peak_flop_per_s["bfloat8_b"]
        assert operator_s(op, 1.0, 1, hardware, peak) >= padded_at_peak


def test_the_tilize_runs_in_series_with_the_gemm():
    strategy = _inference()
    conv = next(op for _, unit in operators.resnet50_units(resnet50(), strategy, tt_metal=True) for op in unit
                if op.name == "block0_conv2")
    peak = peak_flop_per_s(N150, strategy)
    bandwidth = N150.memory.operand_bandwidth_bytes_per_s * N150.calibration.memory_bound_efficiency
    without = operator_s(replace(conv, serial_bytes=0.0), 1.0, 1, N150, peak)
    assert operator_s(conv, 1.0, 1, N150, peak) == pytest.approx(without + conv.serial_bytes / bandwidth)


@pytest.mark.parametrize("preset", ["a100-cluster", "wafer"])
def test_gpu_and_wafer_convolutions_are_unchanged(preset):
    hardware, strategy = load_hardware(preset), _inference(precision="fp16")
    ops = [op for _, unit in _resnet_units(resnet50(), hardware, strategy).items for op in unit.ops]
    plain = [op for _, unit in operators.resnet50_units(resnet50(), strategy) for op in unit]
    assert ops == plain


def test_tiled_hardware_runs_the_tt_metal_convolution():
    ops = [op for _, unit in _resnet_units(resnet50(), GRAYSKULL, _inference()).items for op in unit.ops]
    assert all(op.sharded for op in ops) and any(op.l1_only for op in ops)


def test_sharded_activations_that_fit_move_only_the_weights():
    strategy = _inference(tp=4)
    units = operators.resnet50_units(resnet50(), strategy, tt_metal=True)
    conv = next(op for _, unit in units for op in unit if op.name == "block0_conv2")
    assert conv.shared_weight and conv.input_bytes + conv.output_bytes <= N150.memory.sram.capacity_bytes
    forward, _ = operator_traffic(conv, PlanFields.of(strategy), N150.memory.sram.capacity_bytes)
    # read once by the group of 4 and multicast to it
    assert forward.dram_bytes == pytest.approx(conv.weight_bytes / 4)
    assert forward.multicast_bytes == pytest.approx(conv.weight_bytes)
    halo = next(op for _, unit in units for op in unit if op.l1_only)
    assert operator_traffic(halo, PlanFields.of(strategy), N150.memory.sram.capacity_bytes)[0].dram_bytes == 0.0
