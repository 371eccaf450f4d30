"""Hardware described as data, carved by what each part is: compute, memory, network, calibration.

All quantities are SI (bytes, s, bytes/s, flop/s). TOML presets carry decimal- or binary-prefixed
units in their key names and are converted once by :mod:`simulator.hardware.loader` (whose file
layout is unchanged by the carving: :mod:`simulator.hardware.layout` says which key fills which
record).

A :class:`Hardware` record holds four parts:

* :class:`Compute`: one device's peaks per precision, math-fidelity passes and (a GPU) GEMM
  tiling over its SMs;
* :class:`Memory`: its levels, SRAM per device, then DRAM per die shared by the die's cores
  (:class:`Dram`, reached over the mesh) or HBM per device (:class:`Hbm`);
* a :class:`Network` record of one kind, the fabric only (topology, links, latencies), each kind
  a module of :mod:`simulator.network`: ``mesh`` (a tiled accelerator, PALM Fig. 1(c)),
  ``cluster`` (GPU nodes on NVSwitch and InfiniBand, Narayanan et al. SC'21 §5), ``torus``
  (chips on a 2D/3D torus, TPU v4);
* :class:`Calibration`: the achieved fractions of peak measured on the machine, with sources.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import ClassVar, Literal, TypeVar

from simulator.errors import InputError

Dataflow = Literal["palm-algorithm-1", "tiled"]
"""How a mesh's operators move operands between DRAM and SRAM (:class:`Dram`)."""

DATAFLOWS: tuple[str, ...] = ("palm-algorithm-1", "tiled")
"""The values of :data:`Dataflow`, for file checks."""

DramAccess = Literal["nearest", "interleaved"]
"""Which of a die's DRAM ports a core's traffic goes to (:class:`Dram`)."""

DRAM_ACCESSES: tuple[str, ...] = ("nearest", "interleaved")
"""The values of :data:`DramAccess`, for file checks."""
DieCollectives = Literal["flat", "hierarchical"]
DIE_COLLECTIVES: tuple[str, ...] = ("flat", "hierarchical")
"""How a mesh runs a collective over cores of several dies (:class:`simulator.network.mesh.Mesh`)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Calibration:
    """Achieved fractions of peak, one set per hardware, each with its source in the file.

    Attributes:
        gemm_efficiency: achieved / peak flop/s of a large GEMM (0, 1].
        memory_bound_efficiency: achieved / peak bandwidth of element-wise operators (0, 1].
        collective_efficiency: achieved bus bandwidth / link bandwidth of collectives (0, 1].
        p2p_efficiency: achieved / link bandwidth of a point-to-point transfer (0, 1].
        kernel_overhead_s: fixed launch/synchronisation cost per operator (s).
        fused_attention_efficiency: achieved / peak flop/s of the fused attention kernel
            (FlashAttention) on the flops it executes (0, 1]; None where no such kernel is stated
            (attention then runs unfused).
        fused_attention_backward_efficiency: the same of the kernel's backward pass, on its
            flops (2.5 times the forward's); None: ``fused_attention_efficiency``.
        fp8_gemm_efficiency: achieved / peak flop/s of a large FP8 GEMM against the FP8 peak
            (0, 1], its inputs' per-step quantization included under Transformer Engine's
            default recipe (DelayedScaling); None where the hardware runs no FP8 GEMM (precision
            ``fp8`` is then refused).
        fp8_current_scaling_gemm_efficiency, fp8_blockwise_gemm_efficiency: the same under
            Transformer Engine's Float8CurrentScaling and Float8BlockScaling recipes, whose
            quantization costs more per step (:meth:`fp8_efficiency`); None: not stated.
        sources: the ``source`` string of each of the above, by attribute name.
    """

    gemm_efficiency: float
    memory_bound_efficiency: float
    collective_efficiency: float
    p2p_efficiency: float
    kernel_overhead_s: float
    fused_attention_efficiency: float | None = None
    fused_attention_backward_efficiency: float | None = None
    fp8_gemm_efficiency: float | None = None
    fp8_current_scaling_gemm_efficiency: float | None = None
    fp8_blockwise_gemm_efficiency: float | None = None
    sources: dict[str, str] = field(default_factory=dict, compare=False, repr=False)

    def fp8_efficiency(self, recipe: str) -> float | None:
        """The FP8 GEMM efficiency under the FP8 scaling ``recipe`` (a key of
        :data:`FP8_RECIPE_KEYS`); None where not stated."""
        return getattr(self, FP8_RECIPE_KEYS[recipe])  # type: ignore[no-any-return]


FP8_RECIPE_KEYS = {"delayed": "fp8_gemm_efficiency", "current": "fp8_current_scaling_gemm_efficiency",
                   "blockwise": "fp8_blockwise_gemm_efficiency"}
"""The :class:`Calibration` key of each FP8 scaling recipe (:data:`simulator.strategy.FP8_RECIPES`)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Unpacker:
    """How fast one core feeds its matrix engine from SRAM and drains it back (a Tenstorrent Tensix
    core: unpackers move operand tiles from L1 into the ``SrcA``/``SrcB`` registers, packers move
    result tiles from ``Dst`` back to L1). Used by :mod:`simulator.workload.matrix_feed`.

    Attributes:
        read_bandwidth_bytes_per_s: bytes the unpackers read from L1 per second (block-float
            exponents ride on an extra port and are not counted).
        instruction_setup_s: address setup of each unpack instruction (one tile), before its
            bytes stream (s).
        pack_bandwidth_bytes_per_s: bytes the packers write back to L1 per second.
        subblock_tiles: most output tiles one subblock of a matmul holds in ``Dst``; the operand
            tile reused across a subblock's row or column is unpacked once per subblock.
    """

    read_bandwidth_bytes_per_s: float
    instruction_setup_s: float
    pack_bandwidth_bytes_per_s: float
    subblock_tiles: int

    def __post_init__(self) -> None:
        if min(self.read_bandwidth_bytes_per_s, self.pack_bandwidth_bytes_per_s, self.subblock_tiles) <= 0:
            raise InputError(f"unpacker: bandwidths and subblock_tiles must be positive, got {self}")
        if self.instruction_setup_s < 0:
            raise InputError(f"unpacker: instruction_setup_s must be >= 0, got {self.instruction_setup_s}")


@dataclass(frozen=True, slots=True, kw_only=True)
class DataMovement:
    """What one core's data-movement kernels pay to bring a GEMM's operand blocks in and write its
    result out (a Tenstorrent Tensix core's reader and writer RISC-Vs driving the NoC: tt-metal
    ``matmul_multicore_reuse_mcast_2d``). Used by :mod:`simulator.workload.gemm_pipeline`.

    Attributes:
        dram_read_latency_s: from issuing one DRAM read to its read barrier returning (s).
        dram_read_bandwidth_bytes_per_s: one core's streaming read rate from interleaved DRAM.
        dram_write_latency_s: from issuing one DRAM write to its write barrier returning (s).
        dram_write_bandwidth_bytes_per_s: one core's streaming write rate to interleaved DRAM.
        multicast_bandwidth_bytes_per_s: one core's rate multicasting a block over the NoC to a
            rectangle of cores (linked writes, as the matmul's block multicast issues them).
    """

    dram_read_latency_s: float
    dram_read_bandwidth_bytes_per_s: float
    dram_write_latency_s: float
    dram_write_bandwidth_bytes_per_s: float
    multicast_bandwidth_bytes_per_s: float

    def __post_init__(self) -> None:
        rates = (self.dram_read_bandwidth_bytes_per_s, self.dram_write_bandwidth_bytes_per_s,
                 self.multicast_bandwidth_bytes_per_s)
        if min(rates) <= 0 or min(self.dram_read_latency_s, self.dram_write_latency_s) < 0:
            raise InputError(f"data_movement: bandwidths must be positive and latencies >= 0, got {self}")


@dataclass(frozen=True, slots=True, kw_only=True)
class GemmTiling:
    """How a GPU cuts a GEMM's output over its streaming multiprocessors (tile and wave quantization).

    Attributes:
        streaming_multiprocessors: SMs of one GPU; a GEMM runs in waves of this many output tiles.
        gemm_tile_rows, gemm_tile_columns: the output tile one SM computes at a time (the GEMM
            library's largest tile).
    """

    streaming_multiprocessors: int
    gemm_tile_rows: int
    gemm_tile_columns: int

    def efficiency(self, rows: float, columns: float, tile: tuple[int, int] | None = None) -> float:
        """Fraction of a GEMM's ``waves x SMs`` tile slots doing useful work (0..1].

        A ``rows x columns`` output is cut into ``ceil(rows/Tr) ceil(columns/Tc)`` tiles (of
        ``tile``, by default the library's largest), run ``SMs`` at a time; the last, partial
        wave and the padding of edge tiles idle the rest (NVIDIA Deep Learning Performance Guide,
        "Matrix Multiplication Background": tile and wave quantization). 1 for an empty output.
        """
        if rows <= 0 or columns <= 0:
            return 1.0
        tile_rows, tile_columns = tile or (self.gemm_tile_rows, self.gemm_tile_columns)
        tiles = math.ceil(rows / tile_rows) * math.ceil(columns / tile_columns)
        waves = math.ceil(tiles / self.streaming_multiprocessors)
        slots = waves * self.streaming_multiprocessors * tile_rows * tile_columns
        return rows * columns / slots


@dataclass(frozen=True, slots=True, kw_only=True)
class Compute:
    """What one device computes: its peaks and how its matrix engine loses to tiling.

    Attributes:
        peak_flop_per_s: peak arithmetic rate of one device by precision
            (keys among ``fp32``, ``fp16``, ``bf16``, ``fp8``, ``int8``; int8 in op/s).
        math_fidelity_phases: matrix-engine passes per product of each math fidelity the device
            offers (Tenstorrent: ``LoFi`` 1, ``HiFi2`` 2, ``HiFi3`` 3, ``HiFi4`` 4; tt-metal
            ``tech_reports/matrix_engine``); empty where the device has no such setting. The
            peak is the one-pass rate.
        gemm_tiling: a GPU's output tiling over its SMs (:class:`GemmTiling`); None where the
            device's GEMMs are not modelled as tiles and waves.
        unpacker: how fast the device's SRAM feeds its matrix engine (:class:`Unpacker`), or None
            where no figure is stated (the engine is then taken as fed at its peak).
        data_movement: what the device's data-movement kernels pay per GEMM operand block
            (:class:`DataMovement`), or None where no figure is stated (blocks then arrive free).

    The achieved fractions of these peaks are measurements, kept with their sources in
    :class:`Calibration` (``gemm_efficiency``, ``fp8_gemm_efficiency``, ``fused_attention_efficiency``).
    """

    peak_flop_per_s: dict[str, float]
    math_fidelity_phases: dict[str, int] = field(default_factory=dict)
    gemm_tiling: GemmTiling | None = None
    unpacker: Unpacker | None = None
    data_movement: DataMovement | None = None

    def gemm_efficiency(self, rows: float, columns: float, tile: tuple[int, int] | None = None) -> float:
        """Fraction of peak a ``rows x columns`` GEMM output keeps after the device's tiling, in
        ``tile``s where given (:meth:`GemmTiling.efficiency`; 1 without a tiling)."""
        return 1.0 if self.gemm_tiling is None else self.gemm_tiling.efficiency(rows, columns, tile)


@dataclass(frozen=True, slots=True, kw_only=True)
class Sram:
    """On-chip SRAM of one device (a core's share of its die on a mesh; a GPU's L2).

    Attributes:
        capacity_bytes: SRAM capacity of one device.
        bandwidth_bytes_per_s: SRAM bandwidth of one device, used by memory-bound operators whose
            operands stay on chip.
    """

    capacity_bytes: float
    bandwidth_bytes_per_s: float


@dataclass(frozen=True, slots=True, kw_only=True)
class Dram:
    """Off-chip DRAM of one die, shared by the die's cores and reached over the mesh (PALM Table VI).

    The mesh (:class:`simulator.network.mesh.Mesh`) says where the die's DRAM ports sit on its
    grid; this record says what is behind them.

    Attributes:
        bandwidth_bytes_per_s: DRAM bandwidth of one die, split equally over its ports.
        latency_s: DRAM response time (PALM Eq. 4).
        capacity_bytes: DRAM capacity of one die.
        access: ``nearest`` (a core uses the port closest to it, ties to the first) or
            ``interleaved`` (a core's traffic spread evenly over its die's ports, the die's
            capacity one pool: :meth:`Memory.pool_bytes`).
        dataflow: how operators move operands between DRAM and SRAM: ``palm-algorithm-1``
            (PALM Algorithm 1, one-dimensional blocking: :mod:`simulator.workload.sram`) or
            ``tiled`` (two-dimensional blocking with multicast: :mod:`simulator.workload.tiled_stage`).
    """

    bandwidth_bytes_per_s: float
    latency_s: float
    capacity_bytes: float
    access: DramAccess = "nearest"
    dataflow: Dataflow


@dataclass(frozen=True, slots=True, kw_only=True)
class Hbm:
    """High-bandwidth memory of one device (a GPU's or a TPU chip's own), its traffic timed
    inside compute, not on the network.

    Attributes:
        bandwidth_bytes_per_s: one device's memory bandwidth.
        capacity_bytes: one device's memory capacity.
    """

    bandwidth_bytes_per_s: float
    capacity_bytes: float


@dataclass(frozen=True, slots=True, kw_only=True)
class Memory:
    """A device's memory levels: SRAM per device, and off chip either DRAM per die (shared by its
    cores, over the mesh) or HBM per device.

    Attributes:
        sram: on-chip SRAM of one device.
        dram: a die's DRAM (a mesh), or None.
        hbm: a device's HBM (a GPU, a TPU chip), or None.

    Raises:
        InputError: not exactly one of ``dram`` and ``hbm``.
    """

    sram: Sram
    dram: Dram | None = None
    hbm: Hbm | None = None

    def __post_init__(self) -> None:
        if (self.dram is None) == (self.hbm is None):
            raise InputError("memory: a device needs one off-chip level, DRAM (a mesh's dies) or HBM,"
                             f" got {'both' if self.dram else 'neither'}")

    def sram_dataflow(self) -> Dataflow | None:
        """How operands stream from off-chip DRAM into SRAM over the network (the DRAM's
        :data:`Dataflow`), or None where device memory is local (HBM) and its traffic is timed
        inside compute."""
        return None if self.dram is None else self.dram.dataflow

    def device_bytes(self, devices_per_dram: int) -> float:
        """Memory capacity one device has for weights, states and activations (bytes): its HBM,
        or its die's DRAM shared equally by the die's ``devices_per_dram`` cores."""
        if self.hbm is not None:
            return self.hbm.capacity_bytes
        assert self.dram is not None  # __post_init__: one of them
        return self.dram.capacity_bytes / devices_per_dram

    def pool_bytes(self, devices: int, devices_per_dram: int) -> float | None:
        """Memory that ``devices`` devices (the first of the machine's order) share as one pool
        (bytes), or None where each device has its own share (:meth:`device_bytes`).

        With ``interleaved`` DRAM access, the DRAM of the dies ``devices`` cores touch: tt-metal
        allocates an interleaved buffer's pages round-robin over every DRAM bank of the chip,
        whichever core uses it (tenstorrent/tt-metal ``tech_reports/tensor_layouts``, §4.1), so a
        die's cores share its capacity as one pool (counted as the fewest dies of
        ``devices_per_dram`` cores holding that many cores: exact on a one-die chip). None with
        ``nearest`` access (PALM: a core's share) and with HBM.
        """
        if self.dram is None or self.dram.access != "interleaved":
            return None
        return -(-devices // devices_per_dram) * self.dram.capacity_bytes

    @property
    def operand_bandwidth_bytes_per_s(self) -> float:
        """Bandwidth at which a device's operators read their operands (bytes/s): the SRAM's where
        DRAM traffic is planned and sent over the mesh (PALM Algorithm 1), else the HBM's."""
        return self.sram.bandwidth_bytes_per_s if self.hbm is None else self.hbm.bandwidth_bytes_per_s


class Network:
    """Base of the records that describe how a machine's devices are joined (one per kind): the
    fabric only (topology, links, latencies), never memory or compute.

    A kind is one module of :mod:`simulator.network` holding its record (a frozen dataclass
    subclassing this one, registered by :func:`network_kind`) and its
    :class:`~simulator.network.topology.Topology`. The registry :data:`NETWORK_KINDS` holds the
    names hardware files use.

    Attributes:
        kind: the name of the kind (``mesh``, ``cluster``, ``torus``...).
        device_noun: what its devices are called in messages (``cores``, ``GPUs``; ``devices``).
    """

    __slots__ = ()
    kind: ClassVar[str] = ""
    device_noun: ClassVar[str] = "devices"

    @property
    def num_devices(self) -> int:
        """Devices (cores, GPUs, chips) the network joins."""
        raise NotImplementedError

    @property
    def devices_per_node(self) -> int:
        """Devices of the unit a tensor-parallel group should stay within (a die, a node); on a
        mesh also the cores sharing one die's DRAM (:meth:`Hardware.device_memory_bytes`)."""
        raise NotImplementedError

    @property
    def wafers(self) -> int:
        """Wafers of equal devices the machine is made of (a mesh may have several; 1 otherwise)."""
        return 1


NETWORK_KINDS: dict[str, type[Network]] = {}
"""Kind name -> record class, filled as :mod:`simulator.network`'s kind modules are imported."""

N = TypeVar("N", bound=type[Network])


def network_kind(kind: str) -> Callable[[N], N]:
    """Class decorator: register a :class:`Network` record under ``kind`` (outermost decorator,
    so the final dataclass is registered)."""
    def register(cls: N) -> N:
        cls.kind = kind
        NETWORK_KINDS[kind] = cls
        return cls
    return register


@dataclass(frozen=True, slots=True, kw_only=True)
class Hardware:
    """One machine, carved by what each part is: compute, memory, network, calibration.

    Attributes:
        name: preset or file name.
        compute: one device's peaks and GEMM tiling (:class:`Compute`).
        memory: one device's memory levels (:class:`Memory`).
        network: the fabric joining the devices (a :class:`Network` record: a mesh, a cluster, a
            torus...).
        calibration: the achieved fractions of peak, measured on the whole machine.
        sources: the ``source`` string of each quantity, by its file's key path
            (``mesh.dram_bandwidth_GB_per_s``).
    """

    name: str
    compute: Compute
    memory: Memory
    network: Network
    calibration: Calibration
    sources: dict[str, str] = field(default_factory=dict, compare=False, repr=False)

    @property
    def num_devices(self) -> int:
        """Devices (cores or GPUs) in the machine."""
        return self.network.num_devices

    @property
    def kind(self) -> str:
        """The network's kind (``mesh``, ``cluster``, ``torus``...)."""
        return self.network.kind

    def device_memory_bytes(self) -> float:
        """Memory capacity available to one device for weights, states and activations (bytes):
        :meth:`Memory.device_bytes`, a die's DRAM shared by the network's cores of a die."""
        return self.memory.device_bytes(self.network.devices_per_node)

    def memory_pool_bytes(self, devices: int) -> float | None:
        """Memory ``devices`` devices share as one pool (bytes), or None: :meth:`Memory.pool_bytes`."""
        return self.memory.pool_bytes(devices, self.network.devices_per_node)
