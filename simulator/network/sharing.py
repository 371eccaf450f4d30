"""Bandwidth sharing: a flow crossing a busy link slows down instead of waiting for it.

The flow-level model of SimGrid (Velho, Schnorr, Casanova and Legrand, "On the validity of
flow-level TCP network models for grid and cloud simulations", ACM TOMACS 23(4), 2013, §3;
Casanova et al., JPDC 74(10), 2014, §4.1): every edge of every active transfer is one connection,
and the connections share each resource max-min fairly, by progressive filling (Bertsekas and
Gallager, *Data Networks*, 2nd ed., §6.5.2). Rates are recomputed whenever a transfer starts or
ends, and a transfer ends when its bytes are moved at the rates it had.

A transfer of flow ``f`` (:class:`~simulator.network.collectives.Flow`) moving ``x`` bytes per edge
at rate ``rho_f`` (bytes per edge per second) keeps resource ``r`` busy a fraction
``rho_f * occupancy_f[r]`` of the time, so the rates obey, for every resource,

    sum over active transfers f of rho_f * occupancy_f[r] <= 1,

and a transfer alone runs at ``1 / seconds_per_byte``: its duration is then PALM Eq. 2's, so with
no shared resource this backend gives exactly the analytical backend's times. Latency (the route's,
per step) is not bandwidth and is added after the bytes, unshared.

A pass is a train of transfers back to back (:meth:`SharingNetwork.sequence`). While none of the
flows it uses meets another live transfer, its phases run at their alone rates and need no event
each: the train is one timer. The first transfer that would share with it turns the train back
into its current transfer and the phases after it (*materialises* it), exactly the state
phase-by-phase transfers would have reached, so the result equals the phase-by-phase one. A
train started beside another whose flows share a constraint with its own materialises it only if
two of their phases on such flows would move bytes at the same time (both timed alone, so known
in advance); otherwise both run alone, as phase by phase they would. A transfer's end is not
known in advance (it may be slowed), so a transfer materialises every train beside it.

Only resources that two flows use can bind more than one transfer; each group of resources used
by exactly the same flows keeps only its undominated occupancy vectors, and instances of one flow
share its own bottleneck (a constraint per flow with occupancy ``seconds_per_byte``). Max-min
allocations decompose over connected components, so a start or an end refills only the component
of transfers it touches (found among the flows with transfers, which the network keeps as a set).
A transfer's event is fired by its timer; when no other event is due then, the step after would
process it next, so the network calls its waiters at once instead (:func:`_fire`): the same order
of events, one SimPy step fewer.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache, partial
from itertools import accumulate, chain
from operator import add
from typing import NamedTuple, cast

import numpy as np
import simpy

from simulator.network.collectives import Flow
from simulator.network.names import SHARING

_TIGHT = 1e-12
"""Relative slack under which a constraint counts as saturated (floating-point noise)."""


@dataclass(slots=True, eq=False)
class Transfer:
    """One active transfer: ``remaining`` bytes per edge moving at ``rate`` since ``since_s``, so
    its bytes have all moved at ``fluid_end_s``; ``alone`` in its component when last scheduled.
    ``attached``: every waiter of ``done`` attached when the transfer started (the network's own
    transfers), so its waiters may be called without ``done`` being triggered (:func:`_fire`)."""

    flow: int
    remaining: float
    latency_s: float
    not_before_s: float
    done: simpy.Event
    rate: float = 0.0
    since_s: float = 0.0
    version: int = 0
    alone: bool = False
    fluid_end_s: float = float("inf")
    attached: bool = False


Phase = tuple[Flow | None, float, float, float]
"""One phase of a :meth:`SharingNetwork.sequence`: (flow, or None for a plain wait; duration alone
s; latency part of it s; not before s after the phase starts)."""

PhaseTimes = tuple[float, float, float]
"""When a phase started, its bytes arrived and it ended (s)."""


@dataclass(frozen=True, slots=True, eq=False)
class Plan:
    """A :meth:`SharingNetwork.sequence` prepared once (:meth:`SharingNetwork.plan`) and run any
    number of times: its phases by flow index (-1: a plain wait), the flows they use, and when
    each phase ends after the start if nothing shares with it (s)."""

    phases: tuple[tuple[int, float, float, float], ...]
    flows: frozenset[int]
    ends: tuple[float, ...]
    neighbours: tuple[int, ...]
    """The flows that share a constraint with one of ``flows`` (them included)."""
    fluid: tuple[tuple[int, float, float], ...]
    """(flow, begin s, end s after the start) of each phase that moves bytes, if nothing shares
    with it: when it can meet another transfer."""
    duration_s: float
    """When the last phase ends after the start if nothing shares with any (0 without phases)."""
    suffixes: dict[int, Plan] = field(default_factory=dict)
    """The plans of the phases from ``j`` on, by ``j``, as materialised trains need them."""

    def times(self, start_s: float, upto: int | None = None) -> list[PhaseTimes]:
        """(start, arrival, end) of the phases before ``upto`` (default: all) run alone from
        ``start_s`` (s)."""
        upto = len(self.phases) if upto is None else upto
        starts = [start_s, *(start_s + end for end in self.ends[:upto - 1])] if upto else []
        return [(t, t + self.phases[j][1], start_s + self.ends[j]) for j, t in enumerate(starts)]


def _plan(phases: tuple[tuple[int, float, float, float], ...],
          near: Callable[[frozenset[int]], tuple[int, ...]], spb: Sequence[float]) -> Plan:
    """The :class:`Plan` of indexed ``phases``, given the flows ``near`` a set of flows and each
    flow's seconds per byte ``spb``."""
    ends = tuple(accumulate([duration if duration >= not_before else not_before
                             for _, duration, _, not_before in phases]))
    flows = frozenset([phase[0] for phase in phases])
    if -1 in flows:
        flows -= _WAIT
    fluid = tuple((k, begin, begin + duration - latency)
                  for (k, duration, latency, _), begin in zip(phases, (0.0, *ends), strict=False)
                  if k >= 0 and spb[k] > 0.0 and duration > latency)
    return Plan(phases, flows, ends, near(flows), fluid, ends[-1] if ends else 0.0)


_WAIT = frozenset((-1,))
"""The flow index of a plain wait."""


@dataclass(slots=True, eq=False)
class _Train:
    """A sequence running alone: ``plan`` from ``start_s``, ending at ``end_s`` when ``timer``
    fires (its callbacks are the sequence's waiters); ``live`` until materialised. A train past
    its end needs no event to be forgotten: whoever meets it after ``end_s`` drops it."""

    plan: Plan
    start_s: float
    end_s: float
    timer: simpy.Event
    live: bool = True


class SharingNetwork:
    """Max-min fair bandwidth sharing between concurrent transfers (see the module docstring).

    Use: :meth:`start` once per engine run with the run's environment and flows, then
    :meth:`transfer` for every transfer or :meth:`sequence` for a train of them; each returns an
    event that fires when it ends.

    Args:
        trains: run a :meth:`sequence` alone as one timer while nothing shares with it (False
            runs every phase as its own transfer: the plain implementation, for tests).
    """

    name = SHARING

    def __init__(self, trains: bool = True) -> None:
        # Active transfers and trains are insertion-ordered dicts, not sets: a set of objects
        # iterates in address order, so the order of simultaneous events (and a result's last
        # digits) depended on what the process had allocated before.
        self.trains = trains
        self._trains: list[dict[_Train, None]] = []
        self._env: simpy.Environment | None = None
        self._index: dict[int, int] = {}
        self._constraints: list[tuple[tuple[int, float], ...]] = []
        self._spb: list[float] = []
        self._neighbours: list[tuple[int, ...]] = []
        self._near_sets: list[frozenset[int]] = []
        self._near: Callable[[frozenset[int]], tuple[int, ...]] = _nothing_near
        self._rates: Callable[[tuple[int, ...]], list[float]] = _no_rates
        self._active: list[dict[Transfer, None]] = []
        self._busy: set[int] = set()
        self._moved: dict[simpy.Event, simpy.Event] = {}
        self._pairs: dict[tuple[Plan, Plan], list[tuple[float, float, float, float]]] = {}

    def reset(self) -> None:
        """Forget the run (a new engine run calls :meth:`start`)."""
        self._env = None
        self._active = []
        self._busy = set()
        self._trains = []
        self._moved = {}
        self._pairs = {}

    def start(self, env: simpy.Environment, flows: Sequence[Flow]) -> None:
        """Begin a run in ``env`` whose transfers use ``flows`` (each flow's constraints are
        computed once here, see :func:`constraints_of`)."""
        self._env = env
        self._active = [{} for _ in flows]
        self._busy = set()
        self._trains = [{} for _ in flows]
        if [id(f) for f in flows] != list(self._index):
            structure = _structure(tuple(flows))
            self._index, self._constraints, self._spb, self._neighbours, self._rates, self._near = structure[:6]
            self._near_sets = structure[6]

    def transfer(self, flow: Flow, duration_s: float, latency_s: float = 0.0,
                 not_before_s: float = 0.0) -> simpy.Event:
        """An event that fires when ``flow`` has moved what takes it ``duration_s`` alone (of which
        ``latency_s`` is latency, not bandwidth), and no sooner than ``not_before_s`` after now;
        its value is the time the bytes arrived (s).

        Raises:
            RuntimeError: :meth:`start` was not called for this run.
        """
        env = self._env
        if env is None:
            raise RuntimeError("SharingNetwork.start must be called before a transfer")
        return self._transfer(self._index[id(flow)], duration_s, latency_s, not_before_s, attached=False)

    def _transfer(self, k: int, duration_s: float, latency_s: float, not_before_s: float,
                  attached: bool = True) -> simpy.Event:
        """:meth:`transfer` of flow index ``k`` (-1: a plain wait); ``attached``: the caller
        attaches every waiter of the event at once (:class:`Transfer`)."""
        env = self._env
        assert env is not None
        spb, now = self._spb[k] if k >= 0 else 0.0, env.now
        work = max(duration_s - latency_s, 0.0)
        if spb <= 0.0 or work <= 0.0:
            return env.timeout(max(duration_s, not_before_s), now + duration_s)
        done = env.event()
        t = Transfer(flow=k, remaining=work / spb, latency_s=latency_s, not_before_s=now + not_before_s,
                     done=done, since_s=now, attached=attached)
        active = self._active
        alone = self._quiet(self._neighbours[k], now)
        active[k][t] = None
        self._busy.add(k)
        if alone:  # the common case: the component is this transfer, at its own rate
            self._schedule(t, 1.0 / spb, True, now)
        else:
            self._refill(self._component([k], now), now)
        return done

    def plan(self, phases: Sequence[Phase]) -> Plan:
        """``phases`` prepared for :meth:`sequence` (a plan holds flow positions: it serves the
        runs of this set of flows, see :meth:`start`).

        Raises:
            RuntimeError: :meth:`start` was not called.
        """
        if self._env is None:
            raise RuntimeError("SharingNetwork.start must be called before a plan")
        index = self._index
        return _plan(tuple([(index[id(f)] if f is not None else -1, d, lat, nb) for f, d, lat, nb in phases]),
                     self._near, self._spb)

    def sequence(self, plan: Plan) -> simpy.Event:
        """An event that fires when ``plan``'s phases have run one after another, each as
        :meth:`transfer` runs it (a phase without a flow is a plain wait). Its value is None when
        nothing shared with any phase, so each took its time alone from the start
        (:meth:`Plan.times`), else each phase's :data:`PhaseTimes`. Wait on it at once, or later
        on :meth:`waiter` of it (a train's timer is the sequence's event itself unless the train
        is materialised, which moves the timer's waiters to an event of its own).

        Raises:
            RuntimeError: :meth:`start` was not called for this run.
        """
        env = self._env
        if env is None:
            raise RuntimeError("SharingNetwork.start must be called before a sequence")
        now = env.now
        if not (self.trains and self._quiet(plan.neighbours, now, plan)):
            done = env.event()
            self._stepwise(plan, done)
            return done
        duration = plan.duration_s
        timer = env.timeout(duration)
        train = _Train(plan, now, now + duration, timer)  # the timer's own time (SimPy adds the delay to now)
        trains = self._trains
        for k in plan.flows:
            trains[k][train] = None
        return timer

    def waiter(self, event: simpy.Event) -> simpy.Event:
        """The event to wait on for the end of the sequence whose event was ``event``: a train's
        timer no longer ends it once the train is materialised (:meth:`sequence`)."""
        return self._moved.get(event, event)

    def _stepwise(self, plan: Plan, done: simpy.Event, j: int = 0, times: list[PhaseTimes] | None = None) -> None:
        """Run phase ``j`` (default the first) as a transfer, then the others as a sequence (a
        train again if nothing shares with them by then; with ``trains`` off, each as a transfer
        in turn); ``done`` succeeds with every phase's times (``times`` those of the phases
        before ``j``). Callbacks, not a process: no events of their own."""
        env = self._env
        assert env is not None
        times = [] if times is None else times
        if j == len(plan.phases):
            done.succeed(times)
        elif j and self.trains:
            self._rest(self._suffix(plan, j), times, done)
        else:
            k, duration, latency, not_before = plan.phases[j]
            self._transfer(k, duration, latency, not_before).callbacks.append(
                partial(self._stepped, plan, done, j, times, env.now))

    def _stepped(self, plan: Plan, done: simpy.Event, j: int, times: list[PhaseTimes], start: float,
                 transferred: simpy.Event) -> None:
        """Phase ``j`` of a :meth:`_stepwise` sequence (started at ``start``) has ended: the next."""
        env = self._env
        assert env is not None
        times.append((start, cast(float, transferred.value), env.now))
        self._stepwise(plan, done, j + 1, times)

    def _suffix(self, plan: Plan, j: int) -> Plan:
        """The plan of ``plan``'s phases from ``j`` on (remembered in ``plan``)."""
        rest = plan.suffixes.get(j)
        if rest is None:
            rest = plan.suffixes[j] = _plan(plan.phases[j:], self._near, self._spb)
        return rest

    def _rest(self, plan: Plan, times: list[PhaseTimes], done: simpy.Event) -> None:
        """Run ``plan`` from now as a sequence; then ``done`` succeeds with ``times`` and its
        phases' times."""
        env = self._env
        assert env is not None
        self.sequence(plan).callbacks.append(partial(self._rested, plan, env.now, times, done))

    @staticmethod
    def _rested(plan: Plan, start: float, times: list[PhaseTimes], done: simpy.Event, ended: simpy.Event) -> None:
        """The sequence of :meth:`_rest` (started at ``start``) has ended."""
        times += plan.times(start) if ended.value is None else ended.value
        done.succeed(times)

    def _drop(self, train: _Train) -> None:
        train.live = False
        for k in train.plan.flows:
            self._trains[k].pop(train, None)

    def _quiet(self, neighbours: Sequence[int], now: float, plan: Plan | None = None) -> bool:
        """Whether no live transfer of flows ``neighbours`` is moving bytes (they share a
        constraint with the flows about to start), after materialising the trains of those flows
        that would share from now on: all of them for a transfer, whose end is not known; for
        the train of ``plan``, those that would move bytes on a flow near one of its phases' while
        that phase does (:meth:`_meets`; the others keep running alone beside it)."""
        trains = self._trains
        for n in neighbours:
            if trains[n]:
                for train in list(trains[n]):
                    if train.end_s <= now:  # ended (its timer fires now or has fired): forgotten
                        self._drop(train)
                    elif train.live and (plan is None or self._meets(plan, now, train)):
                        self._materialise(train, now)
        active = self._active
        for n in neighbours:
            if active[n] and self._live(n, now):
                return False
        return True

    def _meets(self, plan: Plan, now: float, train: _Train) -> bool:
        """Whether a phase of ``plan`` started now, alone, would move bytes while a phase of
        ``train`` on a flow sharing a constraint with it does (:meth:`_close` pairs them)."""
        begun = train.start_s
        for a, b, c, d in self._close(plan, train.plan):
            if now + a < begun + d and begun + c < now + b:
                return True
        return False

    def _close(self, plan: Plan, other: Plan) -> list[tuple[float, float, float, float]]:
        """(begin, end of a phase of ``plan``, begin, end of one of ``other``) after their
        starts (s), of every pair of their phases that move bytes on flows sharing a
        constraint (remembered for the run)."""
        pairs = self._pairs.get((plan, other))
        if pairs is None:
            near = self._near_sets
            pairs = self._pairs[(plan, other)] = [(a, b, c, d) for f, a, b in plan.fluid for g, c, d in other.fluid
                                                  if g in near[f]]
        return pairs

    def _materialise(self, train: _Train, now: float) -> None:
        """Turn ``train`` into what phase-by-phase transfers would be at ``now``: its current
        phase's transfer (alone so far) and callbacks for the phases after it. That transfer
        may be slowed from now on, so the trains beside it that share a constraint with it are
        materialised too."""
        env = self._env
        assert env is not None
        if not train.live:
            return
        plan, begun = train.plan, train.start_s
        ends = plan.ends
        j = bisect_right(ends, now, key=partial(add, begun))  # the first phase ending after now
        if j == len(ends):  # ends now: its timer fires next
            return
        self._drop(train)
        start = begun + plan.ends[j - 1] if j else begun
        k, duration, latency, not_before = plan.phases[j]
        spb = self._spb[k] if k >= 0 else 0.0
        fluid_end = start + max(duration - latency, 0.0)
        if spb > 0.0 and fluid_end > now:
            t = Transfer(flow=k, remaining=(fluid_end - now) / spb, latency_s=latency,
                         not_before_s=start + not_before, done=env.event(), since_s=now, attached=True)
            self._active[k][t] = None
            self._busy.add(k)
            self._schedule(t, 1.0 / spb, True, now)
            current = t.done
        else:
            current = env.timeout(begun + plan.ends[j] - now, start + duration)
        done, timer = env.event(), train.timer
        assert timer.callbacks is not None  # the train has not ended
        done.callbacks.extend(timer.callbacks)  # its waiters
        timer.callbacks.clear()
        self._moved[timer] = done
        current.callbacks.append(partial(self._resumed, train, j, start, done))
        if spb > 0.0 and fluid_end > now:  # a transfer, which may be slowed from now on
            trains = self._trains
            for n in self._neighbours[k]:
                if trains[n]:
                    for other in list(trains[n]):
                        self._materialise(other, now)

    def _resumed(self, train: _Train, j: int, start: float, done: simpy.Event, current: simpy.Event) -> None:
        """Phase ``j`` of a materialised train (started at ``start``) has ended: run the rest."""
        env = self._env
        assert env is not None
        plan = train.plan
        times = [*plan.times(train.start_s, j), (start, cast(float, current.value), env.now)]
        if j + 1 < len(plan.phases):
            self._rest(self._suffix(plan, j + 1), times, done)
        else:
            done.succeed(times)

    def _live(self, k: int, now: float) -> bool:
        """Whether flow ``k`` has transfers still moving bytes at ``now`` (forgetting those whose
        bytes have all moved: a transfer alone ends its bytes without an event of its own)."""
        active = self._active[k]
        for t in active:
            if t.fluid_end_s <= now:
                break
        else:
            return bool(active)
        for t in [t for t in active if t.fluid_end_s <= now]:
            del active[t]
        if active:
            return True
        self._busy.discard(k)
        return False

    def _component(self, seeds: list[int], now: float) -> list[Transfer]:
        """Active transfers of the flows connected to flows ``seeds`` through flows with active
        transfers that share constraints, by flow (each flow's in the order they started).
        ``seeds`` must have live transfers only (:meth:`_live`)."""
        near, busy, live = self._near_sets, self._busy, self._live
        seen = set(seeds)
        stack = list(seeds)
        while stack:
            for n in near[stack.pop()] & busy:
                if n not in seen and live(n, now):
                    seen.add(n)
                    stack.append(n)
        active = self._active
        if len(seen) == 1:
            return list(active[seeds[0]])
        return [t for k in sorted(seen) for t in active[k]]

    def _refill(self, transfers: list[Transfer], now: float) -> None:
        """Bring ``transfers`` (by flow, as :meth:`_component` lists them) to ``now``, give them
        their max-min rates and schedule their ends."""
        for t in transfers:
            left = t.remaining - t.rate * (now - t.since_s)
            t.remaining = left if left >= 0.0 else 0.0
            t.since_s = now
        alone = len(transfers) == 1
        rates = self._rates(tuple([t.flow for t in transfers]))
        for t, rate in zip(transfers, rates, strict=True):
            if rate != t.rate or alone != t.alone:
                self._schedule(t, rate, alone, now)

    def _schedule(self, t: Transfer, rate: float, alone: bool, now: float) -> None:
        """Move ``t`` at ``rate`` from ``now`` (the environment's time) on and schedule its end
        (earlier ends are void). A transfer ``alone`` in its component needs no event when its
        bytes have moved (nothing else's rate changes then): one timer fires its event; otherwise
        a timer at the end of its bytes frees its share for the others first."""
        env = self._env
        assert env is not None
        version = t.version + 1
        t.rate, t.alone, t.version = rate, alone, version
        fluid_end = t.fluid_end_s = now + t.remaining / rate
        if alone:
            end = arrival = fluid_end + t.latency_s
            not_before = t.not_before_s
            if not_before > end:  # max(arrival, not_before)
                end = not_before
            env.timeout(end - now, arrival).callbacks.append(partial(self._arrive, t, version))
        else:
            env.timeout(fluid_end - now).callbacks.append(partial(self._finish, t, version))

    def _arrive(self, t: Transfer, version: int, timer: simpy.Event) -> None:
        """A transfer scheduled alone arrives (unless rescheduled since): ``timer``, whose value
        is the arrival time, fires its event (:func:`_fire`)."""
        if version == t.version:
            k = t.flow
            active = self._active[k]
            active.pop(t, None)
            if not active:
                self._busy.discard(k)
            _fire(t, timer)

    def _finish(self, t: Transfer, version: int, _event: simpy.Event) -> None:
        """A shared transfer's bytes have moved: free its share, then fire its event after its
        latency (and not before its ``not_before_s``)."""
        if version != t.version:
            return
        env = self._env
        assert env is not None
        now = env.now
        t.version = -1
        k = t.flow
        active = self._active[k]
        active.pop(t, None)
        busy = self._busy
        if not active:
            busy.discard(k)
        live = self._live
        touched = [n for n in self._near_sets[k] & busy if live(n, now)]
        if touched:
            self._refill(self._component(touched, now), now)
        latency = t.latency_s
        arrived = now + latency
        delay = t.not_before_s - now
        if not delay > latency:  # max(latency, not_before - now)
            delay = latency
        if delay > 0.0:
            env.timeout(delay, arrived).callbacks.append(partial(_fire, t))
        else:
            t.done.succeed(arrived)


RATES_CACHED = 4096
"""Components whose max-min rates each placement remembers (a pipeline repeats a few
combinations of concurrent transfers many times)."""

_Structure = tuple[dict[int, int], list[tuple[tuple[int, float], ...]], list[float], list[tuple[int, ...]],
                   Callable[[tuple[int, ...]], list[float]], Callable[[frozenset[int]], tuple[int, ...]],
                   list[frozenset[int]]]


@lru_cache(maxsize=128)
def _structure(flows: tuple[Flow, ...]) -> _Structure:
    """Of ``flows``: position by id, constraints (:func:`constraints_of`), seconds per byte and the
    flows each shares a constraint with (itself included); the max-min rates of transfers of the
    given flows (sorted) and the flows that share a constraint with one of a set, memoised. Flows
    hash by identity, and the engine reuses one placement's flows across runs, so this is computed
    once per placement."""
    constraints = constraints_of(flows)
    users: dict[int, set[int]] = {}
    for k, pairs in enumerate(constraints):
        for c, _ in pairs:
            users.setdefault(c, set()).add(k)
    neighbours = [tuple(sorted(set().union(*(users[c] for c, _ in pairs)))) for pairs in constraints]

    @lru_cache(maxsize=RATES_CACHED)
    def rates(of_flows: tuple[int, ...]) -> list[float]:
        return max_min_rates([constraints[k] for k in of_flows])

    @lru_cache(maxsize=RATES_CACHED)
    def near(of_flows: frozenset[int]) -> tuple[int, ...]:
        return tuple(sorted(set().union(*(neighbours[k] for k in of_flows))))

    return ({id(f): k for k, f in enumerate(flows)}, constraints, [f.seconds_per_byte for f in flows], neighbours,
            rates, near, [frozenset(n) for n in neighbours])


def _no_rates(_flows: tuple[int, ...]) -> list[float]:
    raise RuntimeError("SharingNetwork.start must be called before a transfer")


def _nothing_near(_flows: frozenset[int]) -> tuple[int, ...]:
    raise RuntimeError("SharingNetwork.start must be called before a plan")


def _fire(t: Transfer, timer: simpy.Event) -> None:
    """Fire ``t``'s event with the value of ``timer``, from the timer's callback (its only one,
    and the last thing that callback does). Triggered, the event would be processed in the
    next step if no other event is due now: then, for a transfer whose waiters are all
    ``attached``, they are called now with ``timer`` (the same value) and the event stays
    untriggered, which processes every event in the same order with one SimPy step fewer.
    Otherwise it is triggered, to be processed in its turn among the events due now."""
    env, done = timer.env, t.done
    if t.attached and env.peek() > env.now:
        waiters = list(done.callbacks)
        done.callbacks.clear()
        for waiter in waiters:
            waiter(timer)
    else:
        done.succeed(timer.value)


def max_min_rates(constraints: Sequence[Sequence[tuple[int, float]]]) -> list[float]:
    """Max-min fair rates by progressive filling (Bertsekas and Gallager §6.5.2).

    Args:
        constraints: for each transfer, ``(constraint id, occupancy)`` pairs: a constraint ``c``
            allows ``sum(rate * occupancy) <= 1`` over the transfers that list it. Every transfer
            must list at least one constraint with a positive occupancy; a constraint listed by
            one transfer only must be dominated by another of its own (as a flow's
            ``seconds_per_byte`` dominates its resources) or have a negative id.

    Returns:
        Each transfer's rate (per unit of occupancy's inverse; bytes per edge per second).
    """
    users: dict[int, list[tuple[int, float]]] = {}
    for k, pairs in enumerate(constraints):
        for c, a in pairs:
            users.setdefault(c, []).append((k, a))
    users = {c: us for c, us in users.items() if c < 0 or len(us) > 1}
    demand = {c: sum(a for _, a in us) for c, us in users.items()}
    unfrozen = {c: len(us) for c, us in users.items()}
    capacity = dict.fromkeys(users, 1.0)
    of_transfer: list[list[tuple[int, float]]] = [[] for _ in constraints]
    for c, us in users.items():
        for k, a in us:
            of_transfer[k].append((c, a))
    rates = [0.0] * len(constraints)
    frozen = [False] * len(constraints)
    level = 0.0
    while demand:
        step = min(capacity[c] / d for c, d in demand.items())
        level += step
        saturated = []
        for c, d in demand.items():
            capacity[c] -= step * d
            if capacity[c] <= _TIGHT:
                saturated.append(c)
        for c in saturated:
            for k, _ in users[c]:
                if not frozen[k]:
                    frozen[k] = True
                    rates[k] = level
                    for c2, a in of_transfer[k]:
                        demand[c2] -= a
                        unfrozen[c2] -= 1
        demand = {c: d for c, d in demand.items() if unfrozen[c]}
    return rates


def constraints_of(flows: Sequence[Flow]) -> list[tuple[tuple[int, float], ...]]:
    """The constraints each flow's transfers can meet: for every group of resources used by
    exactly the same two or more flows, one constraint per undominated occupancy vector (a
    resource whose occupancies are all at most another's in the group never binds first); and per
    flow its own bottleneck (``seconds_per_byte``), which its concurrent instances share and which
    caps a transfer alone at PALM Eq. 2's rate. Ids: groups count from 0 in the order their first
    resource is met walking the flows (each through its occupancy's order), a group's vectors in
    :func:`_undominated`'s order; a flow's own constraint is ``-1 - index``."""
    pairs: list[list[tuple[int, float]]] = [[(-1 - k, f.seconds_per_byte)] for k, f in enumerate(flows)]
    c = 0
    for group, vectors in _shared_groups(flows).items():
        for v in _undominated(vectors):
            for k, a in zip(group, v, strict=True):
                pairs[k].append((c, a))
            c += 1
    return [tuple(p) for p in pairs]


class FlowPairs(NamedTuple):
    """Every (flow, resource) pair of a sequence of flows, flow-major and each flow's in its
    occupancy's order: the flow's position, the resource and its occupancy (s per byte per edge);
    ``order`` sorts the pairs by resource (stably: where met within one) and ``starts`` are the
    sorted positions where each distinct resource's pairs begin."""

    flow: np.ndarray
    resource: np.ndarray
    occupancy: np.ndarray
    order: np.ndarray
    starts: np.ndarray


@lru_cache(maxsize=128)
def flow_pairs(flows: tuple[Flow, ...]) -> FlowPairs:
    """The :class:`FlowPairs` of ``flows`` (built once per set of flows, which both the sharing
    constraints and an engine's index of its flows read)."""
    sizes = [len(f.occupancy) for f in flows]
    count = sum(sizes)
    resource = np.fromiter(chain.from_iterable(f.occupancy for f in flows), dtype=np.int64, count=count)
    order = np.argsort(resource, kind="stable")
    ordered = resource[order]
    return FlowPairs(flow=np.repeat(np.arange(len(flows)), sizes), resource=resource,
                     occupancy=np.fromiter(chain.from_iterable(f.occupancy.values() for f in flows), dtype=float,
                                           count=count),
                     order=order, starts=np.flatnonzero(np.r_[True, ordered[1:] != ordered[:-1]]) if count else order)


def _shared_groups(flows: Sequence[Flow]) -> dict[tuple[int, ...], list[tuple[float, ...]]]:
    """The flows using each resource that two or more use (ascending), with the distinct
    occupancy vectors of such resources (the occupancy of each of those flows), groups and vectors
    in the order their first resource is met walking the flows.

    Numpy over every (flow, resource) pair (:func:`flow_pairs`), no Python step per pair (a
    placement of 16 stages of 64-wide all-to-alls has some 12,000): the pairs sorted by resource
    give each resource's users and vector as one row of two matrices (``-1`` and 0 past a row's
    users); rows sorted lexicographically give the groups, and within a group the distinct
    vectors."""
    pairs = flow_pairs(tuple(flows))
    order, starts, count = pairs.order, pairs.starts, len(pairs.order)
    users = np.diff(np.r_[starts, count])
    shared = np.flatnonzero(users > 1)
    if not len(shared):
        return {}
    run = np.repeat(np.arange(len(starts)), users)  # each sorted pair's resource
    row = np.full(len(starts), -1)
    row[shared] = np.arange(len(shared))
    rows = row[run]
    kept = rows >= 0
    rows, column = rows[kept], (np.arange(count) - starts[run])[kept]
    width = int(users[shared].max())
    flows_of = np.full((len(shared), width), -1, dtype=np.int64)
    vectors = np.zeros((len(shared), width))
    flows_of[rows, column] = pairs.flow[order][kept]
    vectors[rows, column] = pairs.occupancy[order][kept]
    met = order[starts[shared]]  # where each shared resource is first met
    group = _row_classes(flows_of)
    first_met = np.full(int(group.max()) + 1, count)
    np.minimum.at(first_met, group, met)
    rank = np.argsort(np.argsort(first_met))[group]  # each row's group, in the order groups are met
    by_vector = np.lexsort((met, *vectors.T[::-1], rank))  # by group, vector, then where met
    ranked = np.c_[rank, vectors][by_vector]
    distinct = by_vector[np.r_[True, (ranked[1:] != ranked[:-1]).any(axis=1)]]
    distinct = distinct[np.lexsort((met[distinct], rank[distinct]))]
    groups: dict[tuple[int, ...], list[tuple[float, ...]]] = {}
    for ks, v, n in zip(flows_of[distinct].tolist(), vectors[distinct].tolist(), users[shared][distinct].tolist(),
                        strict=True):
        groups.setdefault(tuple(ks[:n]), []).append(tuple(v[:n]))
    return groups


def _row_classes(matrix: np.ndarray) -> np.ndarray:
    """A class per row of ``matrix``, equal for equal rows (numbered in sorted order)."""
    by_row = np.lexsort(matrix.T[::-1])
    ordered = matrix[by_row]
    classes = np.empty(len(matrix), dtype=np.int64)
    classes[by_row] = np.cumsum(np.r_[True, (ordered[1:] != ordered[:-1]).any(axis=1)]) - 1
    return classes


def _undominated(vectors: list[tuple[float, ...]]) -> list[tuple[float, ...]]:
    """Distinct vectors not dominated elementwise by another one."""
    unique = sorted(set(vectors), key=sum, reverse=True)
    kept: list[tuple[float, ...]] = []
    for v in unique:
        if not any(all(x <= y for x, y in zip(v, w, strict=True)) for w in kept):
            kept.append(v)
    return kept
