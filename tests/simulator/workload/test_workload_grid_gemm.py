"""One GEMM over a tiled chip's core grid: closed forms and the errors a user can make."""

from __future__ import annotations

import dataclasses

import pytest

from simulator import InputError, load_hardware
from simulator.workload.gemm_pipeline import BlockTuning
from simulator.workload.grid_gemm import grid_gemm

N150 = load_hardware("wormhole-n150")
UNFED = dataclasses.replace(N150, compute=dataclasses.replace(N150.compute, unpacker=None))


def test_hifi4_bf16_is_compute_bound_and_takes_the_compute_closed_form():
    gemm = grid_gemm(N150, 2048, 2048, 2048, precision="bf16", fidelity="HiFi4", grid=(8, 8),
                     in_dram=(False, False, False))
    tiles = (2048 // 32 // 8) ** 2 * (2048 // 32)
    expected = tiles * 2 * 32**3 / (4.096e12 / 4 * N150.calibration.gemm_efficiency)
    assert gemm.bound == "compute" and gemm.dram_bytes == 0
    assert gemm.compute_s == pytest.approx(expected, rel=1e-12)
    # every operand in L1: the K loop adds only the first block's multicast (8 x 8 tiles of 2 KiB
    # at 22 GB/s, 7 hops each way at 9 ns) before the first product
    fill = 64 * 2048 / 22e9 + 2 * 7 * 9e-9
    assert gemm.time_s == pytest.approx(expected + fill + N150.calibration.kernel_overhead_s, rel=1e-12)


def test_without_a_data_movement_record_the_gemm_is_its_compute_and_dram_roofline():
    still = dataclasses.replace(N150, compute=dataclasses.replace(N150.compute, data_movement=None))
    gemm = grid_gemm(still, 512, 512, 512, precision="bf16", fidelity="HiFi2", grid=(8, 8),
                     in_dram=(False, True, False))
    assert gemm.pipeline_s == pytest.approx(gemm.compute_s, rel=1e-12) and gemm.bound == "unpack"
    assert gemm.time_s == pytest.approx(max(gemm.compute_s, gemm.dram_s) + still.calibration.kernel_overhead_s)


def test_a_small_gemm_is_bound_by_its_blocks_multicast_not_its_flops():
    # 512^3 on 8 x 8: 2 x 2 output tiles per core, K in 8 blocks of 2 tiles; the in1 sender reads
    # each 4-tile block from DRAM (384 ns, then 8 KiB at its 22 GB/s) and multicasts it (22 GB/s,
    # 7 hops each way): ~1.25 us a block against ~0.44 us of tile products
    gemm = grid_gemm(N150, 512, 512, 512, precision="bf16", fidelity="HiFi2", grid=(8, 8),
                     in_dram=(False, True, False))
    block = 384e-9 + 8192 / 22e9 + 8192 / 22e9 + 2 * 7 * 9e-9
    assert gemm.bound == "multicast"
    assert gemm.pipeline_s == pytest.approx(8 * block + gemm.compute_s / 8, rel=1e-12)
    assert gemm.time_s > 2 * (gemm.compute_s + N150.calibration.kernel_overhead_s)


@pytest.mark.parametrize(("precision", "tile_bytes"), [("bf16", 2048), ("bfloat8_b", 1024)])
def test_lofi_is_unpack_bound_at_the_documented_rate_and_block_floats_unpack_their_mantissas_only(
        precision, tile_bytes):
    # 8 x 8 tiles per core: subblock 1 x 8, so 1 + 1/8 tiles unpacked per product, each 2 cycles of
    # setup and its bytes at 64 B/cycle (1 GHz): bf16 1.125 x 34 ns against 16 ns of compute;
    # bfloat8_b's exponents ride on another port, so only its 1024 B of mantissas count
    gemm = grid_gemm(N150, 2048, 2048, 2048, precision=precision, fidelity="LoFi", grid=(8, 8),
                     in_dram=(False, False, False))
    products = (2048 // 32 // 8) ** 2 * (2048 // 32)
    expected = products * 1.125 * (2e-9 + tile_bytes / 64e9) / N150.calibration.gemm_efficiency
    assert gemm.bound == "unpack" and gemm.compute_s == pytest.approx(expected, rel=1e-12)


def test_a_faster_feed_is_never_slower_and_an_unstated_one_leaves_the_peak():
    feed = dataclasses.replace(N150.compute.unpacker, read_bandwidth_bytes_per_s=1e12)
    fast = dataclasses.replace(N150, compute=dataclasses.replace(N150.compute, unpacker=feed))
    times = [grid_gemm(h, 1024, 1024, 1024, precision="bf16", fidelity="LoFi", grid=(8, 8),
                       in_dram=(False, False, False)).compute_s for h in (N150, fast, UNFED)]
    assert times[0] > times[1] >= times[2]


def test_fidelity_divides_the_matrix_engine_rate_when_the_feed_keeps_up():
    times = {f: grid_gemm(UNFED, 4096, 4096, 4096, precision="bf16", fidelity=f, grid=(8, 8),
                          in_dram=(False, False, False)).compute_s for f in ("LoFi", "HiFi2", "HiFi3", "HiFi4")}
    assert [times[f] / times["LoFi"] for f in times] == pytest.approx([1, 2, 3, 4])


def test_dram_operands_move_at_least_once_and_a_narrower_format_moves_fewer_bytes():
    m = k = n = 4096
    wide = grid_gemm(N150, m, k, n, precision="bf16", fidelity="HiFi2", grid=(8, 8), in_dram=(True, True, True))
    narrow = grid_gemm(N150, m, k, n, precision="bfloat8_b", fidelity="HiFi2", grid=(8, 8),
                       in_dram=(True, True, True))
    assert wide.dram_bytes >= 2 * (m * k + k * n + m * n)
    assert narrow.dram_bytes == pytest.approx(wide.dram_bytes * 1.0625 / 2)


@pytest.mark.parametrize(("grid", "hardware"), [((9, 8), "wormhole-n150"), ((2, 2), "a100-cluster")])
def test_a_grid_the_chip_does_not_have_is_an_input_error(grid, hardware):
    with pytest.raises(InputError, match="grid"):
        grid_gemm(load_hardware(hardware), 512, 512, 512, precision="bf16", fidelity="LoFi", grid=grid,
                  in_dram=(True, True, True))


def test_the_benchmarks_tuned_16384_cubed_unpacks_over_its_output_blocks_subblock():
    # tt-metal test_benchmark.py (2048, 2048, 2048, False, False, 4, 8, 8) on 8 x 8: 64 output blocks
    # of 8 x 8 tiles, written to DRAM, so the subblock is 4 x 2 and each product unpacks 1 + 1/4 tiles
    # of 2 + 2048 / 64 cycles; HiFi2's 32 cycles are shorter
    tuning = BlockTuning(in0_block_w_div=4, num_out_blocks_h=8, num_out_blocks_w=8)
    gemm = grid_gemm(N150, 16384, 16384, 16384, precision="bf16", fidelity="HiFi2", grid=(8, 8),
                     in_dram=(True, True, True), tuning=tuning)
    products = 64 * 64 * 512
    assert gemm.bound == "unpack"
    assert gemm.compute_s == pytest.approx(products * 1.25 * 34e-9 / N150.calibration.gemm_efficiency, rel=1e-12)
    untuned = grid_gemm(N150, 16384, 16384, 16384, precision="bf16", fidelity="HiFi2", grid=(8, 8),
                        in_dram=(True, True, True))
    assert gemm.time_s > untuned.time_s
