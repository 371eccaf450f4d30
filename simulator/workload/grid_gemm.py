"""One GEMM over a tiled chip's grid of cores, from the pieces the stage model uses.

The ``gx x gy`` core grid computes ``C (M x N) = A (M x K) B (K x N)`` in 32 x 32 tiles, each core
owning a ``ceil(Mt / gy) x ceil(Nt / gx)`` block of output tiles (``Mt = ceil(M / 32)``; tt-metal
``matmul_multicore_reuse_mcast_2d``: a block row of ``A`` is read and multicast along its grid
row, a block column of ``B`` along its grid column), walked as a program configuration's output
blocks and K-blocks (:class:`~simulator.workload.gemm_pipeline.BlockTuning`). Three times, each a
roofline term (Williams et al., CACM 2009):

* **compute**: the busiest core's tile products, ``2 x 32^3`` flop each, each taking the larger
  of its matrix-engine time at one core's peak for the format over the math fidelity's passes
  (the hardware's ``math_fidelity_phases``: 1, 2, 3 or 4 at LoFi, HiFi2, HiFi3, HiFi4; tt-metal
  ``tech_reports/GEMM_FLOPS``: "TFLOPS are calculated by dividing by the MATH_FIDELITY value";
  a preset's peak is the LoFi one) and its operands' unpack time from L1 with tt-llk's reuse
  over tt-metal's output subblock of one output block (:mod:`simulator.workload.matrix_feed`),
  or the packers' time for the core's output tiles if longer; over the hardware's
  ``gemm_efficiency``.
* **pipeline**: the compute laid over the K loop of tt-metal's reader kernels
  (:func:`~simulator.workload.gemm_pipeline.gemm_pipeline`): the first K-block's transfer before
  the first tile product (fill), each block no faster than its senders' DRAM read, multicast and
  semaphore handshake, and the output written to DRAM after the last (drain);
* **DRAM**: the bytes of the grid's best blocking (:func:`~simulator.workload.tiled.gemm_blocking`
  over the pooled grid, one core's SRAM per block) of the operands that live in DRAM, at the
  chip's DRAM bandwidth times ``memory_bound_efficiency``;
* the larger of the pipeline and DRAM plus ``kernel_overhead_s``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from simulator.errors import InputError
from simulator.hardware.spec import Hardware
from simulator.network.mesh import Mesh
from simulator.strategy import BYTES_PER_ELEMENT
from simulator.workload.gemm_pipeline import BlockTuning, chip_dram_bytes_per_s, core_blocks, gemm_pipeline
from simulator.workload.matrix_feed import TILE_PRODUCT_FLOP, pack_s, subblock, unpack_s
from simulator.workload.tiled import GemmShape, gemm_blocking
from simulator.workload.tiled_stage import TILE_SIDE


@dataclass(frozen=True, slots=True, kw_only=True)
class GridGemm:
    """The time of one GEMM on a core grid (s), its DRAM traffic (bytes) and what bounds it
    (``compute``: the matrix engine, ``unpack``: feeding it from L1, ``pack``, ``multicast``: the
    K-blocks' transfers). ``pipeline_s`` is the compute laid over the K loop, fill and drain
    included (``compute_s`` where the hardware states no data movement)."""

    compute_s: float
    dram_s: float
    dram_bytes: float
    overhead_s: float
    bound: str = "compute"
    pipeline_s: float = 0.0

    @property
    def time_s(self) -> float:
        """``max(pipeline, compute, DRAM) + overhead`` (s)."""
        return max(self.pipeline_s, self.compute_s, self.dram_s) + self.overhead_s


def grid_gemm(hardware: Hardware, m: int, k: int, n: int, *, precision: str, fidelity: str,
              grid: tuple[int, int], in_dram: tuple[bool, bool, bool], tuning: BlockTuning | None = None) -> GridGemm:
    """Time ``(m x k) @ (k x n)`` on a ``grid = (gx, gy)`` of ``hardware``'s cores.

    Args:
        hardware: a mesh whose device is one core (peak at LoFi per precision).
        m, k, n: the GEMM (elements).
        precision: the operands' format (a key of ``hardware.compute.peak_flop_per_s``).
        fidelity: a math fidelity the hardware offers (``LoFi``, ``HiFi2``, ``HiFi3``, ``HiFi4``).
        grid: cores along x (splitting ``N``) and y (splitting ``M``).
        in_dram: whether ``A``, ``B`` and ``C`` live in DRAM (else in the cores' SRAM).
        tuning: the program configuration's blocking; None: one output block per core and the
            deepest K-block that fits (:func:`~simulator.workload.gemm_pipeline.core_blocks`).

    Raises:
        InputError: not a mesh, a grid larger than the mesh, or an unknown format or fidelity.
    """
    network, dram = hardware.network, hardware.memory.dram
    gx, gy = grid
    if not isinstance(network, Mesh) or dram is None or gx > network.width or gy > network.height:
        raise InputError(f"grid_gemm: grid {grid} does not fit the cores of hardware {hardware.name!r}")
    if precision not in hardware.compute.peak_flop_per_s or fidelity not in hardware.compute.math_fidelity_phases:
        raise InputError(f"grid_gemm: no peak for {precision!r} at fidelity {fidelity!r} on {hardware.name!r}")
    cal = hardware.calibration
    tile_bytes = TILE_SIDE**2 * BYTES_PER_ELEMENT[precision]
    sram = hardware.memory.sram.capacity_bytes
    blocks = core_blocks(m, k, n, grid=grid, tile_bytes=tile_bytes, sram_bytes=sram, tuning=tuning)
    output_tiles = blocks.out_blocks * blocks.rows * blocks.columns
    products = output_tiles * math.ceil(k / TILE_SIDE)
    passes = hardware.compute.math_fidelity_phases[fidelity]
    feed = hardware.compute.unpacker
    h, w = subblock(blocks.rows, blocks.columns, feed.subblock_tiles if feed else 1, out_sharded=not in_dram[2])
    times = {"compute": products * TILE_PRODUCT_FLOP * passes / hardware.compute.peak_flop_per_s[precision],
             "unpack": products * unpack_s(hardware, precision, max(h, w)),
             "pack": pack_s(hardware, precision, output_tiles)}
    bound = max(times, key=lambda part: times[part])
    compute_s = times[bound] / cal.gemm_efficiency
    pipeline = gemm_pipeline(hardware, blocks, compute_s, tile_bytes=tile_bytes, grid=grid, in_dram=in_dram)
    shape = GemmShape(m=m, k=k, n=n, bytes_per_element=BYTES_PER_ELEMENT[precision])
    blocking = gemm_blocking(shape, sram, tile=TILE_SIDE, grid=(gy, gx))
    moved = sum(part for part, lives in zip((blocking.a_bytes, blocking.b_bytes, blocking.c_bytes), in_dram,
                                            strict=True) if lives)
    bandwidth = chip_dram_bytes_per_s(hardware)
    return GridGemm(compute_s=compute_s, dram_s=moved / (bandwidth * cal.memory_bound_efficiency),
                    dram_bytes=moved, overhead_s=cal.kernel_overhead_s,
                    bound="multicast" if pipeline.bound == "multicast" else bound, pipeline_s=pipeline.total_s)
