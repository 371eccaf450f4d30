"""Layers to virtual pipeline stages: uniform by count, or balanced by time (linear partition)."""

from __future__ import annotations

from collections.abc import Sequence

from simulator.errors import InputError


def uniform_partition(items: int, parts: int) -> tuple[int, ...]:
    """Items per part as even as possible by count; the first ``items % parts`` get one more."""
    base, extra = divmod(items, parts)
    return tuple(base + (1 if index < extra else 0) for index in range(parts))


def _greedy_parts(costs: Sequence[float], limit: float) -> int:
    """Fewest contiguous parts with sums <= ``limit`` (greedy is optimal for this test)."""
    parts, current = 1, 0.0
    for cost in costs:
        if current + cost > limit:
            parts, current = parts + 1, 0.0
        current += cost
    return parts


def _split(costs: Sequence[float], parts: int, limit: float) -> tuple[int, ...]:
    """Exactly ``parts`` non-empty contiguous parts, each <= ``limit`` when that is feasible."""
    counts: list[int] = []
    current, size = 0.0, 0
    for index, cost in enumerate(costs):
        later = parts - len(counts) - 1
        must_cut = len(costs) - index == later
        if size and later and (must_cut or current + cost > limit):
            counts.append(size)
            current, size = 0.0, 0
        current, size = current + cost, size + 1
    return (*counts, size)


def largest_part(costs: Sequence[float], counts: Sequence[int]) -> float:
    """Largest part sum of a partition (the units of ``costs``)."""
    largest, start = 0.0, 0
    for count in counts:
        largest = max(largest, float(sum(costs[start:start + count])))
        start += count
    return largest


def balanced_partition(costs: Sequence[float], parts: int) -> tuple[int, ...]:
    """Contiguous split of ``costs`` into ``parts`` non-empty parts minimising the largest sum.

    Binary search on the largest sum with a greedy feasibility test (the linear-partition
    problem; O(n log(1/eps))). Never worse than :func:`uniform_partition` (checked, kept if so).

    Raises:
        InputError: more parts than items.
    """
    if parts > len(costs):
        raise InputError(f"cannot split {len(costs)} layers into {parts} stages")
    low, high = max(costs), float(sum(costs))
    for _ in range(100):
        if high - low <= 1e-12 * high:
            break
        middle = 0.5 * (low + high)
        if _greedy_parts(costs, middle) <= parts:
            high = middle
        else:
            low = middle
    balanced = _split(costs, parts, high)
    uniform = uniform_partition(len(costs), parts)
    return balanced if largest_part(costs, balanced) <= largest_part(costs, uniform) else uniform
