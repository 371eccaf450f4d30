"""The network: topology (routes and resources), the backends that time traffic on it, and the
collectives as flows.

Each kind of machine is one module holding its :class:`~simulator.hardware.spec.Network` record
and its :class:`~simulator.network.topology.Topology`; importing this package registers them all
(:data:`~simulator.hardware.spec.NETWORK_KINDS`).

A public module of :mod:`simulator` for :func:`topology_of` (a machine's routes, resources and
named device orders); code outside the simulator imports it from here.
"""

from simulator.network import cluster, mesh, torus
from simulator.network.topology import Topology, topology_of

__all__ = ["Topology", "cluster", "mesh", "topology_of", "torus"]
