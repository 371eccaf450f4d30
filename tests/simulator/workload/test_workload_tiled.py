"""Two-dimensional GEMM blocking under SRAM: lower bounds, closed forms, monotonicity."""

from __future__ import annotations

import math

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from simulator.workload.tiled import (
    GemmShape,
    gemm_blocking,
    io_lower_bound_bytes,
    universal_lower_bound_bytes,
)

SIDES = st.sampled_from([1, 2, 3, 7, 16, 32, 33, 64, 100, 128, 500, 1024, 4096])


@st.composite
def cases(draw):
    shape = GemmShape(m=draw(SIDES), k=draw(SIDES), n=draw(SIDES), bytes_per_element=draw(st.sampled_from([1, 2, 4])))
    words = draw(st.sampled_from([64, 100, 1000, 4096, 65536, 10**6]))
    grid = (draw(st.sampled_from([1, 2, 4, 8])), draw(st.sampled_from([1, 2, 3, 8])))
    tile = draw(st.sampled_from([1, 32])) if words >= 4096 else 1  # a 32 x 32 blocking needs 4 tiles of room
    return shape, words * shape.bytes_per_element, tile, grid


def blocking_or_none(shape, sram, tile, grid):
    try:
        return gemm_blocking(shape, sram, tile=tile, grid=grid)
    except ValueError:
        return None


@settings(max_examples=400, deadline=None)
@given(cases())
def test_no_blocking_beats_the_universal_lower_bound(case):
    shape, sram, tile, grid = case
    blocking = blocking_or_none(shape, sram, tile, grid)
    assume(blocking is not None)
    assert blocking.sram_bytes <= sram
    assert blocking.dram_bytes >= universal_lower_bound_bytes(shape, sram * grid[0] * grid[1]) * (1 - 1e-12)


@st.composite
def large_cases(draw):
    """Every side at least 4 sqrt(S) words, S the grid's whole SRAM (the regime of SC'19's bound)."""
    words = draw(st.sampled_from([64, 100, 1000, 4096]))
    grid = (draw(st.sampled_from([1, 2, 4])), draw(st.sampled_from([1, 3, 4])))
    side = st.integers(math.ceil(4 * math.sqrt(words * grid[0] * grid[1])), 8192)
    e = draw(st.sampled_from([1, 2]))
    shape = GemmShape(m=draw(side), k=draw(side), n=draw(side), bytes_per_element=e)
    return shape, words * e, draw(st.sampled_from([1, 32])) if words >= 4096 else 1, grid


@settings(max_examples=300, deadline=None)
@given(large_cases())
def test_large_gemms_never_beat_the_red_blue_pebbling_bound(case):
    shape, sram, tile, grid = case
    blocking = blocking_or_none(shape, sram, tile, grid)
    assume(blocking is not None)
    assert blocking.dram_bytes >= io_lower_bound_bytes(shape, sram * grid[0] * grid[1])


@settings(max_examples=300, deadline=None)
@given(cases(), st.sampled_from([2, 4, 16]))
def test_more_sram_never_moves_more_bytes(case, factor):
    shape, sram, tile, grid = case
    small, large = blocking_or_none(shape, sram, tile, grid), blocking_or_none(shape, sram * factor, tile, grid)
    assume(small is not None)
    assert large is not None and large.dram_bytes <= small.dram_bytes


@pytest.mark.parametrize("side", [64, 128, 500])
def test_a_gemm_that_fits_moves_each_operand_once(side):
    shape = GemmShape(m=side, k=side, n=side, bytes_per_element=2)
    blocking = gemm_blocking(shape, 4 * 3 * side * side * 2)
    assert blocking.dram_bytes == 3 * side * side * 2


def test_square_output_stationary_closed_form():
    """M = N = K = 4096, 1-byte elements, 256-element tiles and SRAM for 1024 x 1024 output blocks
    plus double-buffered 256-deep slices: A is read N/1024 = 4 times, B 4 times, C written once."""
    shape = GemmShape(m=4096, k=4096, n=4096, bytes_per_element=1)
    sram = 1024 * 1024 + 2 * 256 * (1024 + 1024)
    blocking = gemm_blocking(shape, sram, tile=256)
    assert (blocking.order, blocking.tile_m, blocking.tile_n) == ("output-stationary", 1024, 1024)
    assert blocking.dram_bytes == 4096**2 * (4 + 4 + 1)
    assert blocking.dram_bytes / io_lower_bound_bytes(shape, sram) == pytest.approx(1.35, abs=0.01)


def test_a_core_grid_with_multicast_moves_fewer_bytes_than_one_core():
    shape = GemmShape(m=4096, k=4096, n=4096, bytes_per_element=2)
    one = gemm_blocking(shape, 1.5e6, tile=32)
    grid = gemm_blocking(shape, 1.5e6, tile=32, grid=(8, 8))
    assert grid.dram_bytes == 3 * 4096 * 4096 * 2 < one.dram_bytes / 3  # 8 x 512 covers the matrix: compulsory
