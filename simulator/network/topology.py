"""Devices, links and DRAM ports as integer resources, and the routes between them.

A *resource* is anything that carries bytes at a bandwidth and can be contended: one direction of
a mesh link, a DRAM port, a GPU's switch port or NIC (each direction). Resources are numbered
``0..num_resources-1``; :attr:`Topology.bandwidth_bytes_per_s` and :attr:`Topology.names` are
indexed by that number.

:class:`Topology` is the one interface every kind of machine implements (its record and topology
live in one module each: :mod:`simulator.network.mesh`, :mod:`~simulator.network.cluster`,
:mod:`~simulator.network.torus`): routes and DRAM routes as resources, the node of a device, the
named device orders stages are cut from, the ring order of a group, the walk of a stage's devices
for its groups, how ring edges are carried (one channel per NIC on a cluster), and how the
machine is drawn (:class:`Drawing`). The defaults here suit a machine whose devices have no
geometry; kinds override what differs.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cache
from typing import Literal, TypeVar

from simulator.errors import InputError
from simulator.hardware.spec import Dram, Hardware, Network

Edge = tuple[int, int] | tuple[int, int, float]
"""A ring edge (source, destination), or (source, destination, share of the edge's bytes)."""


MarkShape = Literal["link", "port", "cell", "dot"]


@dataclass(frozen=True, slots=True)
class Mark:
    """Where resource ``resource`` shows on the machine's drawing: ``link`` a segment from device
    ``devices[0]`` toward ``devices[1]``; ``cell`` / ``dot`` the square / dot of device
    ``devices[0]`` (several resources of one device show their largest value); ``port`` a square at
    grid ``point`` (x, y)."""

    resource: int
    shape: MarkShape
    devices: tuple[int, ...] = ()
    point: tuple[float, float] = (0.0, 0.0)


@dataclass(frozen=True, slots=True)
class Drawing:
    """A machine laid out on a 2-D grid of ``width`` x ``height`` cells.

    Attributes:
        positions: grid cell (x, y) of each device drawn (devices ``0..len-1``).
        boxes: (x, y, width, height) in cells of each die, node or plane, drawn as a frame.
        box_name: what a box is (``die``, ``node``, ``z-plane``).
        marks: where each resource shows (:class:`Mark`).
        legend: one line saying what the marks are.
    """

    width: int
    height: int
    positions: tuple[tuple[int, int], ...]
    boxes: tuple[tuple[int, int, int, int], ...]
    box_name: str
    marks: tuple[Mark, ...]
    legend: str


class Topology:
    """Routes and resources of one machine; built once per hardware (see :func:`topology_of`).

    Attributes:
        num_devices: devices (cores or GPUs).
        bandwidth_bytes_per_s: bandwidth of each resource, one direction (bytes/s).
        names: a readable name of each resource.
        kinds: ``link``, ``dram`` or ``nic`` for each resource.
        efficiencies: achieved fraction of bandwidth of each resource, or None where a flow's
            own calibration applies (every resource but a cluster's NICs).
    """

    def __init__(self) -> None:
        self.bandwidth_bytes_per_s: list[float] = []
        self.names: list[str] = []
        self.kinds: list[str] = []
        self.efficiencies: list[float | None] = []
        self.num_devices = 0

    def _add(self, name: str, kind: str, bandwidth_bytes_per_s: float, efficiency: float | None = None) -> int:
        self.names.append(name)
        self.kinds.append(kind)
        self.bandwidth_bytes_per_s.append(bandwidth_bytes_per_s)
        self.efficiencies.append(efficiency)
        return len(self.names) - 1

    @property
    def num_resources(self) -> int:
        """Resources (links, ports) in the machine."""
        return len(self.names)

    def route(self, src: int, dst: int) -> tuple[tuple[int, ...], float]:
        """Resources crossed from device ``src`` to ``dst`` and the route's latency (s)."""
        raise NotImplementedError

    def dram_route(self, device: int) -> tuple[tuple[int, ...], float]:
        """Resources crossed by ``device``'s off-chip DRAM traffic (port last) and latency (s)."""
        raise NotImplementedError

    def dram_routes(self, device: int) -> list[tuple[tuple[int, ...], float, float]]:
        """``(resources, latency, share)`` of each part of ``device``'s DRAM traffic (shares sum
        to 1): the one :meth:`dram_route` unless the machine spreads it over several ports."""
        return [(*self.dram_route(device), 1.0)]

    def node_of(self, device: int) -> int:
        """The die (mesh), node (cluster) or chip holding ``device``."""
        return device

    def device_orders(self) -> dict[str, list[int]]:
        """Named orders of all devices that pipeline stages are cut from. Without geometry,
        PALM's ``line`` and ``s-shape`` are both the devices by id."""
        ids = list(range(self.num_devices))
        return {"line": ids, "s-shape": ids}

    def device_order(self, name: str) -> list[int]:
        """The device order ``name`` (see :meth:`device_orders`).

        Raises:
            InputError: this machine has no order of that name (the message lists its names).
        """
        orders = self.device_orders()
        if name not in orders:
            raise InputError(f"strategy: placement {name!r} is not offered by this machine (offers {sorted(orders)})")
        return orders[name]

    def stage_walk(self, devices: Sequence[int], group_order: str) -> list[int]:
        """A stage's devices in the order its TP groups are cut from (``tp-major``/``dp-major``)."""
        return list(devices)

    def ring_order(self, devices: tuple[int, ...]) -> tuple[int, ...]:
        """``devices`` ordered so that ring neighbours are close (as given by default)."""
        return devices

    def channel_edges(self, groups: tuple[tuple[int, ...], ...], edges: list[tuple[int, int]]) -> list[Edge]:
        """Ring edges as the fabric carries them (unchanged by default)."""
        return list(edges)

    def drawing(self, used_devices: int) -> Drawing:
        """The machine on a grid for pictures, covering at least devices ``0..used_devices-1``
        (a large machine may draw only those). Every kind draws itself."""
        raise NotImplementedError


def topology_of(hardware: Hardware) -> Topology:
    """The topology of ``hardware`` (built once per distinct network and DRAM description): its
    fabric, and the DRAM a mesh routes to (:class:`~simulator.hardware.spec.Dram`; None on HBM)."""
    return _topology(hardware.network, hardware.memory.dram)


@cache
def _topology(network: Network, dram: Dram | None) -> Topology:
    return TOPOLOGIES[type(network)](network, dram)  # type: ignore[call-arg]  # each kind takes its record


TOPOLOGIES: dict[type, type[Topology]] = {}
"""Network record class -> its topology class (filled by :func:`topology_for`)."""


T = TypeVar("T", bound=type[Topology])


def topology_for(network: type[Network]) -> Callable[[T], T]:
    """Class decorator: the decorated :class:`Topology` serves records of class ``network``."""
    def register(cls: T) -> T:
        TOPOLOGIES[network] = cls
        return cls
    return register
