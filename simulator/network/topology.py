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

from collections import Counter, OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import cache, partial
from itertools import chain
from typing import TYPE_CHECKING, Literal, TypeVar

from simulator.errors import InputError
from simulator.hardware.spec import Dram, Hardware, Network

if TYPE_CHECKING:
    import numpy as np

Edge = tuple[int, int] | tuple[int, int, float]
"""A ring edge (source, destination), or (source, destination, share of the edge's bytes)."""

Counted = tuple[dict[int, float], float, float]
"""Edges crossing each resource, the largest route latency (s) and the edges
(:meth:`Topology.route_loads`)."""

COUNTS_REMEMBERED = 4096
"""Counted route sets each topology keeps (:meth:`Topology.remembered_loads`): the layouts of a
screen's task place many flows alike (Qwen3-30B-A3B on wafer-4, the screen's blocks 150-155:
27,790 sets asked for, 5,122 distinct, all found again at this size); a worker's memory grew
less with them than with the routes they spare (941 against 1,047 MB)."""

_K = TypeVar("_K")
_V = TypeVar("_V")


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


Groups = tuple[tuple[int, ...], ...]
"""Groups of devices (each a tuple of device ids) that run a collective together."""


class Topology:
    """Routes and resources of one machine; built once per hardware (see :func:`topology_of`).

    Attributes:
        num_devices: devices (cores or GPUs).
        bandwidth_bytes_per_s: bandwidth of each resource, one direction (bytes/s).
        names: a readable name of each resource.
        kinds: ``link``, ``dram`` or ``nic`` for each resource.
        efficiencies: achieved fraction of bandwidth of each resource, or None where a flow's
            own calibration applies (every resource but a cluster's NICs).

    A kind may describe its resources arithmetically (sequences computed on access, as a GPU
    cluster's ports), so that a large machine is built only as far as a mapping reads it; code
    that needs a figure per resource reads the resources it uses, never all of them.
    """

    def __init__(self) -> None:
        self._bandwidths: list[float] = []
        self._names: list[str] = []
        self._kinds: list[str] = []
        self._efficiencies: list[float | None] = []
        self.bandwidth_bytes_per_s: Sequence[float] = self._bandwidths
        self.names: Sequence[str] = self._names
        self.kinds: Sequence[str] = self._kinds
        self.efficiencies: Sequence[float | None] = self._efficiencies
        self.num_devices = 0
        self._counted: OrderedDict[tuple[object, ...], Counted] = OrderedDict()
        self._occupied: OrderedDict[tuple[int, float], tuple[Counted, dict[int, float], float]] = OrderedDict()

    def _add(self, name: str, kind: str, bandwidth_bytes_per_s: float, efficiency: float | None = None) -> int:
        self._names.append(name)
        self._kinds.append(kind)
        self._bandwidths.append(bandwidth_bytes_per_s)
        self._efficiencies.append(efficiency)
        return len(self._names) - 1

    def _add_many(self, names: list[str], kind: str, bandwidths_bytes_per_s: list[float]) -> range:
        """:meth:`_add` of resources of one kind at once; their ids."""
        first = len(self._names)
        self._names.extend(names)
        self._kinds.extend([kind] * len(names))
        self._bandwidths.extend(bandwidths_bytes_per_s)
        self._efficiencies.extend([None] * len(names))
        return range(first, len(self._names))

    def occupancy(self, loads: dict[int, float], efficiency: float) -> dict[int, float]:
        """Seconds per byte each resource of ``loads`` (edges crossing it) is busy: the load over
        its bandwidth times its own efficiency, else ``efficiency`` (the flow's calibration)."""
        bandwidth, own = self.bandwidth_bytes_per_s, self.efficiencies
        return {r: load / (bandwidth[r] * (own[r] or efficiency)) for r, load in loads.items()}

    def bandwidths_and_kinds(self, resources: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The bandwidth (bytes/s, floats) and the kind (strings) of each of ``resources`` (an
        integer array), as arrays."""
        import numpy as np  # here: the command line starts without numpy (tests/palm_search/test_cli_simulate.py)

        listed = resources.tolist()
        return (np.array([self.bandwidth_bytes_per_s[r] for r in listed], dtype=float),
                np.array([self.kinds[r] for r in listed], dtype=str))

    @property
    def num_resources(self) -> int:
        """Resources (links, ports) in the machine."""
        return len(self.names)

    def kind_counts(self) -> dict[str, int]:
        """How many resources of each kind the machine has."""
        return dict(Counter(self.kinds))

    def resource_shift(self, device_shift: int) -> int | None:
        """How far the resources of devices ``device_shift`` further along lie, when that move
        maps every route (and DRAM stream) of devices ``d`` onto the routes of ``d +
        device_shift`` through resources that many further, of the same kinds, bandwidths,
        efficiencies and latencies, crossed in the same order; None when this kind cannot tell
        (the default: the simulator then routes every stage's flows)."""
        return None

    def aligned_replicas(self, placement: str, replica_devices: int, stage_devices: int) -> int | None:
        """Replicas that repeat the machine exactly, or None when this kind cannot tell.

        When every pipeline stage is a run of ``stage_devices`` consecutive devices of the order
        ``placement`` and every data-parallel replica a run of ``replica_devices`` consecutive
        devices of its stage's walk (:meth:`stage_walk`), a kind may know that moving every
        device by ``P`` replicas (cyclically within each stage) maps routes onto routes of the
        same resources' kinds, bandwidths and latencies, one resource to one: then every block
        of ``P`` consecutive replicas loads the machine as any other (its rings and p2p edges
        included) and the simulator need build the flows of a few blocks only
        (:mod:`simulator.replicas`). Returns that ``P``; None by default (the simulator then
        builds every replica's flows).
        """
        return None

    def route(self, src: int, dst: int) -> tuple[tuple[int, ...], float]:
        """Resources crossed from device ``src`` to ``dst`` and the route's latency (s)."""
        raise NotImplementedError

    def dram_route(self, device: int) -> tuple[tuple[int, ...], float]:
        """Resources crossed by ``device``'s off-chip DRAM traffic (port last) and latency (s)."""
        raise NotImplementedError

    def route_loads(self, routes: Sequence[Edge]) -> tuple[dict[int, float], float, float]:
        """Edges of ``routes`` crossing each resource (in the order the routes first cross
        them), the largest route latency (s) and the edges (their shares summed).

        ``routes`` are (source device, destination device) pairs, a pair ``(d, -1)`` being d's
        DRAM stream, or (source, destination, share) for an edge carrying ``share`` of an edge's
        bytes (:meth:`channel_edges`)."""
        if all(len(route) == 2 and route[1] >= 0 for route in routes):
            return self._whole_route_loads(routes)
        loads: dict[int, float] = {}
        get, route_of, dram_routes_of = loads.get, self.route, self.dram_routes
        latency = edges = 0.0
        for route in routes:
            if len(route) == 2 and route[1] >= 0:  # the common edge: one whole route
                resources, route_latency = route_of(*route)
                for r in resources:
                    loads[r] = get(r, 0.0) + 1.0
                if route_latency > latency:
                    latency = route_latency
                edges += 1.0
                continue
            src, dst, share = route if len(route) == 3 else (*route, 1.0)
            parts = dram_routes_of(src) if dst < 0 else [(*route_of(src, dst), 1.0)]
            for resources, route_latency, part in parts:
                weight = share * part
                for r in resources:
                    loads[r] = get(r, 0.0) + weight
                if route_latency > latency:
                    latency = route_latency
            edges += share
        return loads, latency, edges

    def _whole_route_loads(self, routes: Sequence[Edge]) -> tuple[dict[int, float], float, float]:
        """:meth:`route_loads` of whole device pairs only, their resources counted by
        :class:`collections.Counter` (C, not a Python step per resource crossed): the same loads
        (a sum of ones is its count exactly), in the same order of first crossing."""
        routed = [self.route(route[0], route[1]) for route in routes]
        counts = Counter(chain.from_iterable([resources for resources, _ in routed]))
        latency = max([route_latency for _, route_latency in routed], default=0.0)
        return {r: float(count) for r, count in counts.items()}, max(latency, 0.0), float(len(routes))

    def remembered_loads(self, routes: Sequence[Edge]) -> Counted:
        """:meth:`route_loads` of ``routes``, remembered (:data:`COUNTS_REMEMBERED`): a search's
        placements share many of their flows' routes. The answer is shared, not copied: read it only."""
        return _recent(self._counted, ("routes", tuple(routes)), partial(self.route_loads, routes))

    def remembered_all_pairs_loads(self, groups: tuple[tuple[int, ...], ...]) -> Counted:
        """:meth:`all_pairs_loads` of ``groups``, remembered as :meth:`remembered_loads` is."""
        return _recent(self._counted, ("all pairs", groups), partial(self.all_pairs_loads, groups))

    def remembered_occupancy(self, counted: Counted, efficiency: float) -> tuple[dict[int, float], float]:
        """:meth:`occupancy` of ``counted``'s loads at ``efficiency`` and its largest value (s per
        byte per edge; 0 without loads), remembered for the counted object (an answer of
        :meth:`remembered_loads`, the same object each time it is found again) as its loads are;
        the entry holds ``counted``, so no other object has its id while the entry lasts. The
        answer is shared, not copied: read it only."""
        _, occupancy, seconds_per_byte = _recent(self._occupied, (id(counted), efficiency),
                                                 partial(self._occupancy_of, counted, efficiency))
        return occupancy, seconds_per_byte

    def _occupancy_of(self, counted: Counted, efficiency: float) -> tuple[Counted, dict[int, float], float]:
        occupancy = self.occupancy(counted[0], efficiency)
        return counted, occupancy, max(occupancy.values(), default=0.0)

    def all_pairs_loads(self, groups: tuple[tuple[int, ...], ...]) -> tuple[dict[int, float], float, float]:
        """:meth:`route_loads` of a direct all-to-all in each group: every ordered pair of
        distinct devices, source-major in the groups' order. A topology may count them in
        closed form (the same loads, in the same order)."""
        return self.route_loads([(a, b) for g in groups for a in g for b in g if a != b])

    def dram_routes(self, device: int) -> list[tuple[tuple[int, ...], float, float]]:
        """``(resources, latency, share)`` of each part of ``device``'s DRAM traffic (shares sum
        to 1): the one :meth:`dram_route` unless the machine spreads it over several ports."""
        return [(*self.dram_route(device), 1.0)]

    def node_of(self, device: int) -> int:
        """The die (mesh), node (cluster) or chip holding ``device``."""
        return device

    def device_orders(self) -> Mapping[str, Sequence[int]]:
        """Named orders of all devices that pipeline stages are cut from. Without geometry,
        PALM's ``line`` and ``s-shape`` are both the devices by id."""
        ids = range(self.num_devices)
        return {"line": ids, "s-shape": ids}

    def wafer_device_orders(self) -> Mapping[str, Sequence[int]]:
        """The named orders walked wafer by wafer (a multi-wafer mesh); a machine of one wafer
        (every kind but the mesh) has :meth:`device_orders`."""
        return self.device_orders()

    @property
    def devices_per_wafer(self) -> int:
        """Devices of one wafer: all of them on a machine of one wafer (every kind but the mesh)."""
        return self.num_devices

    def wafer_of(self, device: int) -> int:
        """The wafer holding ``device`` (0 on a machine of one wafer)."""
        return 0

    def device_order(self, name: str, *, within_wafers: bool = False) -> Sequence[int]:
        """The device order ``name`` (see :meth:`device_orders`), walked wafer by wafer if
        ``within_wafers`` (:meth:`wafer_device_orders`).

        Raises:
            InputError: this machine has no order of that name (the message lists its names).
        """
        orders = self.wafer_device_orders() if within_wafers else self.device_orders()
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

    def collective_levels(self, groups: tuple[tuple[int, ...], ...]) -> tuple[Groups, Groups] | None:
        """``(within, across)`` groups of a two-level collective over ``groups``, or None: one ring
        over each group (the default). See :class:`~simulator.network.collectives.Flow`."""
        return None

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


def _recent(store: OrderedDict[_K, _V], key: _K, make: Callable[[], _V]) -> _V:
    """``store[key]``, made by ``make`` when absent; the :data:`COUNTS_REMEMBERED` most recently
    used kept."""
    found = store.get(key)
    if found is None:
        found = store[key] = make()
        if len(store) > COUNTS_REMEMBERED:
            store.popitem(last=False)
    else:
        store.move_to_end(key)
    return found


T = TypeVar("T", bound=type[Topology])


def topology_for(network: type[Network]) -> Callable[[T], T]:
    """Class decorator: the decorated :class:`Topology` serves records of class ``network``."""
    def register(cls: T) -> T:
        TOPOLOGIES[network] = cls
        return cls
    return register
