"""A tiled accelerator: a 2D mesh of dies of cores, XY routing, DRAM ports on the grid.

Mesh routing is dimension-ordered XY (PALM §IV-C; the authors' code routes X first). Each die has
one or two DRAM ports on its west and east edges (PALM Fig. 1(c), Table VI), or ports beside the
cores a hardware file names (a real chip's DRAM banks: Wormhole's sit in two columns of its NoC
grid). The DRAM behind the ports (bandwidth, latency, capacity, access) is the machine's memory
record (:class:`~simulator.hardware.spec.Dram`); this module routes to it. A core's traffic goes
to its nearest port (PALM, the authors' ``nearest_dram_of``) or is spread evenly over all its
die's ports, as tt-metal's interleaved buffers place pages round-robin over the DRAM banks
(tenstorrent/tt-metal ``tech_reports/tensor_layouts/tensor_layouts.md`` @0570a01b, §4.1).

Named device orders (pipeline stages are cut from them, PALM §V-B, Fig. 8): ``line`` walks dies row
by row, always west to east (row-major), and the cores inside each die the same way; ``s-shape``
walks dies and cores as a boustrophedon, so consecutive stages stay neighbours;
``s-shape-transposed`` walks dies and cores column by column; ``s-shape-east`` / ``-south`` /
``-rotated`` mirror the s-shape east-west, north-south or both; ``row-snake`` / ``column-snake`` are
boustrophedons over all cores ignoring dies; ``hilbert`` is the generalized Hilbert curve of any
rectangle (Červený, "gilbert", 2018, github.com/jakubcerveny/gilbert), which keeps each stage
compact and stages adjacent.

A machine of several wafers (``wafers_x x wafers_y``, issue 37) is one grid of cores whose wafer
boundaries are crossed only where an inter-wafer link joins two facing edge cores
(:meth:`Mesh.wafer_link_offsets`): a route runs XY on each wafer to the link toward the next
wafer, crosses it, and goes on (:meth:`MeshTopology._waypoints`). The named orders cover all
wafers as one grid; :func:`wafer_orders` walks each order wafer by wafer, so that stages cut from
it stay on one wafer (``Strategy.wafer_stages``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from functools import cache
from typing import TYPE_CHECKING, ClassVar

from simulator.errors import InputError
from simulator.hardware.spec import DIE_COLLECTIVES, DieCollectives, Dram, Network, network_kind
from simulator.network.topology import Drawing, Edge, Groups, Mark, Topology, topology_for

if TYPE_CHECKING:
    import numpy as np

    from simulator.network.mesh_loads import Runs


@dataclass(frozen=True, slots=True)
class Coord:
    """A core's position on the whole mesh (``x`` grows east, ``y`` grows south)."""

    x: int
    y: int


@network_kind("mesh")
@dataclass(frozen=True, slots=True, kw_only=True)
class Mesh(Network):
    """A 2D mesh of dies of cores (PALM Table VI; Fig. 1(c)).

    Attributes:
        dies_x, dies_y: dies along x and y.
        cores_x, cores_y: cores per die along x and y.
        intra_die_link_bandwidth_bytes_per_s: one direction of a link between two cores of a die.
        inter_die_link_bandwidth_bytes_per_s: one direction of a link crossing a die boundary.
        hop_latency_s: latency of one link hop.
        inter_die_hop_latency_s: latency of a hop crossing a die boundary, where it differs (chips
            joined by Ethernet: hundreds of ns, where a NoC hop takes a few); None: ``hop_latency_s``.
        dram_ports_per_die: DRAM ports (controllers or banks) per die: where the fabric reaches
            the die's DRAM, which shares its bandwidth equally among them (the DRAM itself,
            bandwidth, latency, capacity and access, is the machine's
            :class:`~simulator.hardware.spec.Dram`).
        dram_port_cores: die-local ``(x, y)`` of the core each port hangs on, one per port; empty:
            PALM's one or two ports on the die's west and east edges, middle row.
        die_collectives: how a collective over cores of several dies runs: ``flat`` (one ring over
            all of them, PALM's) or ``hierarchical`` (within each die, then across the dies
            between the cores of the same rank, then within each die again: chips whose
            collective library moves each chip's shard between chips over Ethernet, tt-metal's
            CCL ops; :class:`~simulator.network.collectives.Flow`).
        wafers_x, wafers_y: wafers along x and y, each of ``dies_x x dies_y`` dies (1 x 1: one
            wafer, the mesh as PALM describes it). The wafers form one grid of cores; a link
            joins two facing edge cores of neighbouring wafers only where :meth:`wafer_link_offsets`
            places one.
        inter_wafer_link_bandwidth_bytes_per_s: one direction of one link between two wafers;
            required with more than one wafer.
        inter_wafer_hop_latency_s: latency of a hop between two wafers (in place of the mesh
            hop's); required with more than one wafer.
        inter_wafer_links_per_die: links from each edge die to the facing die of the neighbouring
            wafer, at evenly spaced cores of the die's edge (:meth:`wafer_link_offsets`); None:
            one per edge core, as between two dies of a wafer.

    Raises:
        InputError: without ``dram_port_cores``, ``dram_ports_per_die`` is not 1 or 2; with them,
            not one per port, or a core outside the die; a count of wafers below 1; several
            wafers without an inter-wafer bandwidth and latency; or more links per die than the
            cores of a die's edge.
    """

    device_noun: ClassVar[str] = "cores"
    dies_x: int
    dies_y: int
    cores_x: int
    cores_y: int
    intra_die_link_bandwidth_bytes_per_s: float
    inter_die_link_bandwidth_bytes_per_s: float
    hop_latency_s: float
    inter_die_hop_latency_s: float | None = None
    dram_ports_per_die: int
    dram_port_cores: tuple[tuple[int, int], ...] = ()
    wafers_x: int = 1
    wafers_y: int = 1
    inter_wafer_link_bandwidth_bytes_per_s: float | None = None
    inter_wafer_hop_latency_s: float | None = None
    inter_wafer_links_per_die: int | None = None
    die_collectives: DieCollectives = "flat"

    def __post_init__(self) -> None:
        if self.die_collectives not in DIE_COLLECTIVES:
            raise InputError(f"mesh: `die_collectives` must be one of {list(DIE_COLLECTIVES)}, got"
                             f" {self.die_collectives!r}")
        self._check_ports()
        self._check_wafers()

    def _check_wafers(self) -> None:
        if self.wafers_x < 1 or self.wafers_y < 1:
            raise InputError(f"mesh: `wafers_x` and `wafers_y` must be >= 1, got {self.wafers_x} x {self.wafers_y}")
        if self.wafers > 1 and (self.inter_wafer_link_bandwidth_bytes_per_s is None
                                or self.inter_wafer_hop_latency_s is None):
            raise InputError(f"mesh: {self.wafers_x} x {self.wafers_y} wafers need"
                             " `inter_wafer_link_bandwidth_GB_per_s` and `inter_wafer_hop_latency_ns`")
        edges = [n for n, joined in ((self.cores_y, self.wafers_x > 1), (self.cores_x, self.wafers_y > 1)) if joined]
        edge = min(edges, default=max(self.cores_x, self.cores_y))
        links = self.inter_wafer_links_per_die
        if links is not None and not 1 <= links <= edge:
            raise InputError(f"mesh: `inter_wafer_links_per_die` must be in 1..{edge} (the cores of a die's"
                             f" edge), got {links}")

    def _check_ports(self) -> None:
        cores = self.dram_port_cores
        if not cores and self.dram_ports_per_die not in (1, 2):
            raise InputError(f"mesh: `dram_ports_per_die` must be 1 or 2 without `dram_port_cores`,"
                             f" got {self.dram_ports_per_die}")
        if cores and len(cores) != self.dram_ports_per_die:
            raise InputError(f"mesh: `dram_port_cores` must name {self.dram_ports_per_die} cores"
                             f" (`dram_ports_per_die`), got {len(cores)}")
        outside = [c for c in cores if not (0 <= c[0] < self.cores_x and 0 <= c[1] < self.cores_y)]
        if outside:
            raise InputError(f"mesh: `dram_port_cores` has {list(outside[0])} outside the"
                             f" {self.cores_x} x {self.cores_y} cores of a die")

    @property
    def port_cores(self) -> tuple[tuple[int, int], ...]:
        """Die-local ``(x, y)`` of the core each DRAM port hangs on (PALM's edge ports by default)."""
        if self.dram_port_cores:
            return self.dram_port_cores
        middle = self.cores_y // 2
        return ((0, middle), (self.cores_x - 1, middle))[:self.dram_ports_per_die]

    @property
    def wafers(self) -> int:
        """Wafers of the machine."""
        return self.wafers_x * self.wafers_y

    @property
    def wafer_width(self) -> int:
        """Cores along x of one wafer."""
        return self.dies_x * self.cores_x

    @property
    def wafer_height(self) -> int:
        """Cores along y of one wafer."""
        return self.dies_y * self.cores_y

    @property
    def width(self) -> int:
        """Cores along x over the whole mesh (every wafer)."""
        return self.wafers_x * self.wafer_width

    @property
    def height(self) -> int:
        """Cores along y over the whole mesh (every wafer)."""
        return self.wafers_y * self.wafer_height

    def wafer_link_offsets(self, edge_cores: int) -> tuple[int, ...]:
        """Positions along a die's edge of ``edge_cores`` cores of its links to the neighbouring
        wafer: ``k = inter_wafer_links_per_die`` evenly spaced, the ``i``-th at
        ``floor((2 i + 1) edge_cores / (2 k))`` (one link: the middle core); every core without ``k``."""
        k = self.inter_wafer_links_per_die or edge_cores
        return tuple((2 * i + 1) * edge_cores // (2 * k) for i in range(k))

    @property
    def grid_dies_x(self) -> int:
        """Dies along x over the whole mesh (every wafer)."""
        return self.wafers_x * self.dies_x

    @property
    def grid_dies_y(self) -> int:
        """Dies along y over the whole mesh (every wafer)."""
        return self.wafers_y * self.dies_y

    @property
    def num_devices(self) -> int:
        """Cores on the mesh."""
        return self.width * self.height

    @property
    def devices_per_node(self) -> int:
        """Cores of one die."""
        return self.cores_x * self.cores_y


@topology_for(Mesh)
class MeshTopology(Topology):
    """A 2D mesh of dies of cores with XY routing and DRAM ports on the grid (PALM Fig. 1(c)).

    Device ``d`` sits at ``Coord(d % width, d // width)``. Each die has ``dram_ports_per_die``
    ports beside the cores :attr:`Mesh.port_cores` names; a DRAM stream runs through the port,
    then over the mesh from the port's core to the device by XY routing, the way read data travels
    (:meth:`dram_routes`): a NoC read's response is routed from the DRAM endpoint to the
    requesting core (tenstorrent/tt-isa-documentation ``NoC/README.md``: a read request's data
    returns from the remote endpoint), and reads dominate DRAM traffic (a decode step reads its
    weights and KV cache; a GEMM reads two operands and writes one). Writes take the same links. Each port carries an
    equal share of the die's DRAM bandwidth and adds the DRAM's latency
    (:class:`~simulator.hardware.spec.Dram`, the machine's memory record).

    Raises:
        InputError: the machine has no DRAM (a mesh's cores reach memory through its ports).
    """

    def __init__(self, mesh: Mesh, dram: Dram | None) -> None:
        super().__init__()
        if dram is None:
            raise InputError("mesh: a mesh's cores reach their DRAM through its ports; this machine has no DRAM")
        self.mesh, self.dram = mesh, dram
        self.num_devices, self._width = mesh.num_devices, mesh.width  # the width: read on every coordinate
        self._table: np.ndarray | None = None
        self._add_links()
        port_bandwidth = dram.bandwidth_bytes_per_s / mesh.dram_ports_per_die
        self._ports = [
            self._add(f"dram die{die} port{p}", "dram", port_bandwidth)
            for die in range(mesh.grid_dies_x * mesh.grid_dies_y)
            for p in range(mesh.dram_ports_per_die)
        ]
        self._gateways = cache(self._edge_gateways)
        self._routed: set[tuple[int, int]] = set()
        self._batched: dict[tuple[int, int], tuple[np.ndarray, int, int, float]] = {}
        self.route = cache(self._route_kept)  # type: ignore[method-assign]
        self.dram_route = cache(self._dram_route)  # type: ignore[method-assign]
        self._dram_routed: set[int] = set()
        self.dram_routes = cache(self._dram_routes_kept)  # type: ignore[method-assign]
        self.ring_order = cache(self._ring_order)  # type: ignore[method-assign]

    def coord(self, device: int) -> Coord:
        """Position of ``device`` on the whole mesh."""
        return Coord(device % self._width, device // self._width)

    def device_at(self, x: int, y: int) -> int:
        """Device id at mesh position (x, y)."""
        return y * self._width + x

    def device_orders(self) -> Mapping[str, Sequence[int]]:
        """Every named order of the mesh's cores (:func:`mesh_orders`), over all its wafers as one grid."""
        return mesh_orders(self)

    def wafer_device_orders(self) -> Mapping[str, Sequence[int]]:
        """Every named order walked wafer by wafer (:func:`wafer_orders`)."""
        return wafer_orders(self)

    @property
    def devices_per_wafer(self) -> int:
        """Cores of one wafer."""
        return self.num_devices // self.mesh.wafers

    def stage_walk(self, devices: Sequence[int], group_order: str) -> list[int]:
        """The stage's cores walked x first (``tp-major``) or y first (``dp-major``)."""
        if group_order == "tp-major":
            return sorted(devices)  # ids run along x, then along y
        width = self._width
        return sorted(devices, key=lambda d: (d % width, d // width))

    def _ring_order(self, devices: tuple[int, ...]) -> tuple[int, ...]:
        """``devices`` ordered so that ring neighbours are close on the mesh (:meth:`ring_order`,
        remembered per group: a search's placements share most groups, 8,887 distinct of 207,540
        in the default screen).

        A rectangle with an even side gets a Hamiltonian cycle (every ring edge one hop); anything
        else is walked as a boustrophedon of its bounding box (the closing edge may be longer).
        """
        if len(devices) < 3:
            return tuple(devices)
        width, distinct = self._width, sorted(set(devices))  # ids run along x, then along y
        by_row: dict[int, list[int]] = {}
        for d in distinct:
            by_row.setdefault(d // width, []).append(d)
        rows, xs, ys = list(by_row.values()), {d % width for d in distinct}, by_row
        full = len(distinct) == len(xs) * len(ys)
        if full and len(ys) % 2 == 0 and len(xs) >= 2:
            return _cycle(rows)
        if full and len(xs) % 2 == 0 and len(ys) >= 2:
            columns = [[r[i] for r in rows] for i in range(len(xs))]
            return _cycle(columns)
        return tuple(d for i, row in enumerate(rows) for d in (row[::-1] if i % 2 else row))

    def drawing(self, used_devices: int) -> Drawing:
        """The whole mesh: cores at their coordinates, dies framed, a segment per link direction
        and a square per DRAM port west of its core (PALM's second port east of the die)."""
        mesh = self.mesh
        links = [Mark(r, "link", pair) for pair, r in self._links.items()]
        ports = []
        for index, resource in enumerate(self._ports):
            die, port = divmod(index, mesh.dram_ports_per_die)
            x, y = mesh.port_cores[port]
            x0, y0 = (die % mesh.grid_dies_x) * mesh.cores_x, (die // mesh.grid_dies_x) * mesh.cores_y
            side = 0.5 if port == 1 and not mesh.dram_port_cores else -0.5  # PALM's east-edge port
            ports.append(Mark(resource, "port", point=(x0 + x + side, y0 + y)))
        return Drawing(
            width=mesh.width, height=mesh.height,
            positions=tuple((self.coord(d).x, self.coord(d).y) for d in range(self.num_devices)),
            boxes=tuple((dx * mesh.cores_x, dy * mesh.cores_y, mesh.cores_x, mesh.cores_y)
                        for dy in range(mesh.grid_dies_y) for dx in range(mesh.grid_dies_x)),
            box_name="die", marks=(*links, *ports),
            legend="links (one segment per direction) and DRAM ports (squares beside their cores)")

    def node_of(self, device: int) -> int:
        return self._die_ids[device]

    def wafer_of(self, device: int) -> int:
        """The wafer holding ``device`` (wafers numbered row by row)."""
        return self._wafer_ids[device]

    def _wafer_cell(self, c: Coord) -> tuple[int, int]:
        return c.x // self.mesh.wafer_width, c.y // self.mesh.wafer_height

    def _add_links(self) -> None:
        """A link each way between grid neighbours, device by device east, west, south then north
        (ids in that order), across a wafer boundary only where a link joins the two edge cores
        (:meth:`Mesh.wafer_link_offsets`); each at the bandwidth between two wafers, within a die
        or across dies. Sets the wafer and die of every device and the link east, west, south and
        north of each (-1 where none)."""
        import numpy as np

        mesh, n = self.mesh, self.num_devices
        y, x = np.divmod(np.arange(n), mesh.width)
        wafer_x, wafer_y = x // mesh.wafer_width, y // mesh.wafer_height
        wafer = wafer_y * mesh.wafers_x + wafer_x
        die = (y // mesh.cores_y) * mesh.grid_dies_x + x // mesh.cores_x
        self._wafer_ids: list[int] = wafer.tolist()
        self._die_ids: list[int] = die.tolist()
        self._wafer_array, self._die_array = wafer, die
        joined = np.zeros((n, 4), dtype=bool)
        for k, (dx, dy) in enumerate(((1, 0), (-1, 0), (0, 1), (0, -1))):
            nx, ny = x + dx, y + dy
            joined[:, k] = (0 <= nx) & (nx < mesh.width) & (0 <= ny) & (ny < mesh.height)
            if mesh.wafers > 1:
                edge = (np.isin(y % mesh.cores_y, mesh.wafer_link_offsets(mesh.cores_y)) if dx
                        else np.isin(x % mesh.cores_x, mesh.wafer_link_offsets(mesh.cores_x)))
                joined[:, k] &= ((nx // mesh.wafer_width == wafer_x) & (ny // mesh.wafer_height == wafer_y)) | edge
        device, direction = np.nonzero(joined)
        neighbour = device + np.asarray([1, -1, mesh.width, -mesh.width])[direction]
        bandwidth = np.where(die[device] == die[neighbour], mesh.intra_die_link_bandwidth_bytes_per_s,
                             mesh.inter_die_link_bandwidth_bytes_per_s)
        between_wafers = mesh.inter_wafer_link_bandwidth_bytes_per_s
        if between_wafers is not None:
            bandwidth = np.where(wafer[device] != wafer[neighbour], between_wafers, bandwidth)
        pairs = list(zip(device.tolist(), neighbour.tolist(), strict=True))
        ids = self._add_many([f"link {a}->{b}" for a, b in pairs], "link", bandwidth.tolist())
        self._links = dict(zip(pairs, ids, strict=True))
        table = np.full((4, n), -1, dtype=np.int64)
        table[direction, device] = ids
        self._east, self._west, self._south, self._north = table.tolist()

    def _xy_links(self, src: int, dst: int) -> list[int]:
        """Links crossed from ``src`` to ``dst`` on one wafer, X first then Y, in order: the run
        of each direction's link list along the row, then down or up the column (ids run along x
        in steps of 1, along y in steps of the width)."""
        width = self._width
        (ay, ax), (by, bx) = divmod(src, width), divmod(dst, width)
        corner = src + bx - ax  # (bx, ay)
        row = self._east[src:corner] if bx >= ax else self._west[corner + 1:src + 1][::-1]
        column = self._south[corner:dst:width] if by >= ay else self._north[dst + width:corner + 1:width][::-1]
        return row + column

    def _die_crossings(self, src: int, dst: int) -> int:
        """Die boundaries an XY leg from ``src`` to ``dst`` crosses (dies tile the grid)."""
        mesh, width = self.mesh, self._width
        (ay, ax), (by, bx) = divmod(src, width), divmod(dst, width)
        return abs(ax // mesh.cores_x - bx // mesh.cores_x) + abs(ay // mesh.cores_y - by // mesh.cores_y)

    def _edge_gateways(self, wafer: tuple[int, int], step: tuple[int, int]) -> list[tuple[Coord, Coord]]:
        """(edge core of ``wafer``, facing core of its neighbour ``wafer + step``) of every link
        between them, along the edge (kept per edge as ``_gateways``)."""
        mesh = self.mesh
        (wx, wy), (dx, dy) = wafer, step
        if dx:
            x = (wx + 1) * mesh.wafer_width - 1 if dx > 0 else wx * mesh.wafer_width
            ys = [wy * mesh.wafer_height + die * mesh.cores_y + o
                  for die in range(mesh.dies_y) for o in mesh.wafer_link_offsets(mesh.cores_y)]
            return [(Coord(x, y), Coord(x + dx, y)) for y in ys]
        y = (wy + 1) * mesh.wafer_height - 1 if dy > 0 else wy * mesh.wafer_height
        xs = [wx * mesh.wafer_width + die * mesh.cores_x + o
              for die in range(mesh.dies_x) for o in mesh.wafer_link_offsets(mesh.cores_x)]
        return [(Coord(x, y), Coord(x, y + dy)) for x in xs]

    def _waypoints(self, src: int, dst: int) -> list[int]:
        """``src``, the two ends of every link between wafers crossed, then ``dst``, for devices
        on different wafers: wafer to wafer X first then Y; on each wafer XY to the link toward
        the next one, the link whose two XY legs (to it, and from its far end to ``dst``) are
        shortest, ties to the link on the current row, then to the one in ``dst``'s column, then
        the first along the edge (so that with a link on every edge core a row or column of
        wafers routes XY as one grid). The XY legs join points ``2k`` and ``2k + 1``."""
        here, target = self.coord(src), self.coord(dst)
        wafer, goal = self._wafer_cell(here), self._wafer_cell(target)
        x, y, tx, ty, points = here.x, here.y, target.x, target.y, [src]
        while wafer != goal:
            step = (_sgn(goal[0] - wafer[0]), 0) if wafer[0] != goal[0] else (0, _sgn(goal[1] - wafer[1]))
            near, far = min(self._gateways(wafer, step),
                            key=lambda g: (abs(x - g[0].x) + abs(y - g[0].y) + abs(g[1].x - tx) + abs(g[1].y - ty),
                                           abs(g[0].y - y), abs(g[1].x - tx)))
            points += [self.device_at(near.x, near.y), self.device_at(far.x, far.y)]
            x, y, wafer = far.x, far.y, (wafer[0] + step[0], wafer[1] + step[1])
        return [*points, dst]

    def _route(self, src: int, dst: int) -> tuple[tuple[int, ...], float]:
        mesh = self.mesh
        across = mesh.wafers > 1 and self._wafer_ids[src] != self._wafer_ids[dst]
        points = self._waypoints(src, dst) if across else [src, dst]
        links: list[int] = []
        crossing = 0
        for k in range(0, len(points), 2):
            a, b = points[k], points[k + 1]
            links += self._xy_links(a, b)
            crossing += self._die_crossings(a, b)
            if k + 2 < len(points):
                links.append(self._links[(b, points[k + 2])])
        wafer_hops = len(points) // 2 - 1
        on_wafer = len(links) - wafer_hops
        if mesh.inter_die_hop_latency_s is None:
            latency = on_wafer * mesh.hop_latency_s
        else:
            latency = (on_wafer - crossing) * mesh.hop_latency_s + crossing * mesh.inter_die_hop_latency_s
        if wafer_hops:
            assert mesh.inter_wafer_hop_latency_s is not None  # Mesh requires it with several wafers
            latency += wafer_hops * mesh.inter_wafer_hop_latency_s
        return tuple(links), latency

    def route_loads(self, routes: Sequence[Edge]) -> tuple[dict[int, float], float, float]:
        """:meth:`Topology.route_loads`, counted by runs of links (:meth:`_loads_by_runs`) where the
        pairs and DRAM streams of ``routes`` never routed would take longer to route one at a time
        than :data:`BATCHED_ROUTES` pairs on one wafer (a pair joining two wafers counts
        :data:`ACROSS_WAFERS` times, a DRAM stream :data:`DRAM_STREAM`), as judged from the first
        :data:`SAMPLED_ROUTES` of them; else route by route.
        Either way the pairs are kept (a search revisiting a placement finds them): the same
        loads, in the same order, latency and edges."""
        routed, dram_routed, wafer = self._routed, self._dram_routed, self._wafer_ids
        across = ACROSS_WAFERS if self.mesh.wafers > 1 else 1
        sample = routes[:SAMPLED_ROUTES]  # a flow's edges are alike: its first ones tell (a warm flow costs no scan)
        unrouted = sum((across if wafer[r[0]] != wafer[r[1]] else 1) if r[1] >= 0 else DRAM_STREAM
                       for r in sample if ((r[0], r[1]) not in routed if r[1] >= 0 else r[0] not in dram_routed))
        if unrouted * len(routes) < BATCHED_ROUTES * max(len(sample), 1):
            return super().route_loads(routes)
        return self._loads_by_runs(routes)

    def _loads_by_runs(self, routes: Sequence[Edge]) -> tuple[dict[int, float], float, float]:
        """:meth:`Topology.route_loads` of ``routes`` (at least one) counted by runs of links
        (:mod:`simulator.network.mesh_loads`): the XY legs of every pair on one wafer, the legs
        and links of pairs on two wafers (:meth:`_gateways_crossed`), and each DRAM stream's legs
        from its ports' cores and the ports (:meth:`dram_routes`). Each pair's route is kept for
        :meth:`route` where there are at most :data:`KEPT_ROUTES` routes."""
        import numpy as np

        from simulator.network.mesh_loads import Runs

        count = len(routes)
        if {len(r) for r in routes} == {2}:  # the common edges: whole ones
            src, dst = np.asarray(routes, dtype=np.int64).T
            share = np.ones(count)
        else:
            src = np.fromiter((r[0] for r in routes), dtype=np.int64, count=count)
            dst = np.fromiter((r[1] for r in routes), dtype=np.int64, count=count)
            share = np.fromiter((r[2] if len(r) == 3 else 1.0 for r in routes), dtype=float, count=count)
        to_dram = dst < 0
        across = np.zeros(count, dtype=bool)
        if self.mesh.wafers > 1:
            wafer = self._wafer_array
            across = ~to_dram & (wafer[src] != wafer[np.where(to_dram, src, dst)])
        runs = Runs()
        plain, far = np.flatnonzero(~to_dram & ~across), np.flatnonzero(across)
        pair_latency = np.zeros(count)
        pair_latency[plain] = self._leg_latencies(runs, plain, 0, src[plain], dst[plain], share[plain])
        pair_latency[far] = self._across_runs(runs, far, src[far], dst[far], share[far])
        dram_latency = self._dram_runs(runs, np.flatnonzero(to_dram), src[to_dram], share[to_dram])
        latency = max(float(pair_latency.max()), float(dram_latency.max()) if len(dram_latency) else 0.0)
        loads, crossed, ends = runs.loads(self._run_table(), count)
        if count <= KEPT_ROUTES:
            self._keep(routes, to_dram.tolist(), crossed, ends, pair_latency.tolist())
        return loads, latency, sum(share.tolist())

    def all_pairs_loads(self, groups: tuple[tuple[int, ...], ...]) -> tuple[dict[int, float], float, float]:
        """:meth:`Topology.all_pairs_loads` counted in closed form, not routed pair by pair (an
        all-to-all of 64 cores is 4,032 routes), where every group's devices are distinct and
        on one wafer, and each wafer's groups (over the box holding them,
        :func:`~simulator.network.mesh_loads.all_pairs_links`) have at least
        :data:`PAIRS_PER_GRID` pairs and at most :data:`CELLS_PER_PAIR` cells a pair; else
        routed. The same loads (sums of ones, exact in any order), in the order the pairs
        (source-major, groups in order) first cross them, the same latency and edges. (Groups
        spanning wafers counted the same way, their pairs between wafers by runs, took longer than
        routing them: a search has routed most of those pairs already.)"""
        import numpy as np

        from simulator.network.mesh_loads import all_pairs_links

        wafer, width = self._wafer_ids, self._width
        if any(len(set(g)) < len(g) or len({wafer[d] for d in g}) > 1 for g in groups):
            return super().all_pairs_loads(groups)
        pairs = [g for g in groups if len(g) > 1]
        if not pairs:
            return {}, 0.0, 0.0
        on_wafer: dict[int, list[int]] = {}
        for k, g in enumerate(pairs):
            on_wafer.setdefault(wafer[g[0]], []).append(k)
        boxes = {w: self._box([d for k in ks for d in pairs[k]]) for w, ks in on_wafer.items()}
        cells = sum(len(on_wafer[w]) * (x1 - x0 + 1) * (y1 - y0 + 1) for w, (x0, y0, x1, y1) in boxes.items())
        edges = sum(len(g) * (len(g) - 1) for g in pairs)
        if edges < PAIRS_PER_GRID * len(on_wafer) or cells > CELLS_PER_PAIR * edges:
            return super().all_pairs_loads(groups)
        table, links, counted = self._run_table(), [], []
        for w, ks in on_wafer.items():
            devices = np.concatenate([np.asarray(pairs[k], dtype=np.int64) for k in ks])
            sizes = np.asarray([len(pairs[k]) for k in ks])
            group = np.repeat(np.arange(len(ks)), sizes)
            (x0, y0, _, _), (y, x) = boxes[w], np.divmod(devices, width)
            for block, at, found in all_pairs_links(group, np.arange(len(devices)) - (np.cumsum(sizes) - sizes)[group],
                                                    x - x0, y - y0):
                links.append(table[block * self.num_devices + (at[:, 1] + y0) * width + at[:, 0] + x0])
                counted.append(np.c_[np.asarray(ks)[found[:, 0]], found[:, 1:]])  # the group's index in ``pairs``
        link, first = np.concatenate(links), np.concatenate(counted)  # group, pairs, first pair's source, ...
        met = link[np.lexsort(first[:, [4, 3, 2, 0]].T)]  # by group, source, destination, place in the route
        resources, where = np.unique(met, return_index=True)
        order = resources[np.argsort(where)]
        sums = np.bincount(link, weights=first[:, 1].astype(float))
        return (dict(zip(order.tolist(), sums[order].tolist(), strict=True)), self._pairs_latency(pairs),
                float(edges))

    def _box(self, devices: list[int]) -> tuple[int, int, int, int]:
        """The smallest and largest x and y of ``devices`` (x0, y0, x1, y1)."""
        xs, ys = [d % self._width for d in devices], [d // self._width for d in devices]
        return min(xs), min(ys), max(xs), max(ys)

    def _pairs_latency(self, groups: list[tuple[int, ...]]) -> float:
        """The largest latency (s) of the XY routes between two distinct devices of a group, for
        groups each on one wafer (:meth:`_route`'s hops and die crossings)."""
        import numpy as np

        from simulator.network.mesh_loads import die_crossings

        src = np.concatenate([np.repeat(g, len(g)) for g in groups])
        dst = np.concatenate([np.tile(g, len(g)) for g in groups])
        src, dst, width = src[src != dst], dst[src != dst], self._width
        hops = np.abs(src % width - dst % width) + np.abs(src // width - dst // width)
        return float(self._latency(hops, die_crossings(src, dst, width, self.mesh.cores_x, self.mesh.cores_y)).max())

    def _keep(self, routes: Sequence[Edge], to_dram: list[bool], crossed: np.ndarray, ends: list[int],
              latency: list[float]) -> None:
        """Keep the route of every pair of ``routes`` not routed yet (its resources
        ``crossed[previous end:end]``), for :meth:`route` to find (:meth:`_route_kept`)."""
        routed, batched = self._routed, self._batched
        begin = 0
        for r, dram, end, seconds in zip(routes, to_dram, ends, latency, strict=True):
            if not dram and (r[0], r[1]) not in routed:
                routed.add((r[0], r[1]))
                batched[(r[0], r[1])] = (crossed, begin, end, seconds)
            begin = end

    def _route_kept(self, src: int, dst: int) -> tuple[tuple[int, ...], float]:
        """:meth:`_route`, or the route :meth:`_loads_by_runs` kept; the pair noted as routed
        (:meth:`route` keeps the route)."""
        kept = self._batched.pop((src, dst), None)
        if kept is not None:
            crossed, begin, end, seconds = kept
            return tuple(crossed[begin:end].tolist()), seconds
        self._routed.add((src, dst))
        return self._route(src, dst)

    def _dram_routes_kept(self, device: int) -> list[tuple[tuple[int, ...], float, float]]:
        """:meth:`_dram_routes`, the device noted as routed (:meth:`dram_routes` keeps them)."""
        self._dram_routed.add(device)
        return self._dram_routes(device)

    def _run_table(self) -> np.ndarray:
        """The lookup table of :mod:`simulator.network.mesh_loads`: the link east, west, south and
        north of every device (-1 where none), then every resource by id."""
        import numpy as np

        if self._table is None:
            links = self._east + self._west + self._south + self._north
            self._table = np.concatenate([np.asarray(links), np.arange(self.num_resources)]).astype(np.int64)
        return self._table

    def _legs(self, runs: Runs, route: np.ndarray, piece: int | np.ndarray, src: np.ndarray, dst: np.ndarray,
              weight: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Add the XY legs from ``src`` to ``dst`` (each the ``piece``-th and next runs of its
        route); their hops and die crossings."""
        from simulator.network.mesh_loads import die_crossings, xy_runs

        row, column = xy_runs(src, dst, self._width, self.num_devices)
        runs.add(route, piece, *row, weight)
        runs.add(route, piece + 1, *column, weight)
        return row[3] + column[3], die_crossings(src, dst, self._width, self.mesh.cores_x, self.mesh.cores_y)

    def _latency(self, hops: np.ndarray, crossing: np.ndarray) -> np.ndarray:
        """Latency (s) of routes of ``hops`` mesh hops, ``crossing`` of them across dies (:meth:`_route`)."""
        mesh = self.mesh
        if mesh.inter_die_hop_latency_s is None:
            latency: np.ndarray = hops * mesh.hop_latency_s
        else:
            latency = (hops - crossing) * mesh.hop_latency_s + crossing * mesh.inter_die_hop_latency_s
        return latency

    def _leg_latencies(self, runs: Runs, route: np.ndarray, piece: int, src: np.ndarray, dst: np.ndarray,
                       weight: np.ndarray) -> np.ndarray:
        """Add one XY leg per route; the routes' latencies (s)."""
        return self._latency(*self._legs(runs, route, piece, src, dst, weight))

    def _dram_runs(self, runs: Runs, route: np.ndarray, device: np.ndarray, share: np.ndarray) -> np.ndarray:
        """Add the DRAM streams of ``device``: each part (:meth:`dram_routes`) the leg from its
        port's core to the device, then the port; the parts' latencies (s)."""
        import numpy as np

        from simulator.network.mesh_loads import SINGLE

        if not len(route):
            return np.zeros(0)
        mesh, width = self.mesh, self._width
        ports = len(mesh.port_cores)
        y, x = np.divmod(device, width)
        x0, y0 = x // mesh.cores_x * mesh.cores_x, y // mesh.cores_y * mesh.cores_y
        px, py = (np.asarray([c[i] for c in mesh.port_cores], dtype=np.int64) for i in (0, 1))
        cores = (y0[:, None] + py) * width + x0[:, None] + px
        port = self._ports[0] + self._die_array[device][:, None] * ports + np.arange(ports)  # ports added in order
        if self.dram.access == "nearest":
            nearest = np.argmin(np.abs(x0[:, None] + px - x[:, None]) + np.abs(y0[:, None] + py - y[:, None]), axis=1)
            chosen = np.arange(len(device)), nearest
            cores, port, part = cores[chosen][:, None], port[chosen][:, None], 1.0
        else:
            part = 1.0 / ports
        latencies = []
        for p in range(cores.shape[1]):
            weight = share * part
            latencies.append(self._leg_latencies(runs, route, 3 * p, cores[:, p], device, weight) + self.dram.latency_s)
            runs.add(route, 3 * p + 2, SINGLE * self.num_devices, port[:, p], 0, 1, weight)
        return np.concatenate(latencies) if latencies else np.zeros(0)

    def _across_runs(self, runs: Runs, route: np.ndarray, src: np.ndarray, dst: np.ndarray,
                     share: np.ndarray) -> np.ndarray:
        """Add the routes between wafers: XY legs between their waypoints (:meth:`_gateways_crossed`)
        and the links between wafers; the routes' latencies (s)."""
        import numpy as np

        from simulator.network.mesh_loads import EAST, NORTH, SOUTH, WEST

        if not len(route):
            return np.zeros(0)
        near, far, hops = self._gateways_crossed(src, dst)
        count, deepest = len(route), near.shape[1]
        starts = np.concatenate([src[:, None], far], axis=1)
        ends = np.concatenate([near, np.zeros((count, 1), dtype=np.int64)], axis=1)
        ends[np.arange(count), hops] = dst
        leg_route, leg = np.nonzero(np.arange(deepest + 1) <= hops[:, None])
        mesh_hops, crossing = self._legs(runs, route[leg_route], 3 * leg, starts[leg_route, leg], ends[leg_route, leg],
                                         share[leg_route])
        link_route, link = np.nonzero(np.arange(deepest) < hops[:, None])
        a, b = near[link_route, link], far[link_route, link]
        along_row = a // self._width == b // self._width
        block = np.where(along_row, np.where(b > a, EAST, WEST), np.where(b > a, SOUTH, NORTH))
        runs.add(route[link_route], 3 * link + 2, block * self.num_devices, a, 0, 1, share[link_route])
        on_wafer = np.bincount(leg_route, weights=mesh_hops, minlength=count)
        crossed = np.bincount(leg_route, weights=crossing, minlength=count)
        assert self.mesh.inter_wafer_hop_latency_s is not None  # Mesh requires it with several wafers
        latency: np.ndarray = self._latency(on_wafer, crossed) + hops * self.mesh.inter_wafer_hop_latency_s
        return latency

    def _gateways_crossed(self, src: np.ndarray, dst: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """:meth:`_waypoints` of many pairs on different wafers at once: the near and far end of
        the ``h``-th link between wafers each route crosses (``(routes, most crossed)`` arrays of
        device ids, -1 past a route's end) and how many each crosses. Gateways are chosen as
        :meth:`_waypoints` chooses them (shortest two legs, ties to the current row, then to
        the target's column, then the first along the edge)."""
        import numpy as np

        mesh, width = self.mesh, self._width
        y, x = np.divmod(src, width)
        ty, tx = np.divmod(dst, width)
        wx, wy = x // mesh.wafer_width, y // mesh.wafer_height
        gx, gy = tx // mesh.wafer_width, ty // mesh.wafer_height
        hops = np.abs(gx - wx) + np.abs(gy - wy)
        deepest = int(hops.max())
        near, far = np.full((len(src), deepest), -1, dtype=np.int64), np.full((len(src), deepest), -1, dtype=np.int64)
        along_y = np.asarray([die * mesh.cores_y + o for die in range(mesh.dies_y)
                              for o in mesh.wafer_link_offsets(mesh.cores_y)], dtype=np.int64)
        along_x = np.asarray([die * mesh.cores_x + o for die in range(mesh.dies_x)
                              for o in mesh.wafer_link_offsets(mesh.cores_x)], dtype=np.int64)
        tie = mesh.width + mesh.height + 1  # above every tie-break term
        for h in range(deepest):
            east_west = np.flatnonzero((hops > h) & (wx != gx))
            north_south = np.flatnonzero((hops > h) & (wx == gx))
            if len(east_west):
                i, step = east_west, np.sign(gx[east_west] - wx[east_west])
                edge = np.where(step > 0, (wx[i] + 1) * mesh.wafer_width - 1, wx[i] * mesh.wafer_width)
                rows = wy[i, None] * mesh.wafer_height + along_y
                key = (np.abs(x[i] - edge)[:, None] + np.abs(y[i, None] - rows) + np.abs(edge + step - tx[i])[:, None]
                       + np.abs(rows - ty[i, None])) * tie + np.abs(rows - y[i, None])
                row = rows[np.arange(len(i)), np.argmin(key, axis=1)]
                near[i, h], far[i, h] = row * width + edge, row * width + edge + step
                x[i], y[i], wx[i] = edge + step, row, wx[i] + step
            if len(north_south):
                j, step = north_south, np.sign(gy[north_south] - wy[north_south])
                edge = np.where(step > 0, (wy[j] + 1) * mesh.wafer_height - 1, wy[j] * mesh.wafer_height)
                columns = wx[j, None] * mesh.wafer_width + along_x
                key = (np.abs(x[j, None] - columns) + np.abs(y[j] - edge)[:, None] + np.abs(columns - tx[j, None])
                       + np.abs(edge + step - ty[j])[:, None]) * tie + np.abs(columns - tx[j, None])
                column = columns[np.arange(len(j)), np.argmin(key, axis=1)]
                near[j, h], far[j, h] = edge * width + column, (edge + step) * width + column
                x[j], y[j], wy[j] = column, edge + step, wy[j] + step
        return near, far, hops

    def collective_levels(self, groups: tuple[tuple[int, ...], ...]) -> tuple[Groups, Groups] | None:
        """With ``hierarchical`` die collectives, groups spanning several dies with the same number
        of cores on each: the cores of each die (within), and the ``j``-th core of every die
        (across); else None (one flat ring)."""
        if self.mesh.die_collectives != "hierarchical":
            return None
        within: list[tuple[int, ...]] = []
        across: list[tuple[int, ...]] = []
        for group in groups:
            dies: dict[int, list[int]] = {}
            for device in group:
                dies.setdefault(self.node_of(device), []).append(device)
            parts = list(dies.values())
            if len(parts) < 2 or len({len(p) for p in parts}) > 1:
                return None
            within += [tuple(p) for p in parts]
            across += [tuple(p[j] for p in parts) for j in range(len(parts[0]))]
        return tuple(within), tuple(across)

    def _die_ports(self, device: int) -> list[tuple[int, int]]:
        """(port resource, core the port hangs on) of every port of ``device``'s die."""
        mesh, c = self.mesh, self.coord(device)
        die = self.node_of(device)
        x0, y0 = (c.x // mesh.cores_x) * mesh.cores_x, (c.y // mesh.cores_y) * mesh.cores_y
        return [(self._ports[die * mesh.dram_ports_per_die + p], self.device_at(x0 + x, y0 + y))
                for p, (x, y) in enumerate(mesh.port_cores)]

    def _port_route(self, device: int, port: int, core: int) -> tuple[tuple[int, ...], float]:
        links, latency = self._route(core, device)
        return links + (port,), latency + self.dram.latency_s

    def _dram_route(self, device: int) -> tuple[tuple[int, ...], float]:
        """The route to the nearest port (mesh hops; ties to the first port)."""
        c = self.coord(device)
        def hops(entry: tuple[int, int]) -> int:
            p = self.coord(entry[1])
            return abs(p.x - c.x) + abs(p.y - c.y)
        return self._port_route(device, *min(self._die_ports(device), key=hops))

    def _dram_routes(self, device: int) -> list[tuple[tuple[int, ...], float, float]]:
        """(resources, latency, share) of ``device``'s DRAM traffic: all of it to the nearest
        port, or an equal share to every port of its die (``interleaved``); :meth:`dram_routes`,
        kept per device."""
        if self.dram.access == "nearest":
            return super().dram_routes(device)
        ports = self._die_ports(device)
        return [(*self._port_route(device, port, core), 1.0 / len(ports)) for port, core in ports]


PAIRS_PER_GRID = 640
"""Fewest pairs per wafer's grid for which :meth:`MeshTopology.all_pairs_loads` counts an
all-to-all in closed form: each grid costs some 60 numpy calls (about 0.7 ms), routing about
1.3 us a pair (less where routed before)."""
CELLS_PER_PAIR = 8
"""Most grid cells (a group's: the box holding its wafer's groups) per pair for which
:meth:`MeshTopology.all_pairs_loads` counts an all-to-all in closed form: its numpy work grows
with the cells. Measured on ``wafer-4`` (compact groups on each wafer, this host): 16 groups of
16 cores, closed form 3.5 ms, routing 5.9 ms; 64 of 4, 3.7 and 2.0 ms; 32 of 8, 3.4 and 2.5 ms;
4 of 64, 5.2 and 27 ms."""
BATCHED_ROUTES = 128
"""Never-routed pairs on one wafer from which :meth:`MeshTopology.route_loads` counts by runs of
links (numpy): its arrays' set-up (0.3-0.6 ms a call) outweighs routing fewer one at a time
(about 2.4 us a pair, then 2 us to count it)."""
ACROSS_WAFERS = 6
"""What a never-routed pair joining two wafers counts toward :data:`BATCHED_ROUTES` (about 15 us
to route it alone)."""
KEPT_ROUTES = 1024
"""Most routes of a flow whose pairs :meth:`MeshTopology._loads_by_runs` keeps: a larger flow (an
expert-parallel all-to-all's every pair) is counted by runs each time, about as fast as counting
known routes one by one, without keeping each pair (2 us a pair)."""
SAMPLED_ROUTES = 16
"""Routes of a flow :meth:`MeshTopology.route_loads` looks at to judge how many were never routed."""
DRAM_STREAM = 3
"""What a never-routed DRAM stream counts toward :data:`BATCHED_ROUTES` (its die's ports, the
nearest chosen, then the route from the port's core: about 7 us). The runs do not keep DRAM
streams: a device's stream is routed once for the topology's life when routed one at a time."""


def _cycle(rows: list[list[int]]) -> tuple[int, ...]:
    """Hamiltonian cycle of a grid with an even number of rows: east on row 0, snake the rest
    over columns 1.., come back north along column 0."""
    ring = list(rows[0])
    for i, row in enumerate(rows[1:]):
        rest = row[1:]
        ring += rest[::-1] if i % 2 == 0 else rest
    ring += [row[0] for row in rows[:0:-1]]
    return tuple(ring)


def walk(width: int, height: int, *, snake: bool, transpose: bool = False) -> list[tuple[int, int]]:
    """(x, y) cells of a ``width x height`` grid row by row (column by column if ``transpose``);
    every other row (column) reversed if ``snake``."""
    if transpose:
        return [(x, y) for y, x in walk(height, width, snake=snake)]
    return [(width - 1 - x if snake and y % 2 else x, y) for y in range(height) for x in range(width)]


def _sgn(value: int) -> int:
    return (value > 0) - (value < 0)


def _gilbert(x: int, y: int, ax: int, ay: int, bx: int, by: int) -> Iterator[tuple[int, int]]:
    """Generalized Hilbert curve of the rectangle spanned by (ax, ay) and (bx, by) from (x, y).

    Červený's recursive construction: split the long side in two (long rectangles) or into
    three sub-rectangles (near-square), preferring even splits so that steps stay unit length.
    """
    w, h = abs(ax + ay), abs(bx + by)
    dax, day, dbx, dby = _sgn(ax), _sgn(ay), _sgn(bx), _sgn(by)
    if h == 1 or w == 1:
        step = (dax, day) if h == 1 else (dbx, dby)
        for i in range(max(w, h)):
            yield x + i * step[0], y + i * step[1]
        return
    ax2, ay2, bx2, by2 = ax // 2, ay // 2, bx // 2, by // 2
    if 2 * w > 3 * h:
        if abs(ax2 + ay2) % 2 and w > 2:
            ax2, ay2 = ax2 + dax, ay2 + day
        yield from _gilbert(x, y, ax2, ay2, bx, by)
        yield from _gilbert(x + ax2, y + ay2, ax - ax2, ay - ay2, bx, by)
        return
    if abs(bx2 + by2) % 2 and h > 2:
        bx2, by2 = bx2 + dbx, by2 + dby
    yield from _gilbert(x, y, bx2, by2, ax2, ay2)
    yield from _gilbert(x + bx2, y + by2, ax, ay, bx - bx2, by - by2)
    yield from _gilbert(x + (ax - dax) + (bx2 - dbx), y + (ay - day) + (by2 - dby),
                        -bx2, -by2, -(ax - ax2), -(ay - ay2))


def hilbert_cells(width: int, height: int) -> list[tuple[int, int]]:
    """All (x, y) cells of a ``width x height`` grid along the generalized Hilbert curve."""
    if width >= height:
        return list(_gilbert(0, 0, width, 0, 0, height))
    return list(_gilbert(0, 0, 0, height, width, 0))


def _by_dies(topology: MeshTopology, *, snake: bool, transpose: bool = False) -> list[int]:
    """Dies walked as :func:`walk`, and the cores inside each die the same way."""
    mesh = topology.mesh
    return [topology.device_at(die_x * mesh.cores_x + x, die_y * mesh.cores_y + y)
            for die_x, die_y in walk(mesh.grid_dies_x, mesh.grid_dies_y, snake=snake, transpose=transpose)
            for x, y in walk(mesh.cores_x, mesh.cores_y, snake=snake, transpose=transpose)]


def _mirrored(topology: MeshTopology, order: Sequence[int], *, flip_x: bool, flip_y: bool) -> list[int]:
    """``order`` with every device reflected east-west and/or north-south."""
    width, height = topology.mesh.width, topology.mesh.height
    def reflect(device: int) -> int:
        c = topology.coord(device)
        return topology.device_at(width - 1 - c.x if flip_x else c.x, height - 1 - c.y if flip_y else c.y)
    return [reflect(d) for d in order]


class _Orders(Mapping[str, Sequence[int]]):
    """Named device orders, each walked the first time it is read (a placement reads one: the
    Hilbert walk of four wafers alone takes milliseconds)."""

    def __init__(self, builders: dict[str, Callable[[], Sequence[int]]]) -> None:
        self._builders = builders
        self._walked: dict[str, Sequence[int]] = {}

    def __getitem__(self, name: str) -> Sequence[int]:
        order = self._walked.get(name)
        if order is None:
            order = self._walked[name] = self._builders[name]()
        return order

    def __contains__(self, name: object) -> bool:
        return name in self._builders

    def __iter__(self) -> Iterator[str]:
        return iter(self._builders)

    def __len__(self) -> int:
        return len(self._builders)


@cache
def mesh_orders(topology: MeshTopology) -> Mapping[str, Sequence[int]]:
    """Every named order of the mesh's cores (see the module docstring), PALM's two first, each
    walked when first read."""
    mesh = topology.mesh

    def cells(walked: Callable[[], list[tuple[int, int]]]) -> Callable[[], list[int]]:
        return lambda: [topology.device_at(x, y) for x, y in walked()]

    def mirrored(flip_x: bool, flip_y: bool) -> Callable[[], list[int]]:
        return lambda: _mirrored(topology, orders["s-shape"], flip_x=flip_x, flip_y=flip_y)

    orders = _Orders({
        "line": lambda: _by_dies(topology, snake=False),
        "s-shape": lambda: _by_dies(topology, snake=True),
        "s-shape-transposed": lambda: _by_dies(topology, snake=True, transpose=True),
        "s-shape-east": mirrored(True, False),
        "s-shape-south": mirrored(False, True),
        "s-shape-rotated": mirrored(True, True),
        "row-snake": cells(lambda: walk(mesh.width, mesh.height, snake=True)),
        "column-snake": cells(lambda: walk(mesh.width, mesh.height, snake=True, transpose=True)),
        "hilbert": cells(lambda: hilbert_cells(mesh.width, mesh.height)),
    })
    return orders


@cache
def _one_wafer(mesh: Mesh, dram: Dram) -> MeshTopology:
    """The topology of one wafer of ``mesh`` (its orders are each wafer's)."""
    return MeshTopology(replace(mesh, wafers_x=1, wafers_y=1), dram)


@cache
def wafer_orders(topology: MeshTopology) -> Mapping[str, Sequence[int]]:
    """Every named order of :func:`mesh_orders` taken inside each wafer, the wafers visited as
    a boustrophedon of their grid (as PALM's s-shape visits dies): a run of whole wafers' worth
    of devices, or of a divisor of it, stays on one wafer. On one wafer: :func:`mesh_orders`.
    Each is walked when first read."""
    mesh = topology.mesh
    if mesh.wafers == 1:
        return mesh_orders(topology)
    one = _one_wafer(mesh, topology.dram)
    wafers = walk(mesh.wafers_x, mesh.wafers_y, snake=True)

    def on_wafers(name: str) -> Callable[[], list[int]]:
        def walked() -> list[int]:
            cells = [one.coord(d) for d in mesh_orders(one)[name]]
            return [topology.device_at(wx * mesh.wafer_width + c.x, wy * mesh.wafer_height + c.y)
                    for wx, wy in wafers for c in cells]
        return walked

    return _Orders({name: on_wafers(name) for name in mesh_orders(one)})
