"""Hardware described as data: devices, the network that joins them, memory, calibration.

All quantities are SI (bytes, s, bytes/s, flop/s). TOML presets carry decimal- or binary-prefixed
units in their key names and are converted once by :mod:`simulator.hardware.loader`.

Every kind of machine shares one :class:`Hardware` record; what joins its devices is a
:class:`Network` record of one kind, each kind a module of :mod:`simulator.network`:
``mesh`` (a tiled accelerator, PALM Fig. 1(c)), ``cluster`` (GPU nodes on NVSwitch and
InfiniBand, Narayanan et al. SC'21 §5), ``torus`` (chips on a 2D/3D torus, TPU v4).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import ClassVar, Literal, TypeVar

from simulator.errors import InputError

Dataflow = Literal["palm-algorithm-1", "tiled"]
"""How a mesh's operators move operands between DRAM and SRAM (:class:`simulator.network.mesh.Mesh`)."""

DATAFLOWS: tuple[str, ...] = ("palm-algorithm-1", "tiled")
"""The values of :data:`Dataflow`, for file checks."""

DramAccess = Literal["nearest", "interleaved"]
"""Which of a die's DRAM ports a core's traffic goes to (:class:`simulator.network.mesh.Mesh`)."""

DRAM_ACCESSES: tuple[str, ...] = ("nearest", "interleaved")
"""The values of :data:`DramAccess`, for file checks."""

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
        fp8_gemm_efficiency: achieved / peak flop/s of a large FP8 GEMM against the FP8 peak
            (0, 1]; None where the hardware runs no FP8 GEMM (precision ``fp8`` is then refused).
        sources: the ``source`` string of each of the above, by attribute name.
    """

    gemm_efficiency: float
    memory_bound_efficiency: float
    collective_efficiency: float
    p2p_efficiency: float
    kernel_overhead_s: float
    fused_attention_efficiency: float | None = None
    fp8_gemm_efficiency: float | None = None
    sources: dict[str, str] = field(default_factory=dict, compare=False, repr=False)


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


class Network:
    """Base of the records that describe how a machine's devices are joined (one per kind).

    A kind is one module of :mod:`simulator.network` holding its record (a frozen dataclass
    subclassing this one, registered by :func:`network_kind`) and its
    :class:`~simulator.network.topology.Topology`. The registry :data:`NETWORK_KINDS` holds the
    names hardware files use.

    Attributes:
        kind: the name of the kind (``mesh``, ``cluster``, ``torus``...).
    """

    __slots__ = ()
    kind: ClassVar[str] = ""

    def sram_dataflow(self) -> Dataflow | None:
        """How operands stream from off-chip DRAM into SRAM over the network (a mesh's
        :data:`Dataflow`), or None where device memory is local (HBM) and its traffic is timed
        inside compute."""
        return None

    @property
    def num_devices(self) -> int:
        """Devices (cores, GPUs, chips) the network joins."""
        raise NotImplementedError

    @property
    def devices_per_node(self) -> int:
        """Devices of the unit a tensor-parallel group should stay within (a die, a node)."""
        raise NotImplementedError

    def device_memory_bytes(self) -> float:
        """Memory capacity one device has for weights, states and activations (bytes)."""
        raise NotImplementedError

    def operand_bandwidth_bytes_per_s(self, sram_bandwidth_bytes_per_s: float) -> float:
        """Bandwidth at which a device's operators read their operands (bytes/s): the SRAM's
        where DRAM traffic is separate (:meth:`Network.sram_dataflow`), else the device memory's."""
        raise NotImplementedError

    def memory_pool_bytes(self, devices: int) -> float | None:
        """Memory that ``devices`` devices (the first of the machine's order) share as one pool
        (bytes), or None where each device has its own share (:meth:`device_memory_bytes`)."""
        return None

    def gemm_efficiency(self, rows: float, columns: float) -> float:
        """Fraction of peak a ``rows x columns`` GEMM output keeps after the device's tiling
        (1 unless the kind models tile and wave quantization)."""
        return 1.0


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
    """One machine: device compute and memory, network, calibration.

    Attributes:
        name: preset or file name.
        peak_flop_per_s: peak arithmetic rate of one device by precision
            (keys among ``fp32``, ``fp16``, ``bf16``, ``int8``; int8 in op/s).
        sram_bytes: on-chip SRAM of one device (a core's share of its die on a mesh).
        sram_bandwidth_bytes_per_s: SRAM bandwidth of one device, used by memory-bound operators
            whose operands stay on chip.
        network: the :class:`Network` record (a mesh, a cluster, a torus...).
        calibration: the achieved fractions of peak.
        math_fidelity_phases: matrix-engine passes per product of each math fidelity the device
            offers (Tenstorrent: ``LoFi`` 1, ``HiFi2`` 2, ``HiFi3`` 3, ``HiFi4`` 4; tt-metal
            ``tech_reports/matrix_engine``); empty where the device has no such setting. The
            peak is the one-pass rate.
        unpacker: how fast the device's SRAM feeds its matrix engine, or None where no figure
            is stated (the engine is then taken as fed at its peak).
        sources: the ``source`` string of each quantity, by key path.
    """

    name: str
    peak_flop_per_s: dict[str, float]
    sram_bytes: float
    sram_bandwidth_bytes_per_s: float
    network: Network
    calibration: Calibration
    math_fidelity_phases: dict[str, int] = field(default_factory=dict)
    unpacker: Unpacker | None = None
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
        """Memory capacity available to one device for weights, states and activations (bytes)."""
        return self.network.device_memory_bytes()

    @property
    def operand_bandwidth_bytes_per_s(self) -> float:
        """Bandwidth at which operators read their operands (bytes/s), see :class:`Network`."""
        return self.network.operand_bandwidth_bytes_per_s(self.sram_bandwidth_bytes_per_s)
