"""What a worker does with one strategy: simulate it and return a small picklable record.

Workers (joblib/loky processes) only run the simulator; the driver owns the study. A failure
inside the simulator is returned as an ``error`` record, so one bad strategy fails one trial and
never the batch.
"""

from __future__ import annotations

import json
import traceback

from simulator import Hardware, InputError, ModelSpec, SimulationResult, Strategy, estimate_samples_per_s, simulate
from simulator import __version__ as SIMULATOR_VERSION

RECORD_KEYS = ("feasible", "reason", "samples_per_s", "tokens_per_s", "iteration_time_s",
               "model_flops_utilisation",
               "bubble_fraction", "peak_memory_bytes", "memory_over_capacity_bytes", "wall_time_s",
               "events_simulated", "extrapolated", "error")
"""Keys of an evaluation record (also the trials' user attributes and ``trials.csv`` columns)."""


def cache_key(model: ModelSpec, hardware: Hardware, strategy: Strategy, network: str) -> str:
    """Identity of an evaluation: strategy, model, hardware, network and simulator version."""
    return json.dumps([strategy.to_dict(), repr(model), repr(hardware), network, SIMULATOR_VERSION],
                      sort_keys=True, default=str)


def record_of(result: SimulationResult, capacity_bytes: float) -> dict:
    """The evaluation record of a simulation result."""
    return {
        "feasible": result.feasible, "reason": result.reason, "samples_per_s": result.samples_per_s,
        "tokens_per_s": result.tokens_per_s, "iteration_time_s": result.iteration_time_s,
        "model_flops_utilisation": result.model_flops_utilisation, "bubble_fraction": result.bubble_fraction,
        "peak_memory_bytes": result.peak_memory_bytes,
        "memory_over_capacity_bytes": max(result.peak_memory_bytes - capacity_bytes, 0.0),
        "wall_time_s": result.wall_time_s, "events_simulated": result.events_simulated,
        "extrapolated": result.extrapolated, "error": "",
    }


_RESIDENT: dict[tuple[str, str], tuple[ModelSpec, Hardware]] = {}
"""(model, hardware) pairs this process has received, by their ``repr`` (as :func:`cache_key`)."""
_RESIDENT_KEPT = 64
"""Pairs kept (a co-design screen sends many machines; the simulator's caches hold their own)."""


def resident(model: ModelSpec, hardware: Hardware) -> tuple[ModelSpec, Hardware]:
    """The first pair equal to ``(model, hardware)`` this process received (of the last
    :data:`_RESIDENT_KEPT`): each worker task arrives with fresh copies, and the simulator keeps a
    plan's stage costs by the objects' identity, so a worker builds them once for all its tasks,
    as one process does."""
    pair = _RESIDENT.setdefault((repr(model), repr(hardware)), (model, hardware))
    if len(_RESIDENT) > _RESIDENT_KEPT:
        del _RESIDENT[next(iter(_RESIDENT))]
    return pair


def evaluate(model: ModelSpec, hardware: Hardware, strategy: Strategy, network: str,
             time_limit_s: float | None = None) -> dict:
    """Simulate ``strategy`` within ``time_limit_s`` of wall clock (s; None: unbounded); never
    raises (an exception, a budget exceeded included, becomes ``{"error": message}``)."""
    model, hardware = resident(model, hardware)
    try:
        result = simulate(model, hardware, strategy, network=network, time_limit_s=time_limit_s)
        return record_of(result, hardware.device_memory_bytes())
    except Exception as error:  # noqa: BLE001 - a failing evaluation must not stop a search
        last = traceback.extract_tb(error.__traceback__)[-1:]
        where = f" ({last[0].filename.rsplit('/', 1)[-1]}:{last[0].lineno})" if last else ""
        return {"error": f"{type(error).__name__}: {error}{where}"}


def estimate_points(model: ModelSpec, plans: list[tuple[Hardware, Strategy]]) -> list[float]:
    """Estimated samples/s of each (hardware, strategy) (0 when it does not fit or is not
    legal): the screen's task, which a worker runs without importing the spaces or Optuna."""
    values, pairs = [], {}
    for hardware, strategy in plans:
        pair = pairs.get(id(hardware)) or pairs.setdefault(id(hardware), resident(model, hardware))
        try:
            values.append(estimate_samples_per_s(*pair, strategy))
        except InputError:
            values.append(0.0)
    return values
