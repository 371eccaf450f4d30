"""Collectives, point-to-point transfers and DRAM streams as *flows* on the topology.

A :class:`Flow` is a fixed traffic pattern: a set of *edges* (source -> destination routes)
that move the same number of bytes at the same time, for example every ring edge of the ``dp``
tensor-parallel groups of one pipeline stage (Virtual Tile Aggregation, PALM §IV-A: one
simulated stage stands for all its groups, while the links they share stay shared). Its
``load`` on a resource is how many of its edges cross it, so a step moving ``x`` bytes per edge
lasts

    latency + x * max_r(load_r / (bandwidth_r * efficiency_r))               (PALM Eq. 2)

with ``efficiency_r`` the calibration's collective or p2p efficiency, or a cluster NIC's own
(:attr:`~simulator.hardware.spec.Cluster.inter_node_efficiency`),

and a collective is a number of such steps (Thakur et al., IJHPCA 2005; Patarasuk & Yuan 2009):

* ring all-reduce of ``S`` bytes over ``n`` devices: ``2(n-1)`` steps of ``S/n`` bytes, i.e.
  ``2(n-1)/n * S / bw + 2(n-1) * latency`` on a contention-free ring;
* ring all-gather / reduce-scatter: ``n-1`` steps of ``S/n``;
* all-to-all (direct): one step in which every device sends ``S/n`` to each other device;
* point-to-point: one step of ``S``; DRAM stream: one step of ``S`` through the DRAM port
  (PALM Eqs. 4-5: response time plus size over bandwidth, plus the NoC route).

Over groups of ``k`` dies of ``c`` cores each on a mesh whose collectives are hierarchical
(:attr:`~simulator.network.mesh.Mesh.die_collectives`), a collective runs in two levels, the
two-dimensional ring algorithms (Thakur et al., IJHPCA 2005, §4; NCCL's and tt-metal's
multi-device collectives move each chip's shard between chips): an all-reduce is a reduce-scatter
within each die, an all-reduce of ``S / c`` across the dies between the cores of the same rank,
and an all-gather within each die; an all-gather is one across the dies of ``S / c`` then one
within; a reduce-scatter one within, then one across of ``S / c``. Only ``2(k-1)`` steps (not
``2(ck-1)``) pay the latency of the links between dies.

The cost of a collective is O(edges) once, when its flow is built, and O(1) per use: no
per-step or per-device simulation events (the authors' code spawns 2(P-1)P processes per ring).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from simulator.errors import SimulationError
from simulator.network.topology import Edge, Topology

STEPS_PER_RING = {"all_reduce": lambda n: 2 * (n - 1), "all_gather": lambda n: n - 1,
                  "reduce_scatter": lambda n: n - 1}


@dataclass(slots=True, eq=False)
class Flow:
    """A traffic pattern on the topology and its timing (an entity: equal and hashed by identity,
    as the counters it carries belong to one engine's flows).

    Attributes:
        name: readable name (e.g. ``stage3 tp``).
        kind: traffic class: ``tp``, ``cp``, ``dp``, ``p2p`` or ``dram``.
        group_size: devices per group (``n`` of the ring formulas); 1 for p2p and DRAM.
        loads: edges crossing each resource (fractional where an edge is split over NICs).
        latency_s: the largest route latency among the edges (s).
        seconds_per_byte: ``max_r(load_r / (bandwidth_r * efficiency_r))`` (s per byte per edge).
        occupancy: ``load_r / (bandwidth_r * efficiency_r)`` of each resource: seconds it is busy
            per byte the flow moves per edge (its largest value is ``seconds_per_byte``); the
            resources of ``loads``, in their order.
        bytes_moved: bytes per edge moved so far (for link utilisation, filled by the engine).
        num_edges: edges (source -> destination routes) of the flow.
        booked: resources the contention backend books for this flow (set by the engine).
        levels: ``(within, across)`` flows of a two-level collective (see the module docstring);
            then ``loads`` and ``occupancy`` are theirs weighted by the bytes each level moves.
    """

    name: str
    kind: str
    group_size: int
    loads: dict[int, float]
    latency_s: float
    seconds_per_byte: float
    num_edges: int = 0
    bytes_moved: float = 0.0
    booked: tuple[int, ...] = field(default=())
    occupancy: dict[int, float] = field(default_factory=dict)
    levels: tuple[Flow, Flow] | None = None

    def step_time_s(self, bytes_per_edge: float) -> float:
        """Duration of one step moving ``bytes_per_edge`` on every edge (s), PALM Eq. 2."""
        return self.latency_s + bytes_per_edge * self.seconds_per_byte

    def collective_steps(self, kind: str) -> int:
        """Steps of one collective of ``kind`` in this flow's groups (0 for groups of one)."""
        n = self.group_size
        if n <= 1:
            return 0
        return 1 if kind == "all_to_all" else STEPS_PER_RING[kind](n)

    def collective_latency_s(self, kind: str) -> float:
        """The latency part of one collective of ``kind`` (s): its steps times their latency."""
        if self.levels is not None and kind in STEPS_PER_RING:
            return sum(flow.collective_latency_s(k) for flow, k, _ in self._parts(kind, 1.0))
        return self.collective_steps(kind) * self.latency_s

    def collective_time_s(self, kind: str, size_bytes: float) -> tuple[float, float]:
        """(duration in s, bytes per edge moved) of one collective of ``size_bytes`` per device.

        Raises:
            SimulationError: unknown collective kind.
        """
        n = self.group_size
        if n <= 1:
            return 0.0, 0.0
        if kind == "all_to_all":
            return self.step_time_s(size_bytes / n), size_bytes / n
        if kind not in STEPS_PER_RING:
            raise SimulationError(f"unknown collective {kind!r}")
        if self.levels is not None:
            timed = [flow.collective_time_s(k, size) for flow, k, size in self._parts(kind, size_bytes)]
            return sum(t for t, _ in timed), sum(m for _, m in timed)
        steps = STEPS_PER_RING[kind](n)
        return steps * self.step_time_s(size_bytes / n), steps * size_bytes / n

    def _parts(self, kind: str, size_bytes: float) -> list[tuple[Flow, str, float]]:
        """(flow, collective, bytes per device) of each phase of a two-level collective."""
        assert self.levels is not None
        within, across = self.levels
        shard = size_bytes / within.group_size
        if kind == "all_reduce":
            return [(within, "reduce_scatter", size_bytes), (across, "all_reduce", shard),
                    (within, "all_gather", size_bytes)]
        if kind == "all_gather":
            return [(across, "all_gather", shard), (within, "all_gather", size_bytes)]
        return [(within, "reduce_scatter", size_bytes), (across, "reduce_scatter", shard)]


def two_level_flow(name: str, group_size: int, within: Flow, across: Flow) -> Flow:
    """Groups of ``group_size`` devices collecting in two levels (``within`` then ``across`` the
    dies; every group's ring across them has ``group_size`` edges, as one flat ring would): its loads
    and occupancy are the levels' weighted by the share of the bytes per edge each moves, the same
    for every ring collective (``k (c-1)`` within against ``k-1`` across, ``c`` cores on ``k``
    dies), so that the occupancy times the bytes moved is each resource's busy time."""
    c, k = within.group_size, across.group_size
    weights = ((within, k * (c - 1) / (k * (c - 1) + k - 1)), (across, (k - 1) / (k * (c - 1) + k - 1)))
    loads: dict[int, float] = {}
    occupancy: dict[int, float] = {}
    for flow, weight in weights:
        for r, load in flow.loads.items():
            loads[r] = loads.get(r, 0.0) + weight * load
            occupancy[r] = occupancy.get(r, 0.0) + weight * flow.occupancy[r]
    return Flow(name=name, kind=across.kind, group_size=group_size, loads=loads,
                latency_s=max(within.latency_s, across.latency_s),
                seconds_per_byte=max(occupancy.values(), default=0.0), num_edges=across.num_edges,
                occupancy=occupancy, levels=(within, across))


def make_flow(
    topology: Topology, name: str, kind: str, routes: Sequence[Edge], efficiency: float,
    group_size: int = 1, copies: int = 1,
) -> Flow:
    """A flow whose edges are the device pairs ``routes`` (a pair ``(d, -1)`` is d's DRAM stream).

    Args:
        topology: the machine.
        name: readable name.
        kind: ``tp``, ``dp``, ``p2p`` or ``dram``.
        routes: (source device, destination device) of every edge, or (source, destination,
            share) for an edge carrying ``share`` of an edge's bytes (see
            :meth:`~simulator.network.topology.Topology.channel_edges`).
        efficiency: achieved fraction of link bandwidth (hardware calibration), on every
            resource that has no efficiency of its own (:attr:`Topology.efficiencies`).
        group_size: devices per group for ring formulas.
        copies: how many copies of ``routes`` the flow stands for, each on resources of its own
            that load the machine as these do (identical data-parallel replicas,
            :mod:`simulator.replicas`): they count in ``num_edges``, not in ``loads``.
    """
    return _flow(topology, name, kind, topology.remembered_loads(routes), efficiency, group_size, copies)


def all_to_all_flow(topology: Topology, name: str, kind: str, groups: tuple[tuple[int, ...], ...],
                    efficiency: float, copies: int = 1) -> Flow:
    """A direct all-to-all in each of ``groups`` (of the first group's size): the flow of
    :func:`make_flow` over every ordered pair of distinct devices of a group, its loads counted by
    :meth:`~simulator.network.topology.Topology.all_pairs_loads`."""
    return _flow(topology, name, kind, topology.remembered_all_pairs_loads(groups), efficiency, len(groups[0]), copies)


def _flow(topology: Topology, name: str, kind: str, counted: tuple[dict[int, float], float, float],
          efficiency: float, group_size: int, copies: int) -> Flow:
    """The flow of ``counted`` edges: their loads per resource, largest latency (s) and number."""
    loads, latency, edges = counted
    occupancy, seconds_per_byte = topology.remembered_occupancy(counted, efficiency)
    return Flow(name=name, kind=kind, group_size=group_size, loads=loads, latency_s=latency,
                seconds_per_byte=seconds_per_byte, num_edges=round(edges) * copies, occupancy=occupancy)


def ring_edges(groups: tuple[tuple[int, ...], ...]) -> list[tuple[int, int]]:
    """Edges of a ring over each group: ``g[i] -> g[i+1 mod n]`` (no edges for n = 1)."""
    return [(g[i], g[(i + 1) % len(g)]) for g in groups if len(g) > 1 for i in range(len(g))]
