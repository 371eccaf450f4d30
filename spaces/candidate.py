"""A point of the search: the machine and the mapping on it.

Every ``suggest_*`` step of :mod:`spaces.training` takes a :class:`Candidate` and returns a new one
with the fields it decides (candidates are immutable); the driver caches, tells, stores and
replays candidates. The hardware is part of the point, so a search over chips (hardware and
mapping co-design) proposes candidates the same way.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from simulator.hardware.spec import Hardware
from simulator.strategy import Strategy


@dataclass(frozen=True, slots=True, kw_only=True)
class Candidate:
    """One search point: ``strategy`` on ``hardware``.

    Attributes:
        hardware: the machine.
        strategy: the mapping.
    """

    hardware: Hardware
    strategy: Strategy

    def with_fields(self, **fields: object) -> Candidate:
        """This candidate with the given ``Strategy`` fields changed.

        Raises:
            InputError: the fields do not make a valid ``Strategy``.
        """
        return replace(self, strategy=self.strategy.with_fields(**fields))
