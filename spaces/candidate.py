"""A point of the search: the machine and the mapping on it.

:func:`spaces.training.suggest_candidate` draws one from a trial (its steps decide the strategy's
fields, which are checked once); the driver caches, tells, stores and replays candidates. The
hardware is part of the point, so a search over chips (hardware and mapping co-design) proposes
candidates the same way.
"""

from __future__ import annotations

from dataclasses import dataclass

from simulator import Hardware, Strategy


@dataclass(frozen=True, slots=True, kw_only=True)
class Candidate:
    """One search point: ``strategy`` on ``hardware``.

    Attributes:
        hardware: the machine.
        strategy: the mapping.
    """

    hardware: Hardware
    strategy: Strategy
