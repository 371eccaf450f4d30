"""Where each pipeline stage and communication group sits on the machine.

Placement of stages follows PALM §V-B (Fig. 8): a strategy names one of the machine's device
orders (:meth:`~simulator.network.topology.Topology.device_orders`: ``line`` and ``s-shape`` as in
the paper, and on a mesh their mirrors, snakes and a Hilbert curve, see
:mod:`simulator.network.mesh`), cut into ``pp`` consecutive stages of ``tp * cp * dp`` devices; or
``explicit`` takes the user's device lists. On a mesh of several wafers the order covers all
wafers as one grid (``wafer_stages = "span"``) or is walked wafer by wafer so that no stage crosses
a wafer boundary (``"within"``, legal when none would: :func:`simulator.legality.wafer_straddle`).

Inside a stage (PALM Fig. 8, comm1 vs comm2): ``compact`` TP groups take consecutive devices of
the stage, ``strided`` ones take every ``dp``-th. ``group_order`` orients the walk inside a stage
(:meth:`~simulator.network.topology.Topology.stage_walk`: on a mesh ``tp-major`` walks x first,
``dp-major`` y first). Each group is put in ring order (:meth:`~simulator.network.topology.Topology.ring_order`).
On a GPU cluster devices are GPU ids, node-major, as Megatron orders ranks (TP fastest, then DP,
then PP).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

from simulator.network.mesh import MeshTopology
from simulator.network.topology import Topology
from simulator.strategy import Strategy, projection


@dataclass(frozen=True, slots=True)
class StagePlacement:
    """Devices of one pipeline stage and its communication groups.

    Attributes:
        devices: the stage's ``tp * cp * dp`` device ids.
        tp_groups: ``cp * dp`` groups of ``tp`` devices, each in ring order.
        dp_groups: ``tp`` groups of the ``dp * cp`` devices holding the same weights (context-
            parallel ranks reduce gradients with the data-parallel ones), each in ring order;
            under hybrid sharding (``Strategy.shard_group_size`` ``F``) the ``tp dp cp / F``
            shard groups of ``F`` consecutive such ranks instead.
        replica_groups: under hybrid sharding, the ``tp F`` groups of the ``dp cp / F`` ranks
            that hold the same shard (every ``F``-th rank), in ring order; else empty.
    """

    devices: tuple[int, ...]
    tp_groups: tuple[tuple[int, ...], ...]
    dp_groups: tuple[tuple[int, ...], ...]
    replica_groups: tuple[tuple[int, ...], ...] = ()
    cp_groups: tuple[tuple[int, ...], ...] = ()
    """Context parallelism's ``tp dp`` groups of ``cp`` devices (consecutive ranks of a
    weight-replica group, as Megatron-LM orders TP, then CP, then DP), in ring order; empty for
    ``cp == 1``."""
    copies: int = 1
    """How many copies of the data-parallel replicas listed here the stage has (1: all its
    replicas are listed): a placement of the first ``dp / copies`` replicas only
    (:mod:`simulator.replicas`), whose devices and groups list those, while each of its
    ``dp_groups`` stands for a group ``copies`` times as large."""

    @property
    def dp_group_size(self) -> int:
        """Devices of one whole data-parallel group (those listed times :attr:`copies`)."""
        return len(self.dp_groups[0]) * self.copies
    ep_groups: tuple[tuple[int, ...], ...] = ()
    """Expert parallelism's ``tp dp cp / ep`` groups of ``ep`` devices, in rank order (the
    all-to-all connects every pair); empty for ``ep == 1``. With expert tensor parallelism
    ``etp = tp`` (the default) each is ``ep`` consecutive ranks of a weight-replica group
    (Megatron-Core's ``tp-cp-ep-dp`` order); else ``ep`` ranks ``etp`` apart
    (:func:`_expert_groups`)."""
    expert_dp_groups: tuple[tuple[int, ...], ...] = ()
    """The ``ep etp`` groups of the ``tp dp cp / (ep etp)`` ranks holding the same experts (every
    ``ep etp``-th rank of the stage), in ring order; empty for ``ep == 1``."""

    def shifted(self, device_shift: int) -> StagePlacement:
        """This placement with every device id ``device_shift`` further along."""
        move = device_shift.__add__

        def groups(of: tuple[tuple[int, ...], ...]) -> tuple[tuple[int, ...], ...]:
            return tuple(tuple(map(move, group)) for group in of)

        return StagePlacement(
            devices=tuple(map(move, self.devices)), tp_groups=groups(self.tp_groups),
            dp_groups=groups(self.dp_groups), replica_groups=groups(self.replica_groups),
            cp_groups=groups(self.cp_groups), copies=self.copies, ep_groups=groups(self.ep_groups),
            expert_dp_groups=groups(self.expert_dp_groups))


WALK_ORDERED: tuple[str, ...] = ("line", "s-shape")
"""Orders whose stages keep the walk order inside a stage: PALM's two (p2p partners pair by their
position along the walk). Stages cut from any other order list their devices by id, as the search
has always proposed them."""


def stage_devices(topology: Topology, strategy: Strategy) -> tuple[tuple[int, ...], ...]:
    """The devices of each pipeline stage: the strategy's explicit lists, or ``pp`` consecutive
    runs of ``tp * dp`` devices of its named order (:meth:`Topology.device_order`; walked wafer
    by wafer under ``wafer_stages = "within"``).

    Raises:
        InputError: the machine has no order of that name.
    """
    return _stage_devices(topology, projection(strategy, placed=True))


@lru_cache(maxsize=256)
def _stage_devices(topology: Topology, strategy: Strategy) -> tuple[tuple[int, ...], ...]:
    """:func:`stage_devices` of the fields it reads (a large machine's stages are long tuples)."""
    if strategy.stage_devices is not None:
        return strategy.stage_devices
    order = topology.device_order(strategy.placement, within_wafers=strategy.wafer_stages == "within")
    size = strategy.devices_per_stage
    order = _even_over_dies(topology, order, size * strategy.pp)
    stages = [tuple(order[i * size:(i + 1) * size]) for i in range(strategy.pp)]
    if strategy.placement in WALK_ORDERED:
        return tuple(stages)
    return tuple(tuple(sorted(stage)) for stage in stages)


def _even_over_dies(topology: Topology, order: Sequence[int], used: int) -> Sequence[int]:
    """``order`` with the same number of devices kept on every die, where a mapping of ``used``
    devices needs every die of a mesh whose collectives run within each die, then across the dies
    (:attr:`~simulator.network.mesh.Mesh.die_collectives` ``hierarchical``: Tenstorrent's
    multi-chip boxes) but not all of their cores: which cores idle is then free, and an equal
    share per chip is what keeps a collective over the chips two-level
    (:meth:`~simulator.network.mesh.MeshTopology.collective_levels` needs as many cores on each
    die; 512 of four Blackhole chips' 4 x 130 cores run 128 on each, as tt-metal runs its ops on a
    sub-grid of a chip). ``order`` unchanged elsewhere."""
    if not isinstance(topology, MeshTopology) or topology.mesh.die_collectives != "hierarchical":
        return order
    dies = topology.num_devices // topology.mesh.devices_per_node
    if used >= topology.num_devices or used % dies or used <= topology.num_devices - topology.mesh.devices_per_node:
        return order
    kept: dict[int, int] = {}
    even = []
    for device in order:
        die = topology.node_of(device)
        if kept.get(die, 0) < used // dies:
            kept[die] = kept.get(die, 0) + 1
            even.append(device)
    return even


def place(topology: Topology, strategy: Strategy, replicas: int | None = None) -> tuple[StagePlacement, ...]:
    """Devices and comm groups of every pipeline stage of a legal plan
    (:func:`simulator.legality.check_plan`), of its first ``replicas`` data-parallel replicas
    (a divisor of ``dp``; default all, and all under hybrid sharding).

    Raises:
        InputError: the machine has no device order named by the strategy's ``placement``.
    """
    return _placed(topology, projection(strategy, placed=True), replicas or strategy.dp)


@lru_cache(maxsize=4096)
def _placed(topology: Topology, strategy: Strategy, replicas: int) -> tuple[StagePlacement, ...]:
    """:func:`place` of the strategy's fields it reads (``placed`` in :func:`strategy_fields`: a
    search revisits one placement with many plans)."""
    return tuple(_stage(topology, d, strategy, replicas) for d in _stage_devices(topology, strategy))


def _stage(topology: Topology, devices: tuple[int, ...], strategy: Strategy, replicas: int) -> StagePlacement:
    ordered = topology.stage_walk(devices, strategy.group_order)
    tp, dp, cp = strategy.tp, strategy.weight_replicas, strategy.cp
    kept = dp if strategy.zero_shards < dp else replicas * cp
    if strategy.group_layout == "compact":
        tp_groups = [ordered[i * tp:(i + 1) * tp] for i in range(kept)]
    else:
        tp_groups = [ordered[i::dp] for i in range(kept)]
    dp_groups = [tuple(g[r] for g in tp_groups) for r in range(tp)]
    cp_groups = [g[k:k + cp] for g in dp_groups for k in range(0, kept, cp)] if cp > 1 else []
    ep_groups, expert_dp_groups = _expert_groups(tp_groups, strategy.ep, strategy.expert_tp)
    shards, replica_groups = strategy.zero_shards, []
    if shards < dp:
        replica_groups = [g[k::shards] for g in dp_groups for k in range(shards)]
        dp_groups = [g[k:k + shards] for g in dp_groups for k in range(0, dp, shards)]
    return StagePlacement(
        devices=devices if kept == dp else _listed(devices, ordered, tp_groups),
        tp_groups=tuple(topology.ring_order(tuple(g)) for g in tp_groups),
        dp_groups=tuple(topology.ring_order(g) for g in dp_groups),
        replica_groups=tuple(topology.ring_order(g) for g in replica_groups),
        cp_groups=tuple(topology.ring_order(g) for g in cp_groups),
        copies=dp // kept,
        ep_groups=tuple(ep_groups),
        expert_dp_groups=tuple(topology.ring_order(g) for g in expert_dp_groups),
    )


def _expert_groups(tp_groups: list[list[int]], ep: int, etp: int) -> tuple[list[tuple[int, ...]],
                                                                         list[tuple[int, ...]]]:
    """(EP groups, expert-data-parallel groups) of a stage whose ranks, TP fastest, are those of
    ``tp_groups`` in order: Megatron-Core's expert rank order ``etp-ep-edp``
    (``parallel_state.initialize_model_parallel``, its expert ``RankGenerator``) makes an EP group
    of ``ep`` ranks ``etp`` apart within a block of ``ep * etp``, and an expert-data-parallel
    group of the ranks ``ep * etp`` apart. Both empty for ``ep == 1``."""
    if ep == 1:
        return [], []
    ranks = [d for g in tp_groups for d in g]
    block = ep * etp
    ep_groups = [tuple(ranks[b + j:b + block:etp]) for j in range(etp) for b in range(0, len(ranks), block)]
    expert_dp_groups = [tuple(ranks[j + e * etp::block]) for j in range(etp) for e in range(ep)]
    return ep_groups, expert_dp_groups


def _listed(devices: tuple[int, ...], ordered: list[int], tp_groups: list[list[int]]) -> tuple[int, ...]:
    """The stage's ``devices`` that ``tp_groups`` hold, in the stage's order (the first ones
    when the groups took a prefix of the walk that is a prefix of the devices: no pass over a
    large stage)."""
    held = {d for g in tp_groups for d in g}
    n = len(held)
    if devices[:n] == tuple(ordered[:n]) and held == set(ordered[:n]):
        return devices[:n]
    return tuple(d for d in devices if d in held)
