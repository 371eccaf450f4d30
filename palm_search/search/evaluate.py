"""What a worker does with one strategy: simulate it and return a small picklable record.

Workers (joblib/loky processes) only run the simulator; the driver owns the study. A failure
inside the simulator is returned as an ``error`` record, so one bad strategy fails one trial and
never the batch.
"""

from __future__ import annotations

import json
import traceback
from typing import NamedTuple

import numpy as np
from threadpoolctl import threadpool_limits

from simulator import (
    MEGATRON_CORE,
    Hardware,
    ModelSpec,
    SimulationResult,
    Stack,
    Strategy,
    estimate_product,
    simulate,
)
from simulator import __version__ as SIMULATOR_VERSION

RECORD_KEYS = ("feasible", "reason", "samples_per_s", "tokens_per_s", "iteration_time_s",
               "model_flops_utilisation",
               "bubble_fraction", "peak_memory_bytes", "memory_over_capacity_bytes", "wall_time_s",
               "events_simulated", "extrapolated", "error", "utilisation", "time_shares")
"""Keys of an evaluation record (also the trials' user attributes and, but for the two tables
``utilisation`` and ``time_shares``, ``trials.csv`` columns)."""
TABLE_KEYS = ("utilisation", "time_shares")
"""Record keys holding a table (what the best mapping is bound by), not a number: each resource
kind's ``{"max": .., "mean": ..}`` utilisation (0..1) and the iteration's time shares (0..1, mean
over the pipeline stages) of ``compute``, ``communication``, ``dram_stall``, ``optimizer`` and
``bubble``."""
SERVING_KEYS = ("users", "ttft_s", "time_per_output_token_s", "tokens_per_s_per_user")
"""Further keys of a serving record (:func:`evaluate_serving`): concurrent users, the batch's time
to first token (s), the decode step's time (s) and one user's decode rate (tokens/s)."""


class ServingTarget(NamedTuple):
    """What a serving point must meet (None: no bound): each user's decode rate (tokens/s) at
    least ``min_tokens_per_s_per_user``, the batch's time to first token (s) at most ``max_ttft_s``."""

    min_tokens_per_s_per_user: float | None = None
    max_ttft_s: float | None = None

    def shortfall(self, tokens_per_s_per_user: float, ttft_s: float) -> dict[str, float]:
        """Optuna constraint values (> 0: violated) of a point: tokens/s per user below the
        floor, seconds of time to first token over the ceiling."""
        return {"tokens_per_s_per_user_below_floor": (self.min_tokens_per_s_per_user or 0.0) - tokens_per_s_per_user,
                "ttft_over_ceiling_s": ttft_s - (self.max_ttft_s if self.max_ttft_s is not None else float("inf"))}

    def reason(self, tokens_per_s_per_user: float, ttft_s: float) -> str:
        """Why a point misses the target ("" when it meets it)."""
        floor, ceiling = self.min_tokens_per_s_per_user, self.max_ttft_s
        if floor is not None and tokens_per_s_per_user < floor:
            return f"{tokens_per_s_per_user:.4g} tokens/s per user, below the floor of {floor:g}"
        if ceiling is not None and ttft_s > ceiling:
            return f"time to first token {ttft_s:.4g} s, over the ceiling of {ceiling:g} s"
        return ""

    def met(self, tokens_per_s_per_user: float, ttft_s: float) -> bool:
        """Whether a point meets the target."""
        return not self.reason(tokens_per_s_per_user, ttft_s)


def cache_key(model: ModelSpec, hardware: Hardware, strategy: Strategy, network: str,
              stack: Stack = MEGATRON_CORE) -> str:
    """Identity of an evaluation: strategy, model, hardware, network, simulator version and the
    software stack (where it is not the default, so that default keys stay what they were)."""
    software = [] if stack == MEGATRON_CORE else [repr(stack)]
    return json.dumps([strategy.to_dict(), repr(model), repr(hardware), network, SIMULATOR_VERSION, *software],
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
        "utilisation": {r.kind: {"max": r.max_utilisation, "mean": r.mean_utilisation} for r in result.resources},
        "time_shares": time_shares(result),
    }


def time_shares(result: SimulationResult) -> dict[str, float]:
    """Share (0..1) of the iteration each stage spends computing, in exposed communication, in
    DRAM stalls, updating and idle, averaged over the pipeline stages (empty when infeasible)."""
    stages, period = result.stages, result.iteration_time_s
    if not stages or not period or not result.feasible:
        return {}
    parts = {"compute": "compute_s", "communication": "communication_s", "dram_stall": "dram_stall_s",
             "optimizer": "optimizer_s", "host": "host_s", "bubble": "bubble_s"}
    return {name: sum(getattr(s, attr) for s in stages) / len(stages) / period for name, attr in parts.items()}


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
             time_limit_s: float | None = None, stack: Stack = MEGATRON_CORE) -> dict:
    """Simulate ``strategy`` under ``stack`` within ``time_limit_s`` of wall clock (s; None:
    unbounded); never raises (an exception, a budget exceeded included, becomes ``{"error": message}``)."""
    model, hardware = resident(model, hardware)
    try:
        result = simulate(model, hardware, strategy, network=network, time_limit_s=time_limit_s, stack=stack)
        return record_of(result, hardware.device_memory_bytes())
    except Exception as error:  # noqa: BLE001 - a failing evaluation must not stop a search
        last = traceback.extract_tb(error.__traceback__)[-1:]
        where = f" ({last[0].filename.rsplit('/', 1)[-1]}:{last[0].lineno})" if last else ""
        return {"error": f"{type(error).__name__}: {error}{where}"}


def evaluate_serving(model: ModelSpec, hardware: Hardware, strategy: Strategy, network: str,
                     time_limit_s: float | None = None, stack: Stack = MEGATRON_CORE) -> dict:
    """Simulate a serving point: ``strategy`` is the decode step of its users (``global_batch_size``
    users, one token each against ``decode_context_length`` tokens of KV cache), and the same
    mapping with ``decode_context_length = 0`` is the prefill of the whole batch (every user's
    prompt at once). The record is the decode step's (``tokens_per_s`` = users / step time)
    with :data:`SERVING_KEYS`, feasible when both fit memory (peak: the larger). Never raises."""
    decode = evaluate(model, hardware, strategy, network, time_limit_s, stack)
    if decode.get("error"):
        return decode
    prefill = evaluate(model, hardware, strategy.with_fields(decode_context_length=0), network, time_limit_s, stack)
    if prefill.get("error"):
        return prefill
    step_s = decode["iteration_time_s"]
    record = {**decode, "users": strategy.global_batch_size, "ttft_s": prefill["iteration_time_s"],
              "time_per_output_token_s": step_s, "tokens_per_s_per_user": 1.0 / step_s if step_s > 0 else 0.0}
    record["feasible"] = decode["feasible"] and prefill["feasible"]
    record["reason"] = decode["reason"] or (prefill["reason"] and f"prefill: {prefill['reason']}")
    for key in ("peak_memory_bytes", "memory_over_capacity_bytes"):
        record[key] = max(decode[key], prefill[key])
    record["wall_time_s"] = decode["wall_time_s"] + prefill["wall_time_s"]
    return record


def estimate_points(model: ModelSpec, plans: list[tuple[Hardware, Strategy]],
                    target: ServingTarget | None = None, stack: Stack = MEGATRON_CORE) -> list[float]:
    """Estimated samples/s of each (hardware, strategy) under ``stack`` (0 when it does not fit
    or is not legal): the strategies of each machine estimated together (:func:`estimate_block`
    with no layout)."""
    values = [0.0] * len(plans)
    by_machine: dict[int, list[int]] = {}
    for k, (hardware, _) in enumerate(plans):
        by_machine.setdefault(id(hardware), []).append(k)
    for positions in by_machine.values():
        estimates = estimate_block(model, plans[positions[0]][0], [plans[k][1] for k in positions], [{}], target,
                                   stack)
        for k, value in zip(positions, estimates[:, 0].tolist(), strict=True):
            values[k] = value
    return values


def estimate_block(model: ModelSpec, hardware: Hardware, plans: list[Strategy], layouts: list[dict],
                   target: ServingTarget | None = None, stack: Stack = MEGATRON_CORE) -> np.ndarray:
    """Estimated samples/s of every plan under every layout (``[len(plans), len(layouts)]``, 0
    where it does not fit or is not legal) under the study's ``stack``, as its trials are
    simulated: the screen's task, which a worker runs without
    importing the spaces or Optuna (:func:`simulator.estimate_product`: numpy over the plans
    and placements). With a serving ``target``, each strategy is a decode step (its samples/s
    are system tokens/s) and a point that misses the target (each user's tokens/s, or the
    estimated prefill of the batch when ``max_ttft_s`` is set) is 0 too. BLAS runs one thread:
    the products are small, and OpenBLAS's threads contending for the cores of a busy host slow
    them several-fold (a ``--jobs 1`` screen runs here in the driver's process, which loky's
    one-thread workers do not cover)."""
    with threadpool_limits(limits=1, user_api="blas"):
        return _estimate_block(model, hardware, plans, layouts, target, stack)


def _estimate_block(model: ModelSpec, hardware: Hardware, plans: list[Strategy], layouts: list[dict],
                    target: ServingTarget | None, stack: Stack) -> np.ndarray:
    """:func:`estimate_block`'s estimates, at the caller's BLAS threads."""
    pair = resident(model, hardware)
    estimates = estimate_product(*pair, plans, layouts, stack)
    if target is None:
        return estimates
    users = np.array([[s.global_batch_size or 1] for s in plans], dtype=float)
    ttft_s = np.zeros_like(estimates)
    if target.max_ttft_s is not None:
        prefills = estimate_product(*pair, [s.with_fields(decode_context_length=0) for s in plans], layouts, stack)
        ttft_s = np.divide(users, prefills, out=np.full_like(prefills, np.inf), where=prefills > 0)
    floor = target.min_tokens_per_s_per_user or 0.0
    ceiling = target.max_ttft_s if target.max_ttft_s is not None else np.inf
    met = (estimates > 0) & (estimates / users >= floor) & (ttft_s <= ceiling)
    return np.where(met, estimates, 0.0)
