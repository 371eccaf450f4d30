"""The network: topology (routes and resources), the backends that time traffic on it, and the
collectives as flows.

Each kind of machine is one module holding its :class:`~simulator.hardware.spec.Network` record
and its :class:`~simulator.network.topology.Topology`; importing this package registers them all
(:data:`~simulator.hardware.spec.NETWORK_KINDS`).
"""

from simulator.network import cluster, mesh, torus

__all__ = ["cluster", "mesh", "torus"]
