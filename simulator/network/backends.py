"""Network backends: when may a flow start, given what else is on its resources.

One narrow interface, :class:`NetworkBackend`, through which whole-pass booking
(:mod:`simulator.timing.booking`) books every transfer; the backends register by name in
:data:`BACKENDS` (a contract test runs every one):

* :class:`AnalyticalNetwork`: PALM Eq. 2 without the contention term; a flow starts when asked.
* :class:`ContentionNetwork`: PALM's exclusive-link model (§IV-C: "treating the link as an
  exclusive resource during execution"; DRAM ports likewise, Eq. 5). Each contended resource
  keeps a calendar of busy intervals; a flow starts at the earliest time at which all its booked
  resources are free for its whole duration. Resources used by a single flow cannot conflict and
  are not booked; a flow that can overlap itself (p2p messages) books a private channel.
"""

from __future__ import annotations

from bisect import bisect_right, insort
from collections.abc import Callable
from typing import Protocol

from simulator.errors import InputError
from simulator.network.collectives import Flow
from simulator.network.names import ANALYTICAL, CONTENTION

_PRUNE_EVERY = 512


class NetworkBackend(Protocol):
    """When a flow may start. ``name`` is the backend's registry name."""

    name: str

    def book(self, flow: Flow, earliest_s: float, duration_s: float, now_s: float) -> float:
        """Start time (s) of ``flow`` lasting ``duration_s``, ready at ``earliest_s`` (never earlier);
        ``now_s`` is the simulation time, before which nothing new can be booked."""
        ...

    def uses_contention(self) -> bool:
        """Whether bookings can be delayed (tells the engine to set up booked resources)."""
        ...

    def reset(self) -> None:
        """Forget every booking (a new engine run starts)."""
        ...


class AnalyticalNetwork:
    """No contention: every flow starts when it is ready (PALM Eq. 2 without contention)."""

    name = ANALYTICAL

    def book(self, flow: Flow, earliest_s: float, duration_s: float, now_s: float) -> float:
        """Start time (s) of ``flow`` lasting ``duration_s``, ready at ``earliest_s``."""
        return earliest_s

    def uses_contention(self) -> bool:
        """Never: flows do not wait for each other."""
        return False

    def reset(self) -> None:
        """Nothing to forget."""


class ContentionNetwork:
    """Exclusive resources with first-fit calendars (PALM §IV-C, Eqs. 2-5)."""

    name = CONTENTION

    def __init__(self) -> None:
        self._calendars: dict[int, tuple[list[float], list[float]]] = {}
        self._of_flow: dict[int, list[tuple[list[float], list[float]]]] = {}
        self._bookings = 0

    def reset(self) -> None:
        """Empty every calendar."""
        self._calendars.clear()
        self._of_flow.clear()
        self._bookings = 0

    def uses_contention(self) -> bool:
        """Always: flows wait for their booked resources."""
        return True

    def _flow_calendars(self, flow: Flow) -> list[tuple[list[float], list[float]]]:
        calendars = self._of_flow.get(id(flow))
        if calendars is None:
            calendars = [self._calendars.setdefault(r, ([], [])) for r in flow.booked]
            self._of_flow[id(flow)] = calendars
        return calendars

    def book(self, flow: Flow, earliest_s: float, duration_s: float, now_s: float) -> float:
        if not flow.booked or duration_s <= 0.0:
            return earliest_s
        calendars = self._flow_calendars(flow)
        start, moved = earliest_s, True
        if all(not ends or ends[-1] <= start for _, ends in calendars):
            for starts, ends in calendars:  # after everything booked (most bookings): what insort does
                starts.append(start)
                ends.append(start + duration_s)
            return self._booked(start, now_s)
        while moved:
            moved = False
            for starts, ends in calendars:
                i, n = bisect_right(ends, start), len(starts)
                while i < n and starts[i] < start + duration_s:
                    start, moved = ends[i], True
                    i += 1
        for starts, ends in calendars:
            insort(starts, start)
            insort(ends, start + duration_s)
        return self._booked(start, now_s)

    def _booked(self, start: float, now_s: float) -> float:
        """Count a booking starting at ``start``, prune now and then, and return ``start``."""
        self._bookings += 1
        if self._bookings % _PRUNE_EVERY == 0:
            self._prune(now_s)
        return start

    def _prune(self, now_s: float) -> None:
        """Forget intervals that ended before ``now_s`` (no later booking can reach them)."""
        for starts, ends in self._calendars.values():
            k = bisect_right(ends, now_s)
            del starts[:k], ends[:k]


BACKENDS: dict[str, Callable[[], NetworkBackend]] = {
    AnalyticalNetwork.name: AnalyticalNetwork, ContentionNetwork.name: ContentionNetwork,
}
"""Backend name -> a factory of fresh backends (a backend keeps state for one engine run)."""


def network_backend(name: str) -> NetworkBackend:
    """A fresh backend by name (:data:`BACKENDS`).

    Raises:
        InputError: unknown name.
    """
    if name not in BACKENDS:
        raise InputError(f"network backend must be one of {sorted(BACKENDS)}, got {name!r}")
    return BACKENDS[name]()
