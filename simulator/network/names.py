"""The network models a simulation may run, by name: the one list of them.

``network`` of :func:`simulator.simulate`, a study file's ``network`` key and the command line's
``--network`` take these names. Each timing model registers under its name
(:data:`simulator.timing.TIMINGS`, whose backends' ``name`` is the constant here; a test checks
the registry and :data:`NETWORKS` agree); ``estimate`` runs no events
(:mod:`simulator.timing.closed_form`). This module imports nothing, so a command line can list
the names without loading SimPy.
"""

from __future__ import annotations

SHARING = "sharing"
CONTENTION = "contention"
ANALYTICAL = "analytical"
ESTIMATE = "estimate"

NETWORKS: dict[str, str] = {
    SHARING: "links' and DRAM ports' bandwidth shared max-min fairly",
    CONTENTION: "PALM: links and DRAM ports held exclusively",
    ANALYTICAL: "no contention",
    ESTIMATE: "closed form, no events",
}
"""Network model name -> what it models, in the order a help text lists them.

``sharing``: SimGrid's flow-level max-min fair sharing (:mod:`simulator.network.sharing`);
``contention``: PALM's exclusive links and DRAM ports (Fang et al., arXiv 2406.03868, §IV-C,
Eqs. 2-5); ``analytical``: PALM Eq. 2 without the contention term; ``estimate``: the closed
form bounded by the busiest resource (the search's screening fidelity)."""

DEFAULT_NETWORK = SHARING
"""Links and DRAM ports shared max-min fairly; ``contention`` is PALM's exclusive booking, kept to
reproduce the paper."""
