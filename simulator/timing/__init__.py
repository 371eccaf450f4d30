"""Timing models: how long the engine's passes, sends and gradient updates take.

The engine (:mod:`simulator.engine`) walks the schedule; one timing model, chosen by name once
(:data:`TIMINGS`), times what it walks through the one protocol :class:`Timing`:

* ``analytical`` and ``contention``: whole-pass booking (:mod:`simulator.timing.booking`) on a
  :class:`~simulator.network.backends.NetworkBackend` (PALM Eq. 2 without contention; PALM's
  exclusive links and DRAM ports, §IV-C).
* ``sharing``: bandwidth sharing (:mod:`simulator.timing.sharing`), links and DRAM ports shared
  max-min fairly between the flows on them (:mod:`simulator.network.sharing`).

The closed form (:mod:`simulator.timing.vectorised`, over arrays of (plan, placement) pairs; the
``estimate`` network evaluates it on one pair, :mod:`simulator.timing.closed_form`) runs no
events: it adds up the times every model gives a pass, send and update when nothing else runs.
Times are seconds of simulated time (SimPy's ``env.now``).
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Sequence
from typing import Any, Protocol

import simpy

from simulator.costs import PassCost
from simulator.errors import InputError
from simulator.network.backends import AnalyticalNetwork, ContentionNetwork
from simulator.network.collectives import Flow
from simulator.network.sharing import SharingNetwork
from simulator.timing.booking import BookingTiming
from simulator.timing.machine import Machine
from simulator.timing.sharing import SharingTiming


class Timing(Protocol):
    """How long what the engine walks takes; every operation runs in ``machine.env`` from now and
    keeps its stage's times in ``machine.stats``."""

    def start(self) -> None:
        """A run starts in ``machine.env`` (:meth:`Machine.start` has run): forget the last one."""
        ...

    def run_pass(self, i: int, cost: PassCost, microbatch: int) -> Generator[simpy.Event, Any, None]:
        """Run a pass of stage ``i`` (its compute, DRAM stream, TP collectives and ZeRO-3's
        exposed data-parallel collectives); the generator ends when the pass ends."""
        ...

    def send(self, i: int, flow: Flow, dst: int, kind: str, microbatch: int, size_bytes: float,
             message: simpy.Event) -> float | simpy.Event:
        """Send ``size_bytes`` from stage ``i`` to stage ``dst`` on p2p ``flow`` and regroup it in
        the receiving TP group; ``message`` succeeds once both end. Returns when the transfer
        itself ends (s, or an event), what a blocking sender waits for."""
        ...

    def delivery(self, message: simpy.Event) -> simpy.Event:
        """What the receiver of a sent ``message`` (:meth:`send` has run) waits on: ``message``,
        or an event that ends with the send and stands for it (one event fewer)."""
        ...

    def update(self, i: int, flow: Flow, duration_s: float, latency_s: float,
               steps: Sequence[PassCost]) -> Generator[simpy.Event, Any, tuple[float, float]]:
        """Run stage ``i``'s data-parallel collectives (``duration_s`` alone, ``latency_s`` of it
        latency) on ``flow``, then its optimizer ``steps``; returns when the collectives started
        and ended (s)."""
        ...


TIMINGS: dict[str, Callable[[Machine], Timing]] = {
    AnalyticalNetwork.name: lambda machine: BookingTiming(machine, AnalyticalNetwork()),
    ContentionNetwork.name: lambda machine: BookingTiming(machine, ContentionNetwork()),
    SharingNetwork.name: lambda machine: SharingTiming(machine, SharingNetwork()),
}
"""Timing model name (the ``network`` of :func:`simulator.simulate`) -> a factory of fresh
models on a machine (a model keeps state for one engine)."""


def timing_model(name: str, machine: Machine) -> Timing:
    """A fresh timing model by name (:data:`TIMINGS`) on ``machine``.

    Raises:
        InputError: unknown name.
    """
    if name not in TIMINGS:
        raise InputError(f"network must be one of {sorted(TIMINGS)}, got {name!r}")
    return TIMINGS[name](machine)


__all__ = ["TIMINGS", "BookingTiming", "Machine", "SharingTiming", "Timing", "timing_model"]
