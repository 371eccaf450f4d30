"""Identical data-parallel replicas, simulated once.

A pipeline stage is one process for all its devices (Virtual Tile Aggregation, PALM §IV-A), and
its flows cover every replica's groups, so the cost of building and timing them grows with the
data-parallel degree although the replicas do the same work. When the replicas load the machine
alike, the flows of the first ``w`` replicas stand for all ``dp`` (each counted ``dp / w``
times, :attr:`~simulator.placement.StagePlacement.copies`): their data-parallel rings keep the
whole group's size in the ring formulas and run over the real routes between the replicas
built, so they meet the tensor-parallel, p2p and DRAM traffic of those replicas on the links
they share as every replica's would.

Such a window times every pass, send and update exactly as all replicas do when the two sets of
flows have the same :func:`~simulator.timing.flows.flow_signature` (the window's counted
``dp / w`` times): each flow's latency and seconds per byte, and every distinct column of
loads a resource carries, with how many resources carry it. A machine that knows its own
symmetry (:meth:`~simulator.network.topology.Topology.aligned_replicas`, a GPU cluster) says
after how many replicas ``P`` it repeats; a window of ``w = P c`` replicas (``c`` the least
divisor above 1 of ``dp / P``) then holds every kind of ring edge, the one closing it included,
without building the rest of the machine (``tests/simulator/test_replicas.py`` compares the
signatures, and the results with every replica's, on small clusters). Any other machine, or a
mapping the rule does not cover (a strided layout, explicit stage devices, stages or replicas
straddling nodes unevenly), is simulated whole, and the result's ``replicas_simulated`` says so:
on a mesh the rings joining the replicas run over different links than a window's would, and
comparing the two costs what simulating them all does.

Hybrid sharding (shard groups smaller than the data-parallel group) and expert parallelism (its
all-to-all groups and expert-gradient rings are carved across the replicas) are always simulated
whole.
"""

from __future__ import annotations

from functools import lru_cache

from simulator.network.topology import Topology
from simulator.strategy import Strategy, projection


def simulated_replicas(topology: Topology, strategy: Strategy) -> int:
    """How many of ``strategy``'s ``dp`` data-parallel replicas the simulation builds flows for
    (a divisor of ``dp``; ``dp`` when they are not known identical)."""
    return _replicas(topology, projection(strategy, placed=True))


@lru_cache(maxsize=4096)
def _replicas(topology: Topology, strategy: Strategy) -> int:
    dp = strategy.dp
    if strategy.zero_shards < strategy.weight_replicas or strategy.ep > 1:
        return dp
    period = None
    if strategy.stage_devices is None and strategy.group_layout == "compact":
        period = topology.aligned_replicas(strategy.placement, strategy.tp * strategy.cp, strategy.devices_per_stage)
    if period is None or dp % period:
        return dp
    return period * _least_divisor(dp // period)


def _least_divisor(n: int) -> int:
    """The least divisor of ``n`` above 1 (``n`` itself for a prime; 1 for 1)."""
    return next((d for d in range(2, int(n ** 0.5) + 1) if n % d == 0), n)
