"""Network backends: when may a flow start, given what else is on its resources.

One narrow interface, :meth:`Network.book`, used by the engine for every transfer:

* :class:`AnalyticalNetwork`: PALM Eq. 2 without the contention term; a flow starts when asked.
* :class:`ContentionNetwork`: PALM's exclusive-link model (§IV-C: "treating the link as an
  exclusive resource during execution"; DRAM ports likewise, Eq. 5). Each contended resource
  keeps a calendar of busy intervals; a flow starts at the earliest time at which all its booked
  resources are free for its whole duration. Resources used by a single flow cannot conflict and
  are not booked; a flow that can overlap itself (p2p messages) books a private channel.
"""

from __future__ import annotations

from bisect import bisect_right, insort

from simulator.collectives import Flow

_PRUNE_AT = 64


class AnalyticalNetwork:
    """No contention: every flow starts when it is ready (PALM Eq. 2 without contention)."""

    name = "analytical"

    def book(self, flow: Flow, earliest_s: float, duration_s: float, now_s: float) -> float:
        """Start time (s) of ``flow`` lasting ``duration_s``, ready at ``earliest_s``."""
        return earliest_s

    def uses_contention(self) -> bool:
        """Whether bookings can be delayed (tells the engine to set up booked resources)."""
        return False


class ContentionNetwork(AnalyticalNetwork):
    """Exclusive resources with first-fit calendars (PALM §IV-C, Eqs. 2-5)."""

    name = "contention"

    def __init__(self) -> None:
        self._starts: dict[int, list[float]] = {}
        self._ends: dict[int, list[float]] = {}

    def uses_contention(self) -> bool:
        return True

    def _fit(self, resource: int, start: float, duration: float) -> float:
        starts, ends = self._starts[resource], self._ends[resource]
        i = bisect_right(ends, start)
        while i < len(starts) and starts[i] < start + duration:
            start = max(start, ends[i])
            i += 1
        return start

    def book(self, flow: Flow, earliest_s: float, duration_s: float, now_s: float) -> float:
        if not flow.booked or duration_s <= 0.0:
            return earliest_s
        for r in flow.booked:
            if r not in self._starts:
                self._starts[r], self._ends[r] = [], []
            self._prune(r, now_s)
        start = earliest_s
        moved = True
        while moved:
            moved = False
            for r in flow.booked:
                fitted = self._fit(r, start, duration_s)
                moved |= fitted > start
                start = fitted
        for r in flow.booked:
            insort(self._starts[r], start)
            insort(self._ends[r], start + duration_s)
        return start

    def _prune(self, resource: int, now_s: float) -> None:
        ends = self._ends[resource]
        if len(ends) > _PRUNE_AT:
            k = bisect_right(ends, now_s)
            del ends[:k]
            del self._starts[resource][:k]


def network_backend(name: str) -> AnalyticalNetwork:
    """A fresh backend by name, ``analytical`` or ``contention``.

    Raises:
        InputError: unknown name.
    """
    from simulator.errors import InputError

    backends = {"analytical": AnalyticalNetwork, "contention": ContentionNetwork}
    if name not in backends:
        raise InputError(f"network backend must be one of {sorted(backends)}, got {name!r}")
    return backends[name]()
