"""Devices, links and DRAM ports as integer resources, and the routes between them.

A *resource* is anything that carries bytes at a bandwidth and can be contended: one direction of
a mesh link, a DRAM port, a GPU's switch port or NIC (each direction). Resources are numbered
``0..num_resources-1``; :attr:`Topology.bandwidth_bytes_per_s` and :attr:`Topology.names` are
indexed by that number.

Mesh routing is dimension-ordered XY (PALM §IV-C; the authors' code routes X first). A GPU
cluster routes through the sending GPU's up-port and the receiving GPU's down-port: NVSwitch
within a node, the rail NIC between nodes (a non-blocking fat tree is assumed between NICs,
as Selene's, Narayanan et al. SC'21 §5.1).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

from simulator.hardware.spec import Cluster, Hardware, Mesh


@dataclass(frozen=True, slots=True)
class Coord:
    """A core's position on the whole mesh (``x`` grows east, ``y`` grows south)."""

    x: int
    y: int


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

    def die_of(self, device: int) -> int:
        """The die (mesh) or node (cluster) holding ``device``."""
        raise NotImplementedError


class MeshTopology(Topology):
    """A 2D mesh of dies of cores with XY routing and DRAM ports on die edges (PALM Fig. 1(c)).

    Device ``d`` sits at ``Coord(d % width, d // width)``. Each die has ``dram_ports_per_die``
    ports: one on its west edge (middle row) and, with two, one on its east edge; a core uses the
    port on its half of the die, as the authors' released code does (``nearest_dram_of``).
    """

    def __init__(self, mesh: Mesh) -> None:
        super().__init__()
        self.mesh = mesh
        self.num_devices = mesh.num_devices
        self._links: dict[tuple[int, int], int] = {}
        for device in range(self.num_devices):
            for neighbour in self._neighbours(device):
                bandwidth = self._link_bandwidth(device, neighbour)
                self._links[(device, neighbour)] = self._add(f"link {device}->{neighbour}", "link", bandwidth)
        port_bandwidth = mesh.dram_bandwidth_bytes_per_s / mesh.dram_ports_per_die
        self._ports = [
            self._add(f"dram die{die} port{p}", "dram", port_bandwidth)
            for die in range(mesh.dies_x * mesh.dies_y)
            for p in range(mesh.dram_ports_per_die)
        ]
        self.route = cache(self._route)  # type: ignore[method-assign]
        self.dram_route = cache(self._dram_route)  # type: ignore[method-assign]

    def coord(self, device: int) -> Coord:
        """Position of ``device`` on the whole mesh."""
        return Coord(device % self.mesh.width, device // self.mesh.width)

    def device_at(self, x: int, y: int) -> int:
        """Device id at mesh position (x, y)."""
        return y * self.mesh.width + x

    def die_of(self, device: int) -> int:
        c = self.coord(device)
        return (c.y // self.mesh.cores_y) * self.mesh.dies_x + c.x // self.mesh.cores_x

    def _neighbours(self, device: int) -> list[int]:
        c = self.coord(device)
        steps = ((1, 0), (-1, 0), (0, 1), (0, -1))
        return [
            self.device_at(c.x + dx, c.y + dy)
            for dx, dy in steps
            if 0 <= c.x + dx < self.mesh.width and 0 <= c.y + dy < self.mesh.height
        ]

    def _link_bandwidth(self, a: int, b: int) -> float:
        same_die = self.die_of(a) == self.die_of(b)
        if same_die:
            return self.mesh.intra_die_link_bandwidth_bytes_per_s
        return self.mesh.inter_die_link_bandwidth_bytes_per_s

    def _xy_path(self, src: int, dst: int) -> list[int]:
        """Devices visited from ``src`` to ``dst``, X first then Y (both ends included)."""
        a, b = self.coord(src), self.coord(dst)
        step_x = 1 if b.x >= a.x else -1
        step_y = 1 if b.y >= a.y else -1
        path = [self.device_at(x, a.y) for x in range(a.x, b.x + step_x, step_x)]
        path += [self.device_at(b.x, y) for y in range(a.y + step_y, b.y + step_y, step_y)]
        return path

    def _route(self, src: int, dst: int) -> tuple[tuple[int, ...], float]:
        path = self._xy_path(src, dst)
        links = tuple(self._links[(u, v)] for u, v in zip(path, path[1:], strict=False))
        return links, len(links) * self.mesh.hop_latency_s

    def _port_core(self, device: int) -> tuple[int, int]:
        """(port resource, core the port hangs on) serving ``device``."""
        mesh, c = self.mesh, self.coord(device)
        die = self.die_of(device)
        die_x0 = (c.x // mesh.cores_x) * mesh.cores_x
        die_y0 = (c.y // mesh.cores_y) * mesh.cores_y
        east = mesh.dram_ports_per_die == 2 and (c.x - die_x0) >= mesh.cores_x / 2
        edge_x = die_x0 + mesh.cores_x - 1 if east else die_x0
        port = self._ports[die * mesh.dram_ports_per_die + int(east)]
        return port, self.device_at(edge_x, die_y0 + mesh.cores_y // 2)

    def _dram_route(self, device: int) -> tuple[tuple[int, ...], float]:
        port, edge_core = self._port_core(device)
        links, latency = self._route(device, edge_core)
        return links + (port,), latency + self.mesh.dram_latency_s


class ClusterTopology(Topology):
    """GPUs behind per-GPU switch ports (NVSwitch) and per-GPU NICs (rail InfiniBand)."""

    def __init__(self, cluster: Cluster) -> None:
        super().__init__()
        self.cluster = cluster
        self.num_devices = cluster.num_devices
        intra, inter = cluster.intra_node_bandwidth_bytes_per_s, cluster.inter_node_bandwidth_bytes_per_s
        nic = cluster.inter_node_efficiency
        self._ports = [
            tuple(self._add(f"gpu{g} {name}", kind, bw, eff) for name, kind, bw, eff in (
                ("nvswitch up", "link", intra, None), ("nvswitch down", "link", intra, None),
                ("nic up", "nic", inter, nic), ("nic down", "nic", inter, nic),
            ))
            for g in range(self.num_devices)
        ]
        self.route = cache(self._route)  # type: ignore[method-assign]

    def die_of(self, device: int) -> int:
        return device // self.cluster.gpus_per_node

    def _route(self, src: int, dst: int) -> tuple[tuple[int, ...], float]:
        if self.die_of(src) == self.die_of(dst):
            return (self._ports[src][0], self._ports[dst][1]), self.cluster.intra_node_latency_s
        return (self._ports[src][2], self._ports[dst][3]), self.cluster.inter_node_latency_s

    def dram_route(self, device: int) -> tuple[tuple[int, ...], float]:
        """GPU memory is local HBM, timed inside compute: no network resource."""
        return (), 0.0


def topology_of(hardware: Hardware) -> Topology:
    """The topology of ``hardware`` (built once per distinct network description)."""
    return _topology(hardware.network)


@cache
def _topology(network: Mesh | Cluster) -> Topology:
    if isinstance(network, Mesh):
        return MeshTopology(network)
    return ClusterTopology(network)
