"""A GPU cluster: nodes of GPUs on a switch (NVSwitch), joined by one NIC per GPU (InfiniBand).

A flow routes through the sending GPU's up-port and the receiving GPU's down-port: NVSwitch within
a node, the rail NIC between nodes (a non-blocking fat tree is assumed between NICs, as Selene's,
Narayanan et al. SC'21 §5.1). Devices are GPU ids, node-major, as Megatron orders ranks; stages are
cut from them in order (``line``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING, ClassVar, TypeVar, overload

from simulator.hardware.spec import Dram, Network, network_kind
from simulator.network.topology import Drawing, Edge, Mark, Topology, topology_for

if TYPE_CHECKING:
    import numpy as np


@network_kind("cluster")
@dataclass(frozen=True, slots=True, kw_only=True)
class Cluster(Network):
    """GPU nodes on a switched fabric (Narayanan et al. SC'21 §5; NVIDIA DGX A100 datasheet).

    The fabric only: a GPU's HBM is the machine's :class:`~simulator.hardware.spec.Hbm`, its SMs and
    GEMM tiles its :class:`~simulator.hardware.spec.GemmTiling`.

    Attributes:
        nodes: number of nodes.
        gpus_per_node: GPUs per node, all on one switch (NVSwitch).
        intra_node_bandwidth_bytes_per_s: one direction of one GPU's switch port.
        inter_node_bandwidth_bytes_per_s: one direction of one GPU's NIC.
        intra_node_latency_s: one switch traversal.
        inter_node_latency_s: one fabric traversal.
        inter_node_efficiency: achieved fraction of a NIC's line rate, for collectives and p2p
            alike (0, 1]; on NIC resources it replaces the calibration's collective and p2p
            efficiencies, which are measured on NVLink.
    """

    device_noun: ClassVar[str] = "GPUs"
    nodes: int
    gpus_per_node: int
    intra_node_bandwidth_bytes_per_s: float
    inter_node_bandwidth_bytes_per_s: float
    intra_node_latency_s: float
    inter_node_latency_s: float
    inter_node_efficiency: float

    @property
    def num_devices(self) -> int:
        """GPUs in the cluster."""
        return self.nodes * self.gpus_per_node

    @property
    def devices_per_node(self) -> int:
        """GPUs of one node (one NVSwitch)."""
        return self.gpus_per_node


_V = TypeVar("_V")

PORTS = (("nvswitch up", "link"), ("nvswitch down", "link"), ("nic up", "nic"), ("nic down", "nic"))
"""Each GPU's resources, in their order: (name, kind). GPU ``g``'s port ``p`` is resource ``4g + p``."""
_NUM_PORTS = len(PORTS)


class _Ports(Sequence[_V]):
    """A figure of every resource of a cluster, computed on access from (GPU, port): a machine of
    131,072 GPUs is 524,288 resources, which no mapping reads all of."""

    def __init__(self, num_devices: int, value: Callable[[int, int], _V]) -> None:
        self._length, self._value = len(PORTS) * num_devices, value

    @classmethod
    def by_port(cls, num_devices: int, values: Sequence[_V]) -> _Ports[_V]:
        """A figure that depends on the port only, ``values[port]`` (read at once: a flow's
        build reads one per resource it loads, tens of thousands for a wide all-to-all)."""
        return _PortValues(num_devices, values)

    def __len__(self) -> int:
        return self._length

    @overload
    def __getitem__(self, index: int) -> _V: ...

    @overload
    def __getitem__(self, index: slice) -> Sequence[_V]: ...

    def __getitem__(self, index: int | slice) -> _V | Sequence[_V]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(self._length))]
        if not -self._length <= index < self._length:
            raise IndexError(f"resource {index} out of range({self._length})")
        gpu, port = divmod(index % self._length, len(PORTS))
        return self._value(gpu, port)


class _PortValues(_Ports[_V]):
    """:meth:`_Ports.by_port`: an in-range integer index is looked up directly."""

    def __init__(self, num_devices: int, values: Sequence[_V]) -> None:
        super().__init__(num_devices, lambda _gpu, port: values[port])
        self._values = tuple(values)

    def __getitem__(self, index):  # type: ignore[no-untyped-def]  # the overloads of _Ports
        if index.__class__ is int and 0 <= index < self._length:
            return self._values[index % _NUM_PORTS]
        return super().__getitem__(index)


@topology_for(Cluster)
class ClusterTopology(Topology):
    """GPUs behind per-GPU switch ports (NVSwitch) and per-GPU NICs (rail InfiniBand), described
    arithmetically: GPU ``g``'s ports are resources ``4g .. 4g + 3`` (:data:`PORTS`), nothing is
    built per GPU."""

    def __init__(self, cluster: Cluster, dram: Dram | None) -> None:
        """``dram`` is unused: a GPU's memory is its own HBM, timed inside compute."""
        super().__init__()
        self.cluster = cluster
        self.num_devices = cluster.num_devices
        intra, inter = cluster.intra_node_bandwidth_bytes_per_s, cluster.inter_node_bandwidth_bytes_per_s
        bandwidths, efficiencies = (intra, intra, inter, inter), (None, None, *[cluster.inter_node_efficiency] * 2)
        self._port_bandwidths, self._port_efficiencies = bandwidths, efficiencies
        self.bandwidth_bytes_per_s = _Ports.by_port(self.num_devices, bandwidths)
        self.efficiencies = _Ports.by_port(self.num_devices, efficiencies)
        self.kinds = _Ports.by_port(self.num_devices, [kind for _, kind in PORTS])
        self.names = _Ports(self.num_devices, lambda gpu, port: f"gpu{gpu} {PORTS[port][0]}")
        self.route = cache(self._route)  # type: ignore[method-assign]

    def occupancy(self, loads: dict[int, float], efficiency: float) -> dict[int, float]:
        """:meth:`Topology.occupancy` with each port's bandwidth and efficiency read once (the
        same products: a wide all-to-all's flows load thousands of ports)."""
        rates = [bandwidth * (own or efficiency)
                 for bandwidth, own in zip(self._port_bandwidths, self._port_efficiencies, strict=True)]
        ports = len(PORTS)
        return {r: load / rates[r % ports] for r, load in loads.items()}

    def bandwidths_and_kinds(self, resources: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`Topology.bandwidths_and_kinds`, each resource's read from its port (a port's
        figures indexed by the resources' ports)."""
        import numpy as np  # here: the command line starts without numpy (tests/palm_search/test_cli_simulate.py)

        ports = resources % len(PORTS)
        return (np.array(self._port_bandwidths, dtype=float)[ports],
                np.array([kind for _, kind in PORTS], dtype=str)[ports])

    def _port(self, gpu: int, port: int) -> int:
        return len(PORTS) * gpu + port

    def kind_counts(self) -> dict[str, int]:
        """Two NVSwitch ports (``link``) and two NIC directions (``nic``) per GPU."""
        return {"link": 2 * self.num_devices, "nic": 2 * self.num_devices}

    def resource_shift(self, device_shift: int) -> int | None:
        """A route's resources and latency depend only on its ends' ports and whether they share
        a node, so moving devices by whole nodes moves their resources by :data:`PORTS` per GPU
        (:meth:`Topology.resource_shift`); by part of a node: None."""
        return len(PORTS) * device_shift if device_shift % self.cluster.gpus_per_node == 0 else None

    def aligned_replicas(self, placement: str, replica_devices: int, stage_devices: int) -> int | None:
        """Every GPU has the same four ports and a route's resources and latency depend only on
        whether its ends share a node, so moving devices by whole nodes maps routes onto routes
        (:meth:`Topology.aligned_replicas`). Both orders are the GPU ids and stages walk their
        devices in order; with stages of whole nodes, replicas of whole nodes repeat every
        replica and replicas that divide a node every ``gpus_per_node / replica_devices``; any
        other cut (a replica or stage straddling a node boundary unevenly): None."""
        per_node = self.cluster.gpus_per_node
        if placement not in self.device_orders() or stage_devices % per_node:
            return None
        if replica_devices % per_node == 0:
            return 1
        return per_node // replica_devices if per_node % replica_devices == 0 else None

    def node_of(self, device: int) -> int:
        """The node holding GPU ``device`` (GPU ids are node-major, as Megatron orders ranks)."""
        return device // self.cluster.gpus_per_node

    def drawing(self, used_devices: int) -> Drawing:
        """The nodes the first ``used_devices`` GPUs fill, one row of GPUs per node; a GPU's
        NVSwitch ports colour its cell and its NIC its dot."""
        per_node = self.cluster.gpus_per_node
        nodes = -(-max(used_devices, 1) // per_node)
        shown = range(min(nodes * per_node, self.num_devices))
        marks = [Mark(self._port(g, port), "cell" if port < 2 else "dot", (g,))
                 for g in shown for port in range(len(PORTS))]
        return Drawing(width=per_node, height=nodes, positions=tuple((g % per_node, g // per_node) for g in shown),
                       boxes=tuple((0, n, per_node, 1) for n in range(nodes)), box_name="node",
                       marks=tuple(marks), legend="cell: NVSwitch ports, dot: NIC")

    def channel_edges(self, groups: tuple[tuple[int, ...], ...], edges: list[tuple[int, int]]) -> list[Edge]:
        """Ring edges as NCCL carries them between GPU nodes: one ring per NIC ("channels").

        An edge ``a -> b`` between two nodes is split over the ``k`` GPUs the group has on each of
        the two nodes, each pair sending ``1/k`` of the bytes through its own NIC, so a ring that
        has 8 GPUs per node uses the node's 8 NICs (NCCL builds as many rings as NICs; NVIDIA NCCL
        documentation, "NCCL_MIN_NCHANNELS" and topology detection).
        """
        per_node = self.cluster.gpus_per_node  # node_of, inline: tens of thousands of calls on wide groups
        by_node = {}
        for group in groups:
            members: dict[int, list[int]] = {}
            for d in group:
                members.setdefault(d // per_node, []).append(d)
            by_node.update({d: members for d in group})
        out: list[Edge] = []
        for a, b in edges:
            node_a, node_b = a // per_node, b // per_node
            if node_a == node_b:
                out.append((a, b))
                continue
            sources, targets = by_node[a][node_a], by_node[b][node_b]
            k = min(len(sources), len(targets))
            out += [(s, t, 1.0 / k) for s, t in zip(sources[:k], targets[:k], strict=True)]
        return out

    def _route(self, src: int, dst: int) -> tuple[tuple[int, ...], float]:
        if self.node_of(src) == self.node_of(dst):
            return (self._port(src, 0), self._port(dst, 1)), self.cluster.intra_node_latency_s
        return (self._port(src, 2), self._port(dst, 3)), self.cluster.inter_node_latency_s

    def route_loads(self, routes: Sequence[Edge]) -> tuple[dict[int, float], float, float]:
        """:meth:`Topology.route_loads` without a call per edge: an edge within a node crosses
        the source's NVSwitch up-port and the destination's down-port, else their NICs
        (:meth:`_route`); a DRAM stream (``(d, -1)``) crosses nothing (HBM is timed inside
        compute, :meth:`dram_route`). The same loads, in the same order, latency and edges."""
        per_node, intra, inter = self.cluster.gpus_per_node, self.cluster.intra_node_latency_s, \
            self.cluster.inter_node_latency_s
        loads: dict[int, float] = {}
        latency = edges = 0.0
        for route in routes:
            src, dst, share = route if len(route) == 3 else (*route, 1.0)
            edges += share
            if dst < 0:
                continue
            if src // per_node == dst // per_node:
                up, down, hop = _NUM_PORTS * src, _NUM_PORTS * dst + 1, intra
            else:
                up, down, hop = _NUM_PORTS * src + 2, _NUM_PORTS * dst + 3, inter
            loads[up] = loads.get(up, 0.0) + share
            loads[down] = loads.get(down, 0.0) + share
            if hop > latency:
                latency = hop
        return loads, latency, edges

    def all_pairs_loads(self, groups: tuple[tuple[int, ...], ...]) -> tuple[dict[int, float], float, float]:
        """:meth:`Topology.all_pairs_loads` counted without routing each pair (an all-to-all over
        64 GPUs is 4,032 of them): a pair on one node crosses the source's NVSwitch up-port and
        the destination's down-port, else their NICs (:meth:`_route`). The same loads, in the
        order the pairs (source-major) first cross them, and latency."""
        import numpy as np  # here: the command line starts without numpy (tests/palm_search/test_cli_simulate.py)

        crossed = []
        for group in groups:
            gpus = np.asarray(group, dtype=np.int64)
            node = gpus // self.cluster.gpus_per_node
            same = node[:, None] == node[None, :]
            up = len(PORTS) * gpus[:, None] + np.where(same, 0, 2)
            down = len(PORTS) * gpus[None, :] + np.where(same, 1, 3)
            crossed.append(np.stack([up, down], axis=-1)[~np.eye(len(gpus), dtype=bool)].reshape(-1))
        sequence = np.concatenate(crossed) if crossed else np.zeros(0, dtype=np.int64)
        resources, first, counts = np.unique(sequence, return_index=True, return_counts=True)
        order = np.argsort(first, kind="stable")
        loads = dict(zip(resources[order].tolist(), counts[order].astype(float).tolist(), strict=True))
        kinds = set((resources % len(PORTS)).tolist())
        latency = max([self.cluster.intra_node_latency_s] * bool(kinds & {0, 1})
                      + [self.cluster.inter_node_latency_s] * bool(kinds & {2, 3}), default=0.0)
        return loads, latency, float(len(sequence) // 2)

    def dram_route(self, device: int) -> tuple[tuple[int, ...], float]:
        """GPU memory is local HBM, timed inside compute: no network resource."""
        return (), 0.0
