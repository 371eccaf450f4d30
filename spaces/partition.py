"""Partition of layers over pipeline stages: balanced, uniform, or min-max under a memory limit.

``balanced`` and ``uniform`` are the simulator's own (:mod:`simulator.workload.stages`). ``min-max``
is the contiguous partition minimising the slowest stage's forward + backward compute time while
every stage fits the device memory, as Piper (Tarnawski et al., NeurIPS'21, §4) and PHAZE (Wang et
al., ICML'24) plan pipeline stages. It is exact: the optimum is one of the O(L^2) sums of
consecutive layer times, found by binary search with an O(p L log L) reachability test.

Per-layer costs come from one :func:`~simulator.workload.stages.build_stage_costs` call with one
unit per stage (``pp = L``): stage costs are sums over their units, so this split is exact. The
embedding stays on the first stage and the logits on the last, so their time and memory are added
to the first and last layer. A layer's memory on virtual stage ``j`` is its model states plus its
activations times the microbatches that stage holds in flight (GPipe ``m``, 1F1B ``p - i``; the
schedule's ``max_in_flight``), as :func:`simulator.legality.microbatches_in_flight` counts it. With ``v`` interleaved
chunks each chunk gets ``1/v`` of the device memory (a conservative split) and the objective is the
slowest chunk.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import replace
from itertools import accumulate
from typing import cast

import optuna

from simulator import Hardware, InputError, ModelSpec, Strategy
from simulator.legality import microbatches_in_flight, num_microbatches, partition_units
from simulator.workload import build_stage_costs

PARTITION_CHOICES: tuple[str, ...] = ("balanced", "uniform", "min-max")
TOLERANCE = 1e-9
"""Relative slack when comparing float sums (a stage of time exactly T must pass a test at T)."""
LayerMemory = Sequence[float] | Sequence[Sequence[float]]
"""Bytes of each layer, the same on every stage, or one row of them per stage."""


def _prefix(values: Sequence[float]) -> list[float]:
    return [0.0, *accumulate(float(v) for v in values)]


def _memory_rows(layer_memory: LayerMemory, num_stages: int, num_layers: int) -> list[list[float]]:
    """``layer_memory`` as one row per stage (a flat sequence applies to every stage)."""
    rows: Sequence[Sequence[float]]
    if layer_memory and isinstance(layer_memory[0], Sequence):
        rows = cast("Sequence[Sequence[float]]", layer_memory)  # a first row: rows (lengths checked below)
    else:
        rows = [cast("Sequence[float]", layer_memory)] * num_stages
    if len(rows) != num_stages or any(len(r) != num_layers for r in rows):
        raise InputError(f"partition: `layer_memory` needs {num_layers} layers (or {num_stages} rows of them)")
    return [_prefix(r) for r in rows]


def _furthest(prefix_time: list[float], prefix_memory: list[float], start: int, limit_s: float,
              limit_bytes: float) -> int:
    """Largest end ``e`` with layers ``start..e-1`` within both limits (``start`` if none fits)."""
    by_time = bisect_right(prefix_time, prefix_time[start] + limit_s) - 1
    by_memory = bisect_right(prefix_memory, prefix_memory[start] + limit_bytes) - 1
    return max(start, min(by_time, by_memory))


def _reachable(prefix_time: list[float], memory: list[list[float]], limit_s: float,
               limit_bytes: float) -> list[list[bool]]:
    """``reach[i][e]``: layers ``0..e-1`` fit on stages ``0..i`` (each non-empty, within limits)."""
    n = len(prefix_time) - 1
    reach, previous = [], [True] + [False] * n
    for prefix_memory in memory:
        cover = [0] * (n + 2)
        for start in (s for s in range(n) if previous[s]):
            end = _furthest(prefix_time, prefix_memory, start, limit_s, limit_bytes)
            cover[start + 1] += 1
            cover[end + 1] -= 1
        current = list(accumulate(cover[:n + 1]))
        previous = [c > 0 for c in current]
        reach.append(previous)
    return reach


def _trace(prefix_time: list[float], memory: list[list[float]], reach: list[list[bool]],
           limit_s: float, limit_bytes: float) -> tuple[int, ...]:
    """Layers per stage, walking back from the last stage's end through reachable starts."""
    end, counts = len(prefix_time) - 1, []
    for stage in range(len(memory) - 1, -1, -1):
        starts = [0] if stage == 0 else [s for s in range(end) if reach[stage - 1][s]]
        start = next(s for s in starts
                     if _furthest(prefix_time, memory[stage], s, limit_s, limit_bytes) >= end)
        counts.append(end - start)
        end = start
    return tuple(reversed(counts))


def min_max_partition(layer_times: Sequence[float], layer_memory: LayerMemory, num_stages: int,
                      memory_limit: float) -> tuple[int, ...]:
    """Contiguous split of layers into ``num_stages`` non-empty stages minimising the largest
    stage time, each stage's memory within ``memory_limit``.

    Args:
        layer_times: time of each layer (s), in model order, all >= 0.
        layer_memory: bytes of each layer, the same on every stage; or ``num_stages`` rows of
            per-layer bytes (a layer's footprint depends on the stage, e.g. in-flight activations).
        num_stages: ``p``.
        memory_limit: bytes one stage may hold.

    Returns:
        Layers per stage, summing to ``len(layer_times)``.

    Raises:
        InputError: more stages than layers, or no partition fits the memory.
    """
    n = len(layer_times)
    if not 1 <= num_stages <= n:
        raise InputError(f"partition: cannot split {n} layers into {num_stages} non-empty stages")
    prefix_time, memory = _prefix(layer_times), _memory_rows(layer_memory, num_stages, n)
    limit_bytes = memory_limit * (1 + TOLERANCE)
    candidates = sorted({prefix_time[e] - prefix_time[s] for s in range(n) for e in range(s + 1, n + 1)})
    def fits(limit_s: float) -> bool:
        return _reachable(prefix_time, memory, limit_s * (1 + TOLERANCE), limit_bytes)[-1][n]
    low, high = 0, len(candidates) - 1
    if not fits(candidates[high]):
        raise InputError(f"partition: no split of {n} layers into {num_stages} stages fits"
                         f" {memory_limit / 2**30:.2f} GiB per stage")
    while low < high:
        middle = (low + high) // 2
        low, high = (low, middle) if fits(candidates[middle]) else (middle + 1, high)
    limit_s = candidates[low] * (1 + TOLERANCE)
    return _trace(prefix_time, memory, _reachable(prefix_time, memory, limit_s, limit_bytes), limit_s, limit_bytes)


def layer_costs(model: ModelSpec, hardware: Hardware, strategy: Strategy) -> tuple[
        list[float], list[float], list[float]]:
    """Per unit: (forward + backward compute time (s), model-state bytes, activation bytes per
    microbatch), embedding folded into the first unit and logits into the last.

    Raises:
        InputError: from :func:`build_stage_costs` (degrees, precision, batch).
    """
    one_each = replace(strategy, pp=partition_units(model), num_chunks=1, schedule="1f1b",
                       partition="uniform", stage_layers=None, placement="line", stage_devices=None)
    costs = build_stage_costs(model, hardware, one_each)
    times = [c.forward.busy_s + c.backward.busy_s for c in costs]
    static = [c.memory.total_bytes(0) for c in costs]
    activations = [c.memory.activation_bytes_per_microbatch for c in costs]
    return times, static, activations


def in_flight_per_virtual_stage(model: ModelSpec, strategy: Strategy) -> list[int]:
    """Microbatches whose activations each virtual stage ``c * pp + i`` holds at once."""
    per_stage = microbatches_in_flight(strategy, num_microbatches(model, strategy))
    return [per_stage[j % strategy.pp][j // strategy.pp] for j in range(strategy.pp * strategy.num_chunks)]


def min_max_stage_layers(model: ModelSpec, hardware: Hardware, strategy: Strategy) -> tuple[int, ...]:
    """``stage_layers`` of the min-max partition for ``strategy`` (its partition fields ignored).

    Raises:
        InputError: no partition fits the device memory, or the strategy does not fit the model.
    """
    virtual = strategy.pp * strategy.num_chunks
    if virtual == 1:
        return (partition_units(model),)
    times, static, activations = layer_costs(model, hardware, strategy)
    rows = [[s + n * a for s, a in zip(static, activations, strict=True)]
            for n in in_flight_per_virtual_stage(model, strategy)]
    limit = hardware.device_memory_bytes() / strategy.num_chunks
    return min_max_partition(times, rows, virtual, limit)


def enumerate_partitions(model: ModelSpec, hardware: Hardware,
                         strategy: Strategy) -> dict[str, dict[str, object]]:
    """``Strategy`` fields of each partition: balanced, uniform, and min-max when one fits memory."""
    options: dict[str, dict[str, object]] = {name: {"partition": name, "stage_layers": None}
                                             for name in ("balanced", "uniform")}
    try:
        options["min-max"] = {"partition": "explicit",
                              "stage_layers": min_max_stage_layers(model, hardware, strategy)}
    except InputError:
        pass
    return options


def suggest_partition(trial: optuna.trial.Trial, model: ModelSpec, hardware: Hardware,
                      strategy: Strategy) -> dict[str, object]:
    """Categorical ``partition`` over the fixed :data:`PARTITION_CHOICES`, as ``Strategy`` fields.

    When ``min-max`` is drawn but no partition fits memory, ``balanced`` is returned: the
    simulator then reports the strategy infeasible (which every partition would be when the
    schedule is not interleaved), and the choice list stays fixed.
    """
    name = trial.suggest_categorical("partition", list(PARTITION_CHOICES))
    options = enumerate_partitions(model, hardware, strategy) if name == "min-max" else {}
    return options.get(name, {"partition": name if name != "min-max" else "balanced", "stage_layers": None})
