"""How fast a core's SRAM feeds its matrix engine: a tile product takes the larger of its compute
cycles and the cycles its operands take to unpack (Tenstorrent Tensix cores).

**Compute.** The matrix engine multiplies an 8 x 16 by a 16 x 16 block per cycle per fidelity phase,
so a 32 x 32 x 32 tile product (``2 x 32^3`` flop) takes 16 cycles per phase: LoFi 16, HiFi2 32,
HiFi3 48, HiFi4 64 (tenstorrent/tt-isa-documentation ``WormholeB0/TensixTile/TensixCoprocessor/
MatrixUnit.md``, "Performance"; tt-metal ``tech_reports/GEMM_FLOPS``), i.e. ``2 x 32^3`` flop at the
device's peak for the format over its passes.

**Unpack.** The operands come from L1 through the unpackers into ``SrcA`` / ``SrcB``. tt-llk's
matmul (``tt_llk_wormhole_b0/llk_lib/llk_unpack_AB_matmul.h``) walks an ``h x w`` output subblock
one K tile at a time and unpacks ``h w + min(h, w)`` tiles per step: one tile of the operand it
reuses for each row (``w >= h``; else each column) and a fresh tile of the other operand for
every product. A tile product therefore unpacks ``1 + 1 / max(h, w)`` tiles, each an
instruction's address setup followed by its bytes at the unpackers' L1 read rate
(:class:`~simulator.hardware.spec.Unpacker`); a block-float tile's exponents are read on an extra
port (tt-isa-documentation ``WormholeB0/TensixTile/L1.md``, "Unpackers"), so only its mantissa
bytes count. The subblock is tt-metal's choice for the per-core block (:func:`subblock`).

**Pack.** Each output tile is packed back to L1 once at the packers' write rate; the packer runs
beside the unpacker and the engine, so it bounds the block only when slower than both.
"""

from __future__ import annotations

from simulator.hardware.spec import Hardware
from simulator.strategy import BYTES_PER_ELEMENT
from simulator.workload.tiled_stage import TILE_SIDE

TILE_PRODUCT_FLOP = 2.0 * TILE_SIDE**3
"""Flop of one 32 x 32 x 32 tile product."""

EXPONENT_BYTES_PER_ELEMENT: dict[str, float] = {"bfloat8_b": 1 / 16, "bfloat4_b": 1 / 16}
"""Shared-exponent bytes per element of the block floats (one byte per 16 values,
:data:`simulator.strategy.BYTES_PER_ELEMENT`), which the unpackers read on a separate port."""


def subblock(block_rows: int, block_columns: int, max_tiles: int, *, out_sharded: bool = False) -> tuple[int, int]:
    """tt-metal's output subblock ``(h, w)`` for an output block of ``block_rows x block_columns``
    tiles: the first ``(h, w)`` with ``h`` dividing the rows and ``w`` the columns, trying the
    largest ``h w <= max_tiles`` first and, among one product, the squarer shape first, taller
    before wider (``(4, 2), (2, 4), (8, 1), (1, 8), (7, 1), ...``); one tile high where the output
    is sharded in L1 (tenstorrent/tt-metal ``tests/ttnn/unit_tests/benchmarks/test_benchmark.py``,
    ``SUBBLOCK_HW_CHOICES`` and ``get_subblock_sizes``, the GEMM_FLOPS benchmark's choice)."""
    for tiles in range(max_tiles, 0, -1):
        shapes = sorted(((h, tiles // h) for h in range(1, tiles + 1) if tiles % h == 0),
                        key=lambda shape: (abs(shape[0] - shape[1]), -shape[0]))
        for h, w in shapes:
            if block_rows % h == 0 and block_columns % w == 0 and not (out_sharded and h != 1):
                return h, w
    return 1, 1


def unpacked_tile_bytes(precision: str) -> float:
    """L1 bytes the unpackers read for one 32 x 32 tile of ``precision`` (mantissas only)."""
    return TILE_SIDE**2 * (BYTES_PER_ELEMENT[precision] - EXPONENT_BYTES_PER_ELEMENT.get(precision, 0.0))


def unpack_s(hardware: Hardware, precision: str, reuse: int) -> float:
    """Time the unpackers take for one tile product's operands (s; 0 where the hardware states
    no :class:`~simulator.hardware.spec.Unpacker`), one operand tile reused ``reuse`` times."""
    feed = hardware.compute.unpacker
    if feed is None:
        return 0.0
    per_tile = feed.instruction_setup_s + unpacked_tile_bytes(precision) / feed.read_bandwidth_bytes_per_s
    return (1.0 + 1.0 / reuse) * per_tile


def pack_s(hardware: Hardware, precision: str, tiles: int) -> float:
    """Time the packers take to write ``tiles`` output tiles of ``precision`` to L1 (s; 0 without
    an :class:`~simulator.hardware.spec.Unpacker` record)."""
    feed = hardware.compute.unpacker
    if feed is None:
        return 0.0
    return tiles * TILE_SIDE**2 * BYTES_PER_ELEMENT[precision] / feed.pack_bandwidth_bytes_per_s


def fed_flop_per_s(hardware: Hardware, precision: str, passes: int) -> float:
    """A core's matmul rate with its engine fed from SRAM at the largest subblock
    (``max(h, w) = subblock_tiles``, e.g. ``1 x 8``), flop/s: the peak over ``passes`` where the
    unpackers keep up, else the unpack-bound rate."""
    peak = hardware.compute.peak_flop_per_s[precision] / passes
    if hardware.compute.unpacker is None:
        return peak
    return min(peak, TILE_PRODUCT_FLOP / unpack_s(hardware, precision, hardware.compute.unpacker.subblock_tiles))
