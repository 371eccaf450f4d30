"""Feeding a Tensix core's matrix engine: tt-metal's subblock choice and the unpack closed form."""

from __future__ import annotations

import pytest

from simulator import load_hardware
from simulator.workload.matrix_feed import fed_flop_per_s, subblock, unpack_s, unpacked_tile_bytes

N150 = load_hardware("wormhole-n150")


# tt-metal tests/ttnn/unit_tests/benchmarks/test_benchmark.py SUBBLOCK_HW_CHOICES, in the order
# get_subblock_sizes tries them (the GEMM_FLOPS report's benchmark)
SUBBLOCK_HW_CHOICES = [(4, 2), (2, 4), (8, 1), (1, 8), (7, 1), (1, 7), (3, 2), (2, 3), (6, 1), (1, 6),
                       (5, 1), (1, 5), (2, 2), (4, 1), (1, 4), (3, 1), (1, 3), (2, 1), (1, 2), (1, 1)]


@pytest.mark.parametrize("out_sharded", [False, True])
@pytest.mark.parametrize("block", [(2, 2), (8, 8), (4, 2), (3, 5), (1, 16), (7, 7), (12, 16), (13, 10), (16, 8)])
def test_subblock_is_the_first_of_tt_metals_choices_that_divides_the_block(block, out_sharded):
    rows, columns = block
    expected = next(choice for choice in SUBBLOCK_HW_CHOICES if rows % choice[0] == 0 and columns % choice[1] == 0
                    and not (out_sharded and choice[0] != 1))
    assert subblock(rows, columns, 8, out_sharded=out_sharded) == expected


def test_subblock_examples():
    assert subblock(8, 8, 8) == (4, 2) and subblock(8, 8, 8, out_sharded=True) == (1, 8)
    assert subblock(13, 10, 8) == (1, 5) and subblock(7, 7, 8) == (7, 1)


@pytest.mark.parametrize(("precision", "expected"), [("bf16", 2048), ("bfloat8_b", 1024), ("bfloat4_b", 512)])
def test_a_tile_unpacks_its_mantissa_bytes(precision, expected):
    assert unpacked_tile_bytes(precision) == pytest.approx(expected)


def test_more_reuse_unpacks_less():
    assert [unpack_s(N150, "bf16", r) for r in (1, 2, 8)] == pytest.approx([2 * 34e-9, 1.5 * 34e-9, 1.125 * 34e-9])


def test_the_fed_rate_is_the_peak_over_passes_where_the_unpackers_keep_up():
    assert fed_flop_per_s(N150, "bf16", 4) == pytest.approx(4.096e12 / 4)
    assert fed_flop_per_s(N150, "bf16", 1) == pytest.approx(2 * 32**3 / (1.125 * 34e-9))
    assert fed_flop_per_s(load_hardware("blackhole-p150"), "bf16", 1) == pytest.approx(
        load_hardware("blackhole-p150").compute.peak_flop_per_s["bf16"])
