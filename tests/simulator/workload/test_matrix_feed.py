"""Feeding a Tensix core's matrix engine: tt-metal's subblock choice and the unpack closed form."""

from __future__ import annotations

import pytest

from simulator import load_hardware
from simulator.workload.matrix_feed import fed_flop_per_s, subblock, unpack_s, unpacked_tile_bytes

N150 = load_hardware("wormhole-n150")


@pytest.mark.parametrize(("block", "expected"), [((2, 2), (2, 2)), ((8, 8), (1, 8)), ((4, 2), (4, 2)),
                                                 ((3, 5), (1, 5)), ((1, 16), (1, 8)), ((7, 7), (1, 7))])
def test_subblock_follows_tt_metal_find_max_subblock(block, expected):
    assert subblock(*block, 8) == expected


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
