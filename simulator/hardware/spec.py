"""Hardware described as data: devices, the network that joins them, memory, calibration.

All quantities are SI (bytes, s, bytes/s, flop/s). TOML presets carry decimal- or binary-prefixed
units in their key names and are converted once by :mod:`simulator.hardware.loader`.

Two kinds of machine share one :class:`Hardware` record:

* ``mesh``: a tiled accelerator, ``dies_x * dies_y`` dies of ``cores_x * cores_y`` cores on a
  2D mesh with XY routing, DRAM attached to die edges (PALM Fig. 1(c), Table VI). A *device* is a
  core.
* ``cluster``: GPU nodes of ``gpus_per_node`` GPUs on a switch (NVSwitch) joined by a non-blocking
  fabric (InfiniBand) through one NIC per GPU (Narayanan et al. SC'21 §5). A *device* is a GPU.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal


@dataclass(frozen=True, slots=True, kw_only=True)
class Calibration:
    """Achieved fractions of peak, one set per hardware, each with its source in the file.

    Attributes:
        gemm_efficiency: achieved / peak flop/s of a large GEMM (0, 1].
        memory_bound_efficiency: achieved / peak bandwidth of element-wise operators (0, 1].
        collective_efficiency: achieved bus bandwidth / link bandwidth of collectives (0, 1].
        p2p_efficiency: achieved / link bandwidth of a point-to-point transfer (0, 1].
        kernel_overhead_s: fixed launch/synchronisation cost per operator (s).
        sources: the ``source`` string of each of the above, by attribute name.
    """

    gemm_efficiency: float
    memory_bound_efficiency: float
    collective_efficiency: float
    p2p_efficiency: float
    kernel_overhead_s: float
    sources: dict[str, str] = field(default_factory=dict, compare=False)


@dataclass(frozen=True, slots=True, kw_only=True)
class Mesh:
    """A 2D mesh of dies of cores (PALM Table VI; Fig. 1(c)).

    Attributes:
        dies_x, dies_y: dies along x and y.
        cores_x, cores_y: cores per die along x and y.
        intra_die_link_bandwidth_bytes_per_s: one direction of a link between two cores of a die.
        inter_die_link_bandwidth_bytes_per_s: one direction of a link crossing a die boundary.
        hop_latency_s: latency of one link hop.
        dram_ports_per_die: DRAM controllers per die, on its west and east edges (1 or 2).
        dram_bandwidth_bytes_per_s: DRAM bandwidth of one die, shared by its ports.
        dram_latency_s: DRAM response time (PALM Eq. 4).
        dram_capacity_bytes: DRAM capacity of one die.
    """

    dies_x: int
    dies_y: int
    cores_x: int
    cores_y: int
    intra_die_link_bandwidth_bytes_per_s: float
    inter_die_link_bandwidth_bytes_per_s: float
    hop_latency_s: float
    dram_ports_per_die: int
    dram_bandwidth_bytes_per_s: float
    dram_latency_s: float
    dram_capacity_bytes: float

    @property
    def width(self) -> int:
        """Cores along x over the whole mesh."""
        return self.dies_x * self.cores_x

    @property
    def height(self) -> int:
        """Cores along y over the whole mesh."""
        return self.dies_y * self.cores_y

    @property
    def num_devices(self) -> int:
        """Cores on the mesh."""
        return self.width * self.height


@dataclass(frozen=True, slots=True, kw_only=True)
class Cluster:
    """GPU nodes on a switched fabric (Narayanan et al. SC'21 §5; NVIDIA DGX A100 datasheet).

    Attributes:
        nodes: number of nodes.
        gpus_per_node: GPUs per node, all on one switch (NVSwitch).
        intra_node_bandwidth_bytes_per_s: one direction of one GPU's switch port.
        inter_node_bandwidth_bytes_per_s: one direction of one GPU's NIC.
        intra_node_latency_s: one switch traversal.
        inter_node_latency_s: one fabric traversal.
        hbm_bandwidth_bytes_per_s: one GPU's memory bandwidth.
        hbm_capacity_bytes: one GPU's memory capacity.
        streaming_multiprocessors: SMs of one GPU; a GEMM runs in waves of this many output tiles.
        gemm_tile_rows, gemm_tile_columns: the output tile one SM computes at a time (the GEMM
            library's largest tile); see :func:`gemm_wave_efficiency`.
        inter_node_efficiency: achieved fraction of a NIC's line rate, for collectives and p2p
            alike (0, 1]; on NIC resources it replaces the calibration's collective and p2p
            efficiencies, which are measured on NVLink.
    """

    nodes: int
    gpus_per_node: int
    intra_node_bandwidth_bytes_per_s: float
    inter_node_bandwidth_bytes_per_s: float
    intra_node_latency_s: float
    inter_node_latency_s: float
    hbm_bandwidth_bytes_per_s: float
    hbm_capacity_bytes: float
    streaming_multiprocessors: int
    gemm_tile_rows: int
    gemm_tile_columns: int
    inter_node_efficiency: float

    @property
    def num_devices(self) -> int:
        """GPUs in the cluster."""
        return self.nodes * self.gpus_per_node

    def gemm_wave_efficiency(self, rows: float, columns: float) -> float:
        """Fraction of a GEMM's ``waves x SMs`` tile slots doing useful work (0..1].

        A ``rows x columns`` output is cut into ``ceil(rows/Tr) ceil(columns/Tc)`` tiles, run
        ``SMs`` at a time; the last, partial wave and the padding of edge tiles idle the rest
        (NVIDIA Deep Learning Performance Guide, "Matrix Multiplication Background": tile and wave
        quantization).
        """
        if rows <= 0 or columns <= 0:
            return 1.0
        tiles = math.ceil(rows / self.gemm_tile_rows) * math.ceil(columns / self.gemm_tile_columns)
        waves = math.ceil(tiles / self.streaming_multiprocessors)
        slots = waves * self.streaming_multiprocessors * self.gemm_tile_rows * self.gemm_tile_columns
        return rows * columns / slots


@dataclass(frozen=True, slots=True, kw_only=True)
class Hardware:
    """One machine: device compute and memory, network, calibration.

    Attributes:
        name: preset or file name.
        kind: ``mesh`` or ``cluster``.
        peak_flop_per_s: peak arithmetic rate of one device by precision
            (keys among ``fp32``, ``fp16``, ``bf16``, ``int8``; int8 in op/s).
        sram_bytes: on-chip SRAM of one device (a core's share of its die on a mesh).
        sram_bandwidth_bytes_per_s: SRAM bandwidth of one device, used by memory-bound operators
            whose operands stay on chip.
        network: the :class:`Mesh` or :class:`Cluster`.
        calibration: the achieved fractions of peak.
        sources: the ``source`` string of each quantity, by key path.
    """

    name: str
    kind: Literal["mesh", "cluster"]
    peak_flop_per_s: dict[str, float]
    sram_bytes: float
    sram_bandwidth_bytes_per_s: float
    network: Mesh | Cluster
    calibration: Calibration
    sources: dict[str, str] = field(default_factory=dict, compare=False)

    @property
    def num_devices(self) -> int:
        """Devices (cores or GPUs) in the machine."""
        return self.network.num_devices

    def device_memory_bytes(self) -> float:
        """Memory capacity available to one device for weights, states and activations.

        On a mesh, a die's DRAM is shared equally by its cores; on a cluster, a GPU's HBM.
        """
        net = self.network
        if isinstance(net, Mesh):
            return net.dram_capacity_bytes / (net.cores_x * net.cores_y)
        return net.hbm_capacity_bytes
