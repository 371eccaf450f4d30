"""A convolution as tt-metal's ``ttnn.conv2d`` computes it: an implicit GEMM on 32 x 32 tiles.

tt-metal has no convolution instruction; it runs a convolution as a matrix product (tenstorrent/
tt-metal ``tech_reports/CNNs/ttcnn.md``, "Convolution as Matrix Multiplication"): an activation
matrix of ``M = N H_out W_out`` rows (one sliding window each) by ``K = K_h K_w C_in`` columns
times the weight matrix ``[K_h K_w C_in, C_out]``. Every dimension is padded as follows:

* **input channels**: the halo op hands the convolution row-major "sticks" of ``C_in`` values,
  whose width is aligned to the L1's 16 bytes, i.e. 8 bfloat16 values, or to 16 or 32 where
  the stick width is a multiple of them (``conv2d_utils.cpp``, ``get_input_channels_alignment``:
  "The minimum valid value for input channels alignment is 8 ... ``get_l1_alignment() / 2``");
  a 1 x 1, stride-1 convolution runs as a plain matmul (``use_matmul_for_1x1_conv``) on tiled
  input, aligned to ``TILE_WIDTH = 32``. A 3-channel first layer thus reads 8 channels.
* **K and N**: the weight matrix ``[K_h K_w C_in_aligned, C_out]`` is padded "to be multiples of
  tile size" in both dimensions (``ttcnn.md``, "Weight and Bias tensor Layout Transformation").
* **M per core**: the flattened ``N H W`` rows are padded to ``cores x 32``
  (``conv2d_utils.cpp``, ``create_sharded_memory_config_from_parallel_config``:
  ``nhw_padded = round_up(nhw, num_cores_nhw * tile_size)``), so each core's shard is a whole
  number of tile rows; a width-sharded core's ``C_out`` share is ``div_up(shard width, 32)``
  tiles (``determine_conv_op_parallel_config_from_conv_output_mem_config``).

**Sharding.** ``conv2d`` shards height (``N H W`` split over the cores, weights replicated),
width (channels split, activations shared by multicast) or block (both) over the grid
(``ttcnn.md``, "Sharding"; ``determine_parallel_config``). The simulator's tensor-parallel split
of a convolution over the image or the output channels (:func:`~simulator.workload.operators.resnet50_units`)
is the height- or width-sharded case; the per-core padding follows the shard.

**Data movement around the GEMM.** A convolution that is not a plain matmul first runs the
halo op (``ttnn/cpp/ttnn/operations/sliding_window/halo``, ``ttcnn.md`` "Haloing"), which copies
the core's input sticks, the padding sticks and its neighbours' sticks into one L1 buffer; its
compute kernel then tilizes each im2col activation block before multiplying it
(``conv/conv2d/device/kernels/conv_bmm_tilize.cpp``: ``tilize_in`` ahead of the matmul on the
same unpack/math/pack cores), so the tilize runs in series with the arithmetic.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

TILE_SIDE = 32
"""tt-metal ``TILE_HEIGHT = TILE_WIDTH = 32``."""

MIN_CHANNEL_ALIGNMENT = 8
"""Smallest input-channel alignment of a row-major stick: the 16-byte L1 alignment over the
2-byte bfloat16 (``conv2d_utils.cpp``, ``get_input_channels_alignment``)."""


def _round_up(value: float, multiple: int) -> int:
    return math.ceil(value / multiple) * multiple


def is_matmul(kernel: int, stride: int) -> bool:
    """A 1 x 1, stride-1 convolution (no padding) runs as a plain matmul on tiled input, with
    no halo and no tilize (``conv2d_utils.cpp``, ``use_matmul_for_1x1_conv``)."""
    return kernel == 1 and stride == 1


def aligned_channels(c_in: int, kernel: int, stride: int) -> int:
    """Input channels as the convolution reads them: ``round_up(C_in, a)``, ``a = 32`` for a
    matmul convolution, else the largest of 32, 16, 8 dividing ``round_up(C_in, 8)`` (see the
    module docstring)."""
    if is_matmul(kernel, stride):
        return _round_up(c_in, TILE_SIDE)
    stick = _round_up(c_in, MIN_CHANNEL_ALIGNMENT)
    alignment = next(a for a in (TILE_SIDE, 16, MIN_CHANNEL_ALIGNMENT) if stick % a == 0)
    return _round_up(c_in, alignment)


@dataclass(frozen=True, slots=True)
class ImplicitGemm:
    """One core's implicit GEMM ``(m x k) @ (k x n)`` of a convolution, padded to tiles
    (elements), and the logical sizes it stands for."""

    m: int
    k: int
    n: int
    logical_m: float
    logical_k: float
    logical_n: float

    @property
    def flops(self) -> float:
        """Flop the matrix engine executes, padding included: ``2 m k n``."""
        return 2.0 * self.m * self.k * self.n

    @property
    def logical_flops(self) -> float:
        """The convolution's own flop: ``2 M K N`` of the unpadded shapes."""
        return 2.0 * self.logical_m * self.logical_k * self.logical_n


def implicit_gemm(rows: float, c_in: int, columns: float, kernel: int, stride: int) -> ImplicitGemm:
    """One core's padded implicit GEMM.

    Args:
        rows: the core's output positions ``N H_out W_out / cores`` (its height shard; may be
            fractional before padding).
        c_in: input channels of the convolution (all of them: ``K`` is never split).
        columns: the core's output channels (``C_out``, or its width shard).
        kernel, stride: square window side and stride.

    Returns:
        ``m = round_up(rows, 32)``, ``k = round_up(kernel^2 aligned_channels, 32)``,
        ``n = round_up(columns, 32)``.
    """
    k = kernel * kernel * aligned_channels(c_in, kernel, stride)
    return ImplicitGemm(m=_round_up(rows, TILE_SIDE), k=_round_up(k, TILE_SIDE), n=_round_up(columns, TILE_SIDE),
                        logical_m=rows, logical_k=float(kernel * kernel * c_in), logical_n=columns)


def tilize_bytes(gemm: ImplicitGemm, kernel: int, stride: int, bytes_per_element: float) -> float:
    """Bytes the compute kernel moves through L1 to tilize the core's im2col activation matrix:
    each element read row-major and written as a tile, ``2 m k B`` (0 for a matmul convolution,
    whose input is already tiled)."""
    if is_matmul(kernel, stride):
        return 0.0
    return 2.0 * gemm.m * gemm.k * bytes_per_element
