"""A torus of chips (TPU-v4-like): each chip linked to its two neighbours in every dimension.

Chip ``d`` sits at ``(x, y, z) = (d % X, (d // X) % Y, d // (X Y))`` of an ``X x Y x Z`` torus (a 2D
torus has ``Z = 1``); every dimension of size ``n > 1`` closes into a ring with wrap-around links
(Jouppi et al., "TPU v4: An Optically Reconfigurable Supercomputer for Machine Learning", ISCA'23,
§2: a 3D torus of chips, 6 inter-chip links per chip). Routing is dimension-ordered (x, then y,
then z), each dimension taking the shorter way around its ring (ties go the positive way), the
usual deadlock-free routing of tori (Dally and Towles, "Principles and Practices of
Interconnection Networks", 2004, §14). Memory is the chip's own HBM (the machine's memory
record): no network resource, its traffic timed inside compute. Devices are chip ids; stages are
cut from them in order, so a compact tensor-parallel group of ``X`` consecutive chips is one x
ring whose every edge is one hop.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

from simulator.errors import InputError
from simulator.hardware.spec import Dram, Network, network_kind
from simulator.network.topology import Drawing, Mark, Topology, topology_for


@network_kind("torus")
@dataclass(frozen=True, slots=True, kw_only=True)
class Torus(Network):
    """Chips on a 2D or 3D torus (TPU v4: ISCA'23; Google Cloud TPU v4 documentation).

    The fabric only: a chip's HBM is the machine's :class:`~simulator.hardware.spec.Hbm`.

    Attributes:
        chips_x, chips_y, chips_z: chips along each dimension (``chips_z = 1``: a 2D torus).
        link_bandwidth_bytes_per_s: one direction of one inter-chip link.
        hop_latency_s: latency of one link hop.

    Raises:
        InputError: a dimension below 1.
    """

    chips_x: int
    chips_y: int
    chips_z: int
    link_bandwidth_bytes_per_s: float
    hop_latency_s: float

    def __post_init__(self) -> None:
        for name in ("chips_x", "chips_y", "chips_z"):
            if getattr(self, name) < 1:
                raise InputError(f"torus: `{name}` must be >= 1, got {getattr(self, name)}")

    @property
    def dimensions(self) -> tuple[int, int, int]:
        """Chips along x, y and z."""
        return (self.chips_x, self.chips_y, self.chips_z)

    @property
    def num_devices(self) -> int:
        """Chips in the torus."""
        return self.chips_x * self.chips_y * self.chips_z

    @property
    def devices_per_node(self) -> int:
        """Chips of one x ring, the group a tensor-parallel ring stays within."""
        return self.chips_x


def ring_steps(source: int, target: int, size: int) -> list[int]:
    """Positions visited from ``source`` to ``target`` on a ring of ``size``, the shorter way
    (the positive way on a tie), ``target`` included, ``source`` not."""
    forward = (target - source) % size
    step = 1 if forward <= size - forward else -1
    hops = forward if step == 1 else size - forward
    return [(source + step * (i + 1)) % size for i in range(hops)]


@topology_for(Torus)
class TorusTopology(Topology):
    """Routes on a torus: one resource per link direction, dimension-ordered shortest routing."""

    def __init__(self, torus: Torus, dram: Dram | None) -> None:
        """``dram`` is unused: a chip's memory is its own HBM, timed inside compute."""
        super().__init__()
        self.torus = torus
        self.num_devices = torus.num_devices
        self._links: dict[tuple[int, int], int] = {}
        for device in range(self.num_devices):
            for neighbour in self._neighbours(device):
                name = f"link {device}->{neighbour}"
                self._links[(device, neighbour)] = self._add(name, "link", torus.link_bandwidth_bytes_per_s)
        self.route = cache(self._route)  # type: ignore[method-assign]

    def position(self, device: int) -> tuple[int, int, int]:
        """(x, y, z) of ``device``."""
        x_size, y_size, _ = self.torus.dimensions
        return device % x_size, (device // x_size) % y_size, device // (x_size * y_size)

    def device_at(self, position: tuple[int, int, int]) -> int:
        """The chip at (x, y, z)."""
        x_size, y_size, _ = self.torus.dimensions
        x, y, z = position
        return x + x_size * (y + y_size * z)

    def drawing(self, used_devices: int) -> Drawing:
        """The z-planes side by side (one column of cells between them); a link to an adjacent
        cell of the same plane is a segment, a wrap-around or z link shows as its chip's dot."""
        x_size, y_size, z_size = self.torus.dimensions

        def cell(device: int) -> tuple[int, int]:
            x, y, z = self.position(device)
            return x + z * (x_size + 1), y

        marks = []
        for (a, b), resource in self._links.items():
            (xa, ya), (xb, yb) = cell(a), cell(b)
            adjacent = abs(xa - xb) + abs(ya - yb) == 1
            marks.append(Mark(resource, "link", (a, b)) if adjacent else Mark(resource, "dot", (a,)))
        return Drawing(width=z_size * (x_size + 1) - 1, height=y_size,
                       positions=tuple(cell(d) for d in range(self.num_devices)),
                       boxes=tuple((z * (x_size + 1), 0, x_size, y_size) for z in range(z_size)),
                       box_name="z-plane", marks=tuple(marks),
                       legend="links in a plane (segments), wrap-around and z links (dot: the busiest)")

    def node_of(self, device: int) -> int:
        """The x ring holding ``device``."""
        return device // self.torus.chips_x

    def _neighbours(self, device: int) -> list[int]:
        position, found = self.position(device), []
        for axis, size in enumerate(self.torus.dimensions):
            for step in (1, -1):
                moved = list(position)
                moved[axis] = (moved[axis] + step) % size
                neighbour = self.device_at((moved[0], moved[1], moved[2]))
                if neighbour != device and neighbour not in found:
                    found.append(neighbour)
        return found

    def _path(self, src: int, dst: int) -> list[int]:
        """Chips visited from ``src`` to ``dst`` (both included), x then y then z."""
        current, path = list(self.position(src)), [src]
        target = self.position(dst)
        for axis, size in enumerate(self.torus.dimensions):
            for coordinate in ring_steps(current[axis], target[axis], size):
                current[axis] = coordinate
                path.append(self.device_at((current[0], current[1], current[2])))
        return path

    def _route(self, src: int, dst: int) -> tuple[tuple[int, ...], float]:
        path = self._path(src, dst)
        links = tuple(self._links[(a, b)] for a, b in zip(path, path[1:], strict=False))
        return links, len(links) * self.torus.hop_latency_s

    def dram_route(self, device: int) -> tuple[tuple[int, ...], float]:
        """HBM is the chip's own, timed inside compute: no network resource."""
        return (), 0.0
