"""The tiled dataflow of a stage: each operator's DRAM traffic as a tiled chip's kernels move it.

PALM Algorithm 1 (:mod:`simulator.workload.sram`) re-streams a whole operand once per SRAM-sized
chunk of the other (one-dimensional blocking). Tiled chips block a GEMM in two dimensions per
core and share operands across cores by NoC multicast (tt-metal ``matmul_multicore_reuse_mcast``
and its GEMM_FLOPS tech report); here every product of a GEMM operator is charged the DRAM bytes
of its best two-dimensional blocking under one core's SRAM (:func:`~simulator.workload.tiled.gemm_blocking`,
double-buffered streamed blocks, tile sides multiples of the 32 x 32 hardware tile).

An operator ``C (m x n) = A (m x k) B (k x n)`` (``k = flops / 2 m n``) has three products,
each blocked on its own (Narayanan et al. SC'21 §5.1 count the same three GEMMs):

* forward ``C = A B``, shape ``(m, k, n)``;
* data gradient ``dA = dC B^T``, shape ``(m, n, k)``;
* weight gradient ``dB = A^T dC``, shape ``(k, m, n)`` (for a batched GEMM, the gradient of its
  second activation).

Batched GEMMs (attention scores and values: no weights, both operands activations) are ``batch``
independent products of ``(m / batch, k, n)``, ``batch = (input - m k) / (k n)`` elements. A
convolution reads its input feature map from DRAM, not the ``m x k`` im2col matrix (overlapping
windows are reused in SRAM), so ``A``'s bytes (and the data gradient's output) scale by
``input / (m k) <= 1``.

A column-parallel operator (:attr:`~simulator.workload.operators.Operator.shared_input`) on a
tensor-parallel group of ``t > 1`` devices: the group computes ``(m, k, t n)`` on a ``1 x t`` grid,
reads ``A`` once from DRAM and multicasts it along the group; each device is charged ``1/t`` of the
group's DRAM bytes and receives ``A``'s bytes over the NoC, costed as an all-gather of them over
the group that runs under the pass's compute (the multicast reader kernels run beside the math;
tt-metal's reuse-mcast matmul). The weight gradient shares ``A^T`` the same way. Weights are the same
on the ``dp`` data-parallel replicas of a stage, which run in lockstep on the same chip: a weighted
product is computed by a ``dp x t`` grid, ``B`` read once per replica column and multicast to the
replicas (the data gradient's ``B^T`` too), costed as an all-gather of those bytes over the stage's
data-parallel group under the pass's compute. An operator whose weights are the same on the
whole tensor-parallel group (:attr:`~simulator.workload.operators.Operator.shared_weight`: a
height-sharded convolution, tt-metal ``conv2d``'s weights "mcast sender" reader kernel) is
computed by a ``dp t x 1`` grid that reads ``B`` once and multicasts it, costed as an all-gather
over the tensor-parallel group. An operator whose activations stay sharded in SRAM
(:attr:`~simulator.workload.operators.Operator.sharded`, tt-metal's CNN layers) and fit there
moves only its weights forward, once per group sharing them. Element-wise operators stream their inputs, weights
and outputs once forward and twice backward (the roofline's ``2x``), split over the tensor-parallel
group's cores (:func:`~simulator.workload.operators.transformer_layer`); recomputed operators add
their forward traffic to the backward.
When the whole stage fits in SRAM (Algorithm 1's resident test) nothing moves, and the gradient
update moves what Algorithm 1 charges (:func:`simulator.workload.sram.update_bytes`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from functools import cache

from simulator.workload.operators import Operator
from simulator.workload.sram import OperatorGroup, PlanFields, SramPlan, stage_branch, stage_totals, update_bytes
from simulator.workload.tiled import Blocking, GemmShape, gemm_blocking

TILE_SIDE = 32
"""Side of the hardware tile in elements (tt-metal ``TILE_HEIGHT = TILE_WIDTH = 32``)."""


@dataclass(frozen=True, slots=True)
class Traffic:
    """DRAM bytes one device moves for an operator's pass, the bytes it receives by multicast
    along its tensor-parallel group (``multicast_bytes``) and along its data-parallel replicas
    (``replica_bytes``), and the loop order of its largest product."""

    dram_bytes: float = 0.0
    multicast_bytes: float = 0.0
    replica_bytes: float = 0.0
    order: str = "stream"

    def __add__(self, other: Traffic) -> Traffic:
        order = self.order if self.dram_bytes >= other.dram_bytes else other.order
        return Traffic(self.dram_bytes + other.dram_bytes, self.multicast_bytes + other.multicast_bytes,
                       self.replica_bytes + other.replica_bytes, order)

    def scaled(self, factor: float) -> Traffic:
        return Traffic(self.dram_bytes * factor, self.multicast_bytes * factor, self.replica_bytes * factor,
                       self.order)


@cache
def _blocking(shape: GemmShape, sram_bytes: float, grid: tuple[int, int]) -> Blocking:
    return gemm_blocking(shape, sram_bytes, tile=TILE_SIDE, grid=grid)


def product_traffic(m: float, k: float, n: float, bytes_per_element: float, sram_bytes: float, *,
                    grid: tuple[int, int] = (1, 1), a_scale: float = 1.0, c_scale: float = 1.0,
                    b_scale: float = 1.0) -> Traffic:
    """DRAM traffic of one device for a product ``(m x k) (k x n)`` computed by a ``gm x gn``
    grid of devices as ``(gm m, k, gn n)``: ``A`` shared (multicast) along each row of ``gn``
    devices, ``B`` along each column of ``gm`` (``(1, 1)``: nothing shared).

    Args:
        m, k, n: the device's product (elements).
        bytes_per_element: of every operand.
        sram_bytes: one device's SRAM for the blocks.
        grid: ``(gm, gn)``.
        a_scale, c_scale: bytes of ``A`` and ``C`` actually in DRAM per byte of the matrix
            (a convolution's feature map against its im2col matrix).
        b_scale: bytes of ``B`` in DRAM per byte of the matrix (a serving stack's own format of
            the weights or KV cache, :attr:`~simulator.workload.operators.Operator.b_bytes_per_element`).

    Returns:
        The device's share of the grid's DRAM bytes; ``multicast_bytes`` the ``A`` bytes one row
        of the grid reads and multicasts along itself (0 when ``gn == 1``), ``replica_bytes`` the
        ``B`` bytes one column reads and multicasts along itself (0 when ``gm == 1``).
    """
    rows, columns = grid
    shape = GemmShape(m=max(math.ceil(m * rows), 1), k=max(math.ceil(k), 1), n=max(math.ceil(n * columns), 1),
                      bytes_per_element=bytes_per_element)
    blocking = _blocking(shape, sram_bytes, grid)
    a_bytes, b_bytes = blocking.a_bytes * a_scale, blocking.b_bytes * b_scale
    total = a_bytes + b_bytes + blocking.c_bytes * c_scale
    return Traffic(total / (rows * columns), a_bytes / rows if columns > 1 else 0.0,
                   b_bytes / columns if rows > 1 else 0.0, blocking.order)


def _layout(op: Operator, bytes_per_element: float) -> tuple[float, float, float, int, float]:
    """``(m, k, n, batch, a_scale)`` of one product of the operator's batch."""
    m, n = op.rows, op.columns
    k = op.flops / (2.0 * m * n)
    if op.weight_bytes:
        return m, k, n, 1, min(1.0, op.input_bytes / (bytes_per_element * m * k))
    second = op.input_bytes / bytes_per_element - m * k
    if op.b_bytes_per_element:  # the second operand (cached keys or values) in a format of its own
        second = (op.input_bytes - bytes_per_element * m * k) / op.b_bytes_per_element
    batch = max(1, round(second / (k * n)))
    return m / batch, k, n, batch, 1.0


def operator_traffic(op: Operator, fields: PlanFields, sram_bytes: float) -> tuple[Traffic, Traffic]:
    """(forward, backward without recompute) traffic of one device for ``op`` (none for an
    :attr:`~simulator.workload.operators.Operator.l1_only` one)."""
    if op.l1_only:
        return Traffic(), Traffic()
    resident = op.sharded and op.input_bytes + op.output_bytes <= sram_bytes
    if resident:
        return _weights_only(op, fields), operator_traffic(replace(op, sharded=False), fields, sram_bytes)[1]
    if op.kind != "gemm":
        moved = Traffic(op.input_bytes + op.weight_bytes + op.output_bytes)
        return moved, moved.scaled(2.0)
    e = fields.bytes_per_element
    m, k, n, batch, a_scale = _layout(op, e)
    tp = fields.tp if op.shared_input else 1
    dp = fields.replicas_per_chip if op.weight_bytes else 1
    rows = dp * (fields.tp if op.shared_weight else 1)
    forward = product_traffic(m, k, n, e, sram_bytes, grid=(rows, tp), a_scale=a_scale,
                              b_scale=(op.b_bytes_per_element or e) / e)
    data_gradient = product_traffic(m, n, k, e, sram_bytes, grid=(rows, 1), c_scale=a_scale)
    weight_gradient = product_traffic(k, m, n, e, sram_bytes, grid=(1, tp), a_scale=a_scale)
    if op.shared_weight:
        forward, data_gradient = _weights_over_group(forward), _weights_over_group(data_gradient)
    return forward.scaled(batch), (data_gradient + weight_gradient).scaled(batch)


def _weights_only(op: Operator, fields: PlanFields) -> Traffic:
    """Forward traffic of a :attr:`~simulator.workload.operators.Operator.sharded` operator whose
    activations fit in SRAM: its weights, read once by the devices sharing them (its ``dp``
    replicas, and its tensor-parallel group where it has ``shared_weight``) and multicast to them."""
    group = fields.tp if op.shared_weight else 1
    sharing = fields.replicas_per_chip * group
    if sharing == 1:
        return Traffic(op.weight_bytes)
    multicast = op.weight_bytes if group > 1 else 0.0
    return Traffic(op.weight_bytes / sharing, multicast, op.weight_bytes - multicast)


def _weights_over_group(traffic: Traffic) -> Traffic:
    """``traffic`` with its weight multicast timed over the tensor-parallel group (a height-sharded
    convolution's weights go to its group's cores and their replicas; timed over the group)."""
    return Traffic(traffic.dram_bytes, traffic.multicast_bytes + traffic.replica_bytes, 0.0, traffic.order)


def plan_stage_tiled(groups: Sequence[OperatorGroup], capacity: float, fields: PlanFields,
                     recomputed: Sequence[OperatorGroup] = ()) -> SramPlan:
    """The tiled dataflow over a stage: DRAM and multicast bytes of one device per microbatch.

    Args:
        groups: the stage's operators, each group repeated ``count`` times.
        capacity: SRAM of one device (bytes).
        fields: the strategy's precision, ``tp``, mode, model states, update and ``dp``
            (:class:`~simulator.workload.sram.PlanFields`).
        recomputed: operators re-run in the backward.

    Returns:
        The stage's plan; ``strategies`` holds the loop order of each distinct operator.
    """
    totals = stage_totals(groups, fields)
    if stage_branch(totals, capacity) == "resident":
        return SramPlan(forward_dram_bytes=0.0, backward_dram_bytes=0.0, update_dram_bytes=0.0,
                        resident_bytes=totals.wsg_bytes + totals.activation_bytes, strategies=("resident",))
    forward = backward = Traffic()
    orders: list[str] = []
    for ops, count in groups:
        for op in ops:
            f, b = operator_traffic(op, fields, capacity)
            forward, backward = forward + f.scaled(count), backward + b.scaled(count)
            orders.append(f.order)
    if not fields.training:
        backward = Traffic()
    for ops, count in recomputed if fields.training else ():
        for op in ops:
            backward = backward + operator_traffic(op, fields, capacity)[0].scaled(count)
    return SramPlan(forward_dram_bytes=forward.dram_bytes, backward_dram_bytes=backward.dram_bytes,
                    update_dram_bytes=update_bytes(totals, capacity, fields), resident_bytes=capacity,
                    strategies=tuple(orders), forward_multicast_bytes=forward.multicast_bytes,
                    backward_multicast_bytes=backward.multicast_bytes,
                    forward_replica_bytes=forward.replica_bytes, backward_replica_bytes=backward.replica_bytes)
