"""A GEMM's K loop on a Tensix grid: block sizes, per-block transfer, fill and drain in closed form."""

from __future__ import annotations

import dataclasses

import pytest

from simulator import load_hardware
from simulator.errors import InputError
from simulator.workload.gemm_pipeline import BlockTuning, block_transfer_s, core_blocks, gemm_pipeline, k_loop_s

N150 = load_hardware("wormhole-n150")
P150 = load_hardware("blackhole-p150")
SRAM = N150.memory.sram.capacity_bytes
BF16_TILE = 2048


def test_blocks_take_one_in0_shard_column_per_k_block_when_they_fit():
    blocks = core_blocks(512, 512, 512, grid=(8, 8), tile_bytes=BF16_TILE, sram_bytes=SRAM)
    assert (blocks.rows, blocks.columns, blocks.k_block, blocks.k_blocks) == (2, 2, 2, 8)
    uneven = core_blocks(3328, 2560, 2560, grid=(8, 8), tile_bytes=BF16_TILE, sram_bytes=SRAM)
    assert (uneven.rows, uneven.columns, uneven.k_block, uneven.k_blocks) == (13, 10, 10, 8)


@pytest.mark.parametrize("size", [2048, 4096, 8192, 16384])
def test_blocks_halve_until_two_slots_of_both_operands_fit_in_sram(size):
    blocks = core_blocks(size, size, size, grid=(8, 8), tile_bytes=BF16_TILE, sram_bytes=SRAM)
    slots = 2 * (blocks.rows + blocks.columns) * BF16_TILE
    assert slots * blocks.k_block <= SRAM < slots * (2 * blocks.k_block) or blocks.k_block == size // 32 // 8
    assert blocks.k_block * blocks.k_blocks >= size // 32


def test_16384_cubed_runs_256_blocks_of_two_tiles():
    blocks = core_blocks(16384, 16384, 16384, grid=(8, 8), tile_bytes=BF16_TILE, sram_bytes=SRAM)
    assert (blocks.rows, blocks.k_block, blocks.k_blocks) == (64, 2, 256)


def test_a_block_costs_its_slower_senders_read_multicast_and_handshake():
    blocks = core_blocks(512, 512, 512, grid=(8, 8), tile_bytes=BF16_TILE, sram_bytes=SRAM)
    hops = 2 * 7 * 9e-9
    in_l1 = block_transfer_s(N150, blocks, tile_bytes=BF16_TILE, grid=(8, 8), in_dram=(False, False))
    assert in_l1 == pytest.approx(8192 / 22e9 + hops, rel=1e-12)
    # in1 in DRAM: 8 readers share 288 GB/s x 0.92 (33 GB/s each), so each reads at its own 22 GB/s
    in1 = block_transfer_s(N150, blocks, tile_bytes=BF16_TILE, grid=(8, 8), in_dram=(False, True))
    assert in1 == pytest.approx(384e-9 + 8192 / 22e9 + 8192 / 22e9 + hops, rel=1e-12)
    # both in DRAM: 16 readers, 288 x 0.92 / 16 = 16.56 GB/s each, below a core's 22
    both = block_transfer_s(N150, blocks, tile_bytes=BF16_TILE, grid=(8, 8), in_dram=(True, True))
    assert both == pytest.approx(384e-9 + 8192 / (288e9 * 0.92 / 16) + 8192 / 22e9 + hops, rel=1e-12)


def test_the_k_loop_is_a_two_stage_pipeline_with_fill_and_drain():
    blocks = core_blocks(512, 512, 512, grid=(8, 8), tile_bytes=BF16_TILE, sram_bytes=SRAM)
    transfer = block_transfer_s(N150, blocks, tile_bytes=BF16_TILE, grid=(8, 8), in_dram=(True, True))
    # all 64 cores write at once: 288 GB/s x 0.92 / 64 = 4.14 GB/s each, below a core's 21
    drain = 401e-9 + 4 * BF16_TILE / (288e9 * 0.92 / 64)
    slow = gemm_pipeline(N150, blocks, 1e-7, tile_bytes=BF16_TILE, grid=(8, 8), in_dram=(True, True, True))
    assert slow.bound == "multicast" and slow.drain_s == pytest.approx(drain, rel=1e-12)
    assert slow.total_s == pytest.approx(8 * transfer + 1e-7 / 8 + drain, rel=1e-12)
    fast = gemm_pipeline(N150, blocks, 1e-3, tile_bytes=BF16_TILE, grid=(8, 8), in_dram=(True, True, False))
    assert fast.bound == "compute" and fast.drain_s == 0
    assert fast.total_s == pytest.approx(transfer + 1e-3, rel=1e-12)


def test_the_pipeline_never_beats_its_compute_and_slower_movement_never_helps():
    blocks = core_blocks(1024, 2048, 1024, grid=(8, 8), tile_bytes=BF16_TILE, sram_bytes=SRAM)
    moves = N150.compute.data_movement
    assert moves is not None
    slower = dataclasses.replace(N150, compute=dataclasses.replace(N150.compute, data_movement=dataclasses.replace(
        moves, multicast_bandwidth_bytes_per_s=moves.multicast_bandwidth_bytes_per_s / 2)))
    for compute_s in (1e-6, 1e-5, 1e-4):
        times = [gemm_pipeline(h, blocks, compute_s, tile_bytes=BF16_TILE, grid=(8, 8),
                               in_dram=(True, True, True)).total_s for h in (N150, slower)]
        assert compute_s < times[0] < times[1]


def test_hardware_without_a_data_movement_record_pays_nothing():
    still = dataclasses.replace(P150, compute=dataclasses.replace(P150.compute, data_movement=None))
    blocks = core_blocks(640, 832, 832, grid=(13, 10), tile_bytes=BF16_TILE, sram_bytes=SRAM)
    pipeline = gemm_pipeline(still, blocks, 3e-6, tile_bytes=BF16_TILE, grid=(13, 10), in_dram=(True, True, True))
    assert pipeline.total_s == pytest.approx(3e-6, rel=1e-12) and pipeline.transfer_s == pipeline.drain_s == 0


def test_blackhole_reads_and_multicasts_at_its_own_clock():
    blocks = core_blocks(640, 832, 832, grid=(13, 10), tile_bytes=BF16_TILE, sram_bytes=P150.memory.sram.capacity_bytes)
    assert (blocks.rows, blocks.columns, blocks.k_block, blocks.k_blocks) == (2, 2, 2, 13)
    transfer = block_transfer_s(P150, blocks, tile_bytes=BF16_TILE, grid=(13, 10), in_dram=(False, True))
    # 13 in1 senders share 512 GB/s x 0.977 (38.5 GB/s each), below a core's 33 B/cycle x 1.35 GHz
    in1 = 479 / 1.35e9 + 8192 / (512e9 * 0.977 / 13) + 8192 / (41 * 1.35e9) + 2 * 9 * 9 / 1.35e9
    in0 = 8192 / (41 * 1.35e9) + 2 * 12 * 9 / 1.35e9
    assert transfer == pytest.approx(max(in0, in1), rel=1e-5)


def test_a_stack_grid_gemm_is_the_whole_gemms_k_loop_with_every_operand_in_dram():
    # (128 x 4096) @ (4096 x 14336) bfloat8_b on tt-metal's 8 x 8 prefill grid: the busiest core's
    # 1 x 56 output tiles over K in blocks of 16 tiles, its products at one core's rate
    tile_bytes, rate = 1088.0, 0.5e12
    sram = N150.memory.sram.capacity_bytes
    blocks = core_blocks(128, 4096, 14336, grid=(8, 8), tile_bytes=tile_bytes, sram_bytes=sram)
    compute = blocks.rows * blocks.columns * blocks.k_block * blocks.k_blocks * 2 * 32**3 / rate
    expected = gemm_pipeline(N150, blocks, compute, tile_bytes=tile_bytes, grid=(8, 8), in_dram=(True, True, True))
    assert k_loop_s(N150, m=128, k=4096, n=14336, grid=(8, 8), tile_bytes=tile_bytes, in_dram=(True, True, True),
                    peak_flop_per_s=rate) == pytest.approx(expected.total_s, rel=1e-12)
    assert (blocks.rows, blocks.columns) == (1, 56)


def test_a_sender_without_receivers_keeps_its_block():
    # a grid one core high (a decode's DRAM-sharded GEMM on 12 readers): each in1 block is its
    # reader's own, read from DRAM and not multicast; the in0 block still crosses the row
    blocks = core_blocks(32, 4096, 12 * 352, grid=(12, 1), tile_bytes=1088.0, sram_bytes=SRAM)
    transfer = block_transfer_s(N150, blocks, tile_bytes=1088.0, grid=(12, 1), in_dram=(False, True))
    read = 384e-9 + blocks.k_block * blocks.columns * 1088.0 / 22e9
    multicast = blocks.rows * blocks.k_block * 1088.0 / 22e9 + 2 * 11 * 9e-9
    assert transfer == pytest.approx(max(read, multicast), rel=1e-12)


def test_a_tuned_blocking_splits_k_by_in0_block_w_div_and_the_output_into_blocks():
    # the GEMM_FLOPS benchmark's 16384^3 on 8 x 8: (2048, 2048, 2048, False, False, 4, 8, 8)
    blocks = core_blocks(16384, 16384, 16384, grid=(8, 8), tile_bytes=BF16_TILE, sram_bytes=SRAM,
                         tuning=BlockTuning(in0_block_w_div=4, num_out_blocks_h=8, num_out_blocks_w=8))
    assert (blocks.rows, blocks.columns, blocks.k_block, blocks.k_blocks, blocks.out_blocks) == (8, 8, 16, 32, 64)
    default = core_blocks(2048, 3072, 3072, grid=(8, 8), tile_bytes=BF16_TILE, sram_bytes=SRAM, tuning=BlockTuning())
    assert (default.k_block, default.k_blocks, default.out_blocks) == (12, 8, 1)


def test_block_tuning_rejects_a_divisor_below_one():
    with pytest.raises(InputError, match="num_out_blocks_w"):
        BlockTuning(num_out_blocks_w=0)


@pytest.mark.parametrize("out_in_dram", [True, False])
def test_each_output_block_written_to_dram_pays_its_own_fill_and_drain(out_in_dram):
    tuning = BlockTuning(in0_block_w_div=2, num_out_blocks_h=2, num_out_blocks_w=2)
    blocks = core_blocks(4096, 4096, 4096, grid=(8, 8), tile_bytes=BF16_TILE, sram_bytes=SRAM, tuning=tuning)
    assert (blocks.rows, blocks.columns, blocks.k_block, blocks.k_blocks, blocks.out_blocks) == (8, 8, 8, 16, 4)
    transfer = block_transfer_s(N150, blocks, tile_bytes=BF16_TILE, grid=(8, 8), in_dram=(True, True))
    for compute_s in (1e-5, 1e-3):  # transfer-bound, then compute-bound
        pipeline = gemm_pipeline(N150, blocks, compute_s, tile_bytes=BF16_TILE, grid=(8, 8),
                                 in_dram=(True, True, out_in_dram))
        step = max(transfer, compute_s / 64)
        if out_in_dram:
            expected = 4 * (transfer + compute_s / 64 + pipeline.drain_s) + 60 * step
        else:
            expected = transfer + compute_s / 64 + 63 * step
        assert pipeline.total_s == pytest.approx(expected, rel=1e-12)
