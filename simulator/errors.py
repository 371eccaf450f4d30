"""Exceptions raised by the simulator.

The tree::

    PalmError                 base of every error this package raises on purpose
    ├── InputError            bad user input: a model, hardware, strategy or study file or
    │                         argument that breaks a rule. The message is one line naming the
    │                         file, table, key and value; the CLI prints it and exits with 2.
    ├── SimulationError       an internal invariant broke during a simulation (a bug).
    └── BudgetExceeded        a simulation ran past its wall-clock or event budget (neither
                              bad input nor a bug: an answer too costly to compute; a search
                              fails that trial and goes on).

A strategy that does not fit in memory is *not* an error: it is a valid question with the answer
"infeasible", reported in :class:`simulator.result.SimulationResult` with the reason and bytes.
"""

from __future__ import annotations


class PalmError(Exception):
    """Base class of every error raised on purpose by palm-search."""


class InputError(PalmError, ValueError):
    """Bad user input; ``str(error)`` is a single line naming where and what is wrong."""


class SimulationError(PalmError, RuntimeError):
    """An internal invariant of the simulator broke (a bug, not a user error)."""


class BudgetExceeded(PalmError, RuntimeError):
    """A simulation ran past its wall-clock or event budget (``simulate(time_limit_s=...,
    event_limit=...)``); ``str(error)`` says which and where it stopped."""
