"""DRAM traffic of a GEMM blocked in two dimensions under a core's SRAM, as tiled chips run it.

A GEMM ``C (M x N) = A (M x K) B (K x N)`` whose operands live in DRAM is computed block by block
in SRAM. Three loop orders keep one operand's block resident and stream the other two
(double-buffered, so a streamed block and the next one fit together), each charged the DRAM bytes
it moves, with ``e`` bytes per element and ``ceil`` for edge blocks:

* **output-stationary**: a ``tm x tn`` block of ``C`` stays in SRAM while ``K`` is streamed in
  ``tk``-deep slices of ``A`` and ``B``; SRAM ``e (tm tn + 2 tk (tm + tn))``; DRAM
  ``e (M K ceil(N/tn) + K N ceil(M/tm) + M N)``;
* **a-stationary**: a ``tm x K`` panel of ``A`` stays, ``B`` is streamed in ``tk x tn`` blocks and
  each ``tm x tn`` block of ``C`` is finished in SRAM; SRAM ``e (tm K + tm tn + 2 tk tn)``; DRAM
  ``e (M K + K N ceil(M/tm) + M N)``;
* **b-stationary**: the mirror image, a ``K x tn`` panel of ``B``; DRAM
  ``e (K N + M K ceil(N/tn) + M N)``.

Tile sides are multiples of the hardware tile (Tenstorrent's 32 x 32, tt-metal ``TILE_HEIGHT``),
``tk`` one tile deep (a deeper slice only costs SRAM). The order and tile sizes that move the
fewest bytes are chosen. On a ``gx x gy`` grid of cores computing ``C`` block-cyclically, a block
row of ``A`` read once from DRAM is multicast along its grid row and a block column of ``B``
along its grid column (tt-metal ``matmul_multicore_reuse_mcast``), so the grid moves the DRAM
bytes of one core with tiles ``gx tm x gy tn``.

No schedule beats the I/O lower bounds of a GEMM with fast memory ``S`` words: every operand read
and the result written once (compulsory traffic), and ``M N K / (2 sqrt(2) sqrt(S)) - S`` (Irony,
Toledo and Tiskin, JPDC 2004, Theorem 3.1; Hong and Kung, STOC'81), :func:`universal_lower_bound_bytes`.
When every dimension is well above the side ``sqrt(S)`` of the best block, the tighter
``2 M N K / sqrt(S) + M N`` holds (Kwasniewski et al., "Red-Blue Pebbling Revisited", SC'19,
Theorem 1, whose proof assumes such large matrices), :func:`io_lower_bound_bytes`; square
output-stationary blocks of side about ``sqrt(S)`` come within lower-order terms of it (same
source, §5). With small ``K`` an operand panel fits and the larger-matrix bound does not apply.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

LoopOrder = Literal["output-stationary", "a-stationary", "b-stationary"]


@dataclass(frozen=True, slots=True, kw_only=True)
class GemmShape:
    """A GEMM ``(m x k) @ (k x n)`` in elements of ``bytes_per_element`` bytes (all operands)."""

    m: int
    k: int
    n: int
    bytes_per_element: float


@dataclass(frozen=True, slots=True, kw_only=True)
class Blocking:
    """A loop order and tile sizes for one GEMM, and what it costs.

    Attributes:
        order: which operand's block stays in SRAM.
        tile_m, tile_n, tile_k: block sides per core (elements).
        a_bytes, b_bytes, c_bytes: DRAM bytes of each operand (``A`` and ``B`` read, ``C``
            written) for the whole GEMM.
        sram_bytes: SRAM the blocks take on one core.
    """

    order: LoopOrder
    tile_m: int
    tile_n: int
    tile_k: int
    a_bytes: float
    b_bytes: float
    c_bytes: float
    sram_bytes: float

    @property
    def dram_bytes(self) -> float:
        """Bytes read from and written to DRAM for the whole GEMM."""
        return self.a_bytes + self.b_bytes + self.c_bytes


def io_lower_bound_bytes(shape: GemmShape, sram_bytes: float) -> float:
    """Kwasniewski et al. SC'19 Theorem 1: ``(2 M N K / sqrt(S) + M N)`` words, in bytes (``S`` in
    words of ``bytes_per_element``), for matrices whose every side is well above ``sqrt(S)``."""
    words = sram_bytes / shape.bytes_per_element
    return shape.bytes_per_element * (2.0 * shape.m * shape.n * shape.k / math.sqrt(words) + shape.m * shape.n)


def universal_lower_bound_bytes(shape: GemmShape, sram_bytes: float) -> float:
    """The larger of the compulsory traffic ``M K + K N + M N`` and Irony, Toledo and Tiskin's
    ``M N K / (2 sqrt(2 S)) - S`` words (JPDC 2004), in bytes; valid for every shape."""
    s, words = shape, sram_bytes / shape.bytes_per_element
    compulsory = s.m * s.k + s.k * s.n + s.m * s.n
    return s.bytes_per_element * max(compulsory, s.m * s.n * s.k / (2.0 * math.sqrt(2.0 * words)) - words)


def _sides(size: int, tile: int) -> list[int]:
    """Candidate block sides for a dimension of ``size``: tile multiples doubling up to ``size``,
    and ``size`` itself (one block)."""
    sides, side = [], min(tile, size)
    while side < size:
        sides.append(side)
        side *= 2
    return [*sides, size]


def _output_stationary(s: GemmShape, sram: float, tile: int, grid: tuple[int, int]) -> list[Blocking]:
    e, tk, found = s.bytes_per_element, min(tile, s.k), []
    for tm in _sides(math.ceil(s.m / grid[0]), tile):
        room = sram / e - 2 * tk * tm
        tn_max = int(room // (tm + 2 * tk)) if room > 0 else 0
        tn = min(math.ceil(s.n / grid[1]), tn_max // tile * tile if tn_max >= tile else tn_max)
        if tn < 1:
            continue
        found.append(Blocking(order="output-stationary", tile_m=tm, tile_n=tn, tile_k=tk,
                              a_bytes=e * s.m * s.k * math.ceil(s.n / (grid[1] * tn)),
                              b_bytes=e * s.k * s.n * math.ceil(s.m / (grid[0] * tm)), c_bytes=e * s.m * s.n,
                              sram_bytes=e * (tm * tn + 2 * tk * (tm + tn))))
    return found


def _panel_stationary(s: GemmShape, sram: float, tile: int, grid: tuple[int, int]) -> list[Blocking]:
    """A-stationary blocks (B-stationary is the same on the transposed GEMM)."""
    e, tk, found = s.bytes_per_element, min(tile, s.k), []
    tn = min(tile, math.ceil(s.n / grid[1]))
    for tm in _sides(math.ceil(s.m / grid[0]), tile):
        need = e * (tm * s.k + tm * tn + 2 * tk * tn)
        if need > sram:
            break
        found.append(Blocking(order="a-stationary", tile_m=tm, tile_n=tn, tile_k=tk, a_bytes=e * s.m * s.k,
                              b_bytes=e * s.k * s.n * math.ceil(s.m / (grid[0] * tm)), c_bytes=e * s.m * s.n,
                              sram_bytes=need))
    return found


def _transposed(blocking: Blocking) -> Blocking:
    return Blocking(order="b-stationary", tile_m=blocking.tile_n, tile_n=blocking.tile_m, tile_k=blocking.tile_k,
                    a_bytes=blocking.b_bytes, b_bytes=blocking.a_bytes, c_bytes=blocking.c_bytes,
                    sram_bytes=blocking.sram_bytes)


def gemm_blocking(shape: GemmShape, sram_bytes: float, *, tile: int = 1, grid: tuple[int, int] = (1, 1)) -> Blocking:
    """The loop order and tiles moving the fewest DRAM bytes (see the module docstring).

    Args:
        shape: the GEMM.
        sram_bytes: SRAM of one core for the blocks (bytes).
        tile: the hardware tile side; block sides are multiples of it (elements).
        grid: ``(gx, gy)`` cores sharing the GEMM with row and column multicast.

    Raises:
        ValueError: not even one tile of each operand fits (a caller bug: the loaders bound SRAM).
    """
    transposed = GemmShape(m=shape.n, k=shape.k, n=shape.m, bytes_per_element=shape.bytes_per_element)
    options = [*_output_stationary(shape, sram_bytes, tile, grid),
               *_panel_stationary(shape, sram_bytes, tile, grid),
               *(_transposed(b) for b in _panel_stationary(transposed, sram_bytes, tile, grid[::-1]))]
    if not options:
        raise ValueError(f"no {tile}x{tile} blocking of {shape} fits {sram_bytes} bytes of SRAM")
    return min(options, key=lambda b: (b.dram_bytes, b.sram_bytes))
