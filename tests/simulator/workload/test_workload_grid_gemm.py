"""One GEMM over a tiled chip's core grid: closed forms and the errors a user can make."""

from __future__ import annotations

import pytest

from simulator import InputError, load_hardware
from simulator.workload.grid_gemm import grid_gemm

N150 = load_hardware("wormhole-n150")


def test_operands_in_sram_take_the_compute_closed_form():
    gemm = grid_gemm(N150, 2048, 2048, 2048, precision="bf16", fidelity="HiFi4", grid=(8, 8),
                     in_dram=(False, False, False))
    tiles = (2048 // 32 // 8) ** 2 * (2048 // 32)
    expected = tiles * 2 * 32**3 / (4.096e12 / 4 * N150.calibration.gemm_efficiency)
    assert gemm.dram_bytes == 0 and gemm.time_s == pytest.approx(expected, rel=1e-12)


def test_fidelity_divides_the_matrix_engine_rate():
    times = {f: grid_gemm(N150, 4096, 4096, 4096, precision="bf16", fidelity=f, grid=(8, 8),
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
