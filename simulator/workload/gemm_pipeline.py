"""A GEMM's operand blocks as a tiled chip's data-movement kernels bring them: pipeline fill, the
per-K-block transfer and multicast handshake, and the drain (Tenstorrent Tensix grids).

tt-metal's ``matmul_multicore_reuse_mcast_2d`` gives each core of a ``gx x gy`` grid a
``rows x columns`` block of output tiles and walks ``K`` in ``k_blocks`` blocks of ``k_block``
tiles (``in0_block_w``). Per K-block, one core per grid row sends the row's ``rows x k_block``
block of ``A`` (in0) and one core per grid column the column's ``k_block x columns`` block of ``B``
(in1); each sender, one RISC-V running in order (tt-metal
``reader_bmm_tile_layout_in1_sender_writer_padding.cpp``, the in0 sender likewise):

1. reads its block from DRAM into a circular-buffer slot and waits on the read barrier, where the
   operand lives in DRAM (``dram_read_latency_s + bytes / rate``, the rate one core's, or its share
   of the chip's DRAM bandwidth when more senders read at once);
2. waits until every receiver has signalled a free slot (the receivers' semaphore increments cross
   the row or column: ``hops x hop_latency_s``), multicasts the block (``bytes /
   multicast_bandwidth_bytes_per_s``, linked writes) and sets the receivers' flag (another
   ``hops x hop_latency_s``; ``ttnn/cpp/ttnn/kernel_lib/mcast_pipe.hpp``); a sender without
   receivers (a grid one core high for ``B``, one wide for ``A``) keeps its block.

So a block costs its slower sender ``transfer_s`` (:func:`block_transfer_s`). The circular buffers
hold two blocks, so block ``b + 1`` moves while block ``b`` is multiplied, and the K loop is a
two-stage pipeline (Hennessy and Patterson, *Computer Architecture*, App. C: fill, then one block
per the slower stage):

``fill + compute_block + (k_blocks - 1) max(transfer, compute_block) + drain``

with ``fill = transfer`` (the first block must arrive before the first tile product) and the drain
the writer's output block to DRAM (``dram_write_latency_s + bytes / rate``, the rate one core's or
its share of the chip's DRAM bandwidth, as every core of the grid writes its block at once: the
multicast handshakes hold the cores' K loops in step; none where the output stays in L1, which the
packer writes itself).

**Blocking.** A program configuration may set it (:class:`BlockTuning`, tt-metal's
``MatmulMultiCoreReuseMultiCastProgramConfig`` as ``tests/ttnn/unit_tests/benchmarks/
test_benchmark.py::test_matmul_2d_host_perf`` builds it): the K-block is ``in0_block_w = K / gx /
in0_block_w_div`` tiles deep, and each core's ``per_core_M x per_core_N`` output is walked as
``num_out_blocks_h x num_out_blocks_w`` output blocks of ``out_block_h x out_block_w`` tiles, each
a whole K loop whose in0 and in1 blocks are read and multicast again (the reader kernels loop
``for bh, for bw, for block`` over ``num_blocks_h_dim``, ``num_blocks_w_dim``,
``num_blocks_inner_dim``: ``reader_bmm_tile_layout_in0_sender_padding.cpp``,
``reader_bmm_tile_layout_in1_sender_writer_padding.cpp``). Without one, the output is one block
and ``in0_block_w = K / gx`` halves until two slots of both operands' blocks fit in one core's SRAM.
Where the output lives in DRAM the in1 sender is also the writer: it writes output block ``i``
before it reads block ``i + 1``'s first K-block, so each output block pays its own fill and drain;
where it lives in L1 the K-blocks of all output blocks run as one pipeline.
Each figure is a :class:`~simulator.hardware.spec.DataMovement` of the hardware, from tt-metal's
data-movement microbenchmarks; a hardware without one pays nothing here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from simulator.errors import InputError
from simulator.hardware.spec import Hardware
from simulator.network.mesh import Mesh
from simulator.workload.tiled_stage import TILE_SIDE

DOUBLE_BUFFER = 2
"""Blocks each operand's circular buffer holds (tt-metal's ``matmul_multicore_reuse_mcast_2d``
program factory: ``in0_CB_tiles = in0_block_tiles * 2;  // double buffer``, ``in1_CB_tiles`` likewise)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class BlockTuning:
    """A matmul program configuration's blocking, as tt-metal's GEMM benchmark sets it per shape
    (``test_benchmark.py``: "in0_block_w_div: A parameter to divide an in0 block into multiple
    chunks", "num_out_blocks_h/w: ... divide an output block into multiple chunks").

    Attributes:
        in0_block_w_div: K-blocks per in0 shard column (``in0_block_w = K / gx / in0_block_w_div``).
        num_out_blocks_h: output blocks per core along M (``out_block_h = per_core_M / it``).
        num_out_blocks_w: output blocks per core along N (``out_block_w = per_core_N / it``).

    Raises:
        InputError: a divisor below 1.
    """

    in0_block_w_div: int = 1
    num_out_blocks_h: int = 1
    num_out_blocks_w: int = 1

    def __post_init__(self) -> None:
        if min(self.in0_block_w_div, self.num_out_blocks_h, self.num_out_blocks_w) < 1:
            raise InputError(f"block tuning: every divisor must be >= 1, got {self}")


@dataclass(frozen=True, slots=True, kw_only=True)
class CoreBlocks:
    """The busiest core's share of a GEMM on a grid, in 32 x 32 tiles: ``out_blocks`` output
    blocks of ``rows x columns`` tiles (``out_block_h x out_block_w``), each walking ``K`` in
    ``k_blocks`` blocks of ``k_block`` tiles."""

    rows: int
    columns: int
    k_block: int
    k_blocks: int
    out_blocks: int = 1


@dataclass(frozen=True, slots=True, kw_only=True)
class Pipeline:
    """A GEMM's K loop on one core (s): ``total_s`` with each block's ``transfer_s`` (the first
    one the fill), ``drain_s`` (the output written back) and ``bound`` (``compute`` when the tile
    products outlast the transfers, else ``multicast``)."""

    total_s: float
    transfer_s: float
    drain_s: float
    bound: str


def core_blocks(m: int, k: int, n: int, *, grid: tuple[int, int], tile_bytes: float,
                sram_bytes: float, tuning: BlockTuning | None = None) -> CoreBlocks:
    """The blocks of ``(m x k) @ (k x n)`` on a ``grid = (gx, gy)`` (``gx`` splits ``N`` and ``K``,
    ``gy`` splits ``M``) with tiles of ``tile_bytes`` and ``sram_bytes`` of SRAM per core, as
    ``tuning`` sets them, or where None one output block and the deepest K-block that fits (see
    the module docstring)."""
    gx, gy = grid
    k_tiles = math.ceil(k / TILE_SIDE)
    rows, columns = math.ceil(math.ceil(m / TILE_SIDE) / gy), math.ceil(math.ceil(n / TILE_SIDE) / gx)
    depth = math.ceil(k_tiles / gx)
    if tuning is not None:
        depth = math.ceil(depth / tuning.in0_block_w_div)
        return CoreBlocks(rows=math.ceil(rows / tuning.num_out_blocks_h),
                          columns=math.ceil(columns / tuning.num_out_blocks_w), k_block=depth,
                          k_blocks=math.ceil(k_tiles / depth),
                          out_blocks=tuning.num_out_blocks_h * tuning.num_out_blocks_w)
    while depth > 1 and DOUBLE_BUFFER * (rows + columns) * depth * tile_bytes > sram_bytes:
        depth = math.ceil(depth / 2)
    return CoreBlocks(rows=rows, columns=columns, k_block=depth, k_blocks=math.ceil(k_tiles / depth))


def chip_dram_bytes_per_s(hardware: Hardware) -> float:
    """The DRAM bandwidth of all the mesh's dies (bytes/s; 0 without DRAM)."""
    dram, network = hardware.memory.dram, hardware.network
    dies = network.dies_x * network.dies_y if isinstance(network, Mesh) else 1
    return 0.0 if dram is None else dram.bandwidth_bytes_per_s * dies


def block_transfer_s(hardware: Hardware, blocks: CoreBlocks, *, tile_bytes: float, grid: tuple[int, int],
                     in_dram: tuple[bool, bool]) -> float:
    """Time the slower sender takes to bring one K-block to its row or column (s): the in0 block
    (``rows x k_block`` tiles) along the grid row, the in1 block (``k_block x columns``) along the
    grid column, each read from DRAM first where ``in_dram`` says so (0 without a
    :class:`~simulator.hardware.spec.DataMovement` record)."""
    moves, network = hardware.compute.data_movement, hardware.network
    if moves is None or not isinstance(network, Mesh):
        return 0.0
    gx, gy = grid
    readers = gy * in_dram[0] + gx * in_dram[1]
    share = chip_dram_bytes_per_s(hardware) * hardware.calibration.memory_bound_efficiency / max(readers, 1)
    read_rate = min(moves.dram_read_bandwidth_bytes_per_s, share)

    def sender(tiles: int, dram: bool, hops: int) -> float:
        size = tiles * tile_bytes
        read = moves.dram_read_latency_s + size / read_rate if dram else 0.0
        if not hops:  # no receivers: the block is the sender's own (a grid one core wide or high)
            return read
        return read + size / moves.multicast_bandwidth_bytes_per_s + 2 * hops * network.hop_latency_s

    return max(sender(blocks.rows * blocks.k_block, in_dram[0], gx - 1),
               sender(blocks.k_block * blocks.columns, in_dram[1], gy - 1))


def gemm_pipeline(hardware: Hardware, blocks: CoreBlocks, compute_s: float, *, tile_bytes: float,
                  grid: tuple[int, int], in_dram: tuple[bool, bool, bool]) -> Pipeline:
    """The K loops of one core whose tile products take ``compute_s`` in all (see the module
    docstring): ``runs`` two-stage pipelines, one per output block where the output is written to
    DRAM, else one over every output block's K-blocks,
    ``runs (fill + compute_block + (blocks_per_run - 1) max(transfer, compute_block) + drain)``;
    ``in_dram`` says whether ``A``, ``B`` and ``C`` live in DRAM."""
    transfer = block_transfer_s(hardware, blocks, tile_bytes=tile_bytes, grid=grid, in_dram=in_dram[:2])
    moves = hardware.compute.data_movement
    drain = 0.0
    if moves is not None and in_dram[2]:
        share = chip_dram_bytes_per_s(hardware) * hardware.calibration.memory_bound_efficiency / (grid[0] * grid[1])
        drain = (moves.dram_write_latency_s
                 + blocks.rows * blocks.columns * tile_bytes / min(moves.dram_write_bandwidth_bytes_per_s, share))
    steps = blocks.out_blocks * blocks.k_blocks
    per_block = compute_s / steps
    runs = blocks.out_blocks if in_dram[2] else 1
    total = runs * (transfer + per_block + drain) + (steps - runs) * max(transfer, per_block)
    return Pipeline(total_s=total, transfer_s=transfer, drain_s=drain,
                    bound="multicast" if transfer > per_block else "compute")


def k_loop_s(hardware: Hardware, *, m: float, k: float, n: float, grid: tuple[int, int], tile_bytes: float,
             in_dram: tuple[bool, bool, bool], compute_s: float | None = None, peak_flop_per_s: float = 0.0) -> float:
    """The K loop (:func:`gemm_pipeline`) of the busiest core of ``(m x k) @ (k x n)`` on a
    ``grid = (gx, gy)`` of one chip's cores, its operands and output where ``in_dram`` says, its
    tile products taking ``compute_s``, or where None the busiest core's products at
    ``peak_flop_per_s`` (one core's, efficiency included) (s; 0 without a
    :class:`~simulator.hardware.spec.DataMovement` record or off a mesh).

    Two grids use it: a tensor-parallel group of ``g`` cores computes its GEMM as a ``g x 1``
    grid, the shared input multicast along it in ``g`` K-blocks (tt-metal's decode matmuls walk
    ``K`` one activation shard per block, issue #55443: "its cost is the block count
    ``K / in0_block_w``"), each core's weights read from DRAM block by block, activations and
    output in SRAM; and a serving stack's own grid (tt-metal's prefill: "Use matmul 2D for all
    matmuls in prefill mode", "Inputs and output to matmul 2D are interleaved in DRAM",
    ``tech_reports/LLMs/llms.md`` @0100dbfc; its decode: DRAM-sharded weights, activations in SRAM)."""
    if hardware.compute.data_movement is None or not isinstance(hardware.network, Mesh):
        return 0.0
    blocks = core_blocks(math.ceil(m), math.ceil(k), math.ceil(n), grid=grid, tile_bytes=tile_bytes,
                         sram_bytes=hardware.memory.sram.capacity_bytes)
    if compute_s is None:
        compute_s = blocks.rows * blocks.columns * blocks.k_block * blocks.k_blocks * 2.0 * TILE_SIDE**3 / (
            peak_flop_per_s)
    return gemm_pipeline(hardware, blocks, compute_s, tile_bytes=tile_bytes, grid=grid, in_dram=in_dram).total_s
