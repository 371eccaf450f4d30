"""Where each pipeline stage and communication group sits on the machine.

Placement of stages follows PALM §V-B (Fig. 8): ``line`` walks dies row by row, always west to
east (row-major); ``s-shape`` walks them as a boustrophedon, so that consecutive stages stay
neighbours; ``explicit`` takes the user's device lists. Inside a die, cores are walked the same
way (row-major for ``line``, boustrophedon for ``s-shape``). The device sequence is cut into
``pp`` consecutive stages of ``tp * dp`` devices.

Inside a stage (PALM Fig. 8, comm1 vs comm2): ``compact`` TP groups take consecutive devices of
the stage, ``strided`` ones take every ``dp``-th. ``group_order`` orients the walk inside a stage:
``tp-major`` walks x first, ``dp-major`` walks y first. On a GPU cluster devices are GPU ids,
node-major, as Megatron orders ranks (TP fastest, then DP, then PP).
"""

from __future__ import annotations

from dataclasses import dataclass

from simulator.network.topology import MeshTopology, Topology
from simulator.strategy import Strategy


@dataclass(frozen=True, slots=True)
class StagePlacement:
    """Devices of one pipeline stage and its communication groups.

    Attributes:
        devices: the stage's ``tp * dp`` device ids.
        tp_groups: ``dp`` groups of ``tp`` devices, each in ring order.
        dp_groups: ``tp`` groups of ``dp`` devices, each in ring order.
    """

    devices: tuple[int, ...]
    tp_groups: tuple[tuple[int, ...], ...]
    dp_groups: tuple[tuple[int, ...], ...]


def _walk(width: int, height: int, snake: bool) -> list[tuple[int, int]]:
    """(x, y) cells of a ``width x height`` grid row by row; every other row reversed if ``snake``."""
    cells = []
    for y in range(height):
        xs = range(width - 1, -1, -1) if snake and y % 2 else range(width)
        cells += [(x, y) for x in xs]
    return cells


def device_sequence(topology: Topology, placement: str) -> list[int]:
    """All devices in the order stages take them (``line`` or ``s-shape``)."""
    if not isinstance(topology, MeshTopology):
        return list(range(topology.num_devices))
    mesh, snake = topology.mesh, placement == "s-shape"
    order = []
    for die_x, die_y in _walk(mesh.dies_x, mesh.dies_y, snake):
        for x, y in _walk(mesh.cores_x, mesh.cores_y, snake):
            order.append(topology.device_at(die_x * mesh.cores_x + x, die_y * mesh.cores_y + y))
    return order


def ring_order(topology: Topology, devices: tuple[int, ...]) -> tuple[int, ...]:
    """``devices`` ordered so that ring neighbours are close on the mesh.

    A rectangle with an even side gets a Hamiltonian cycle (every ring edge one hop); anything
    else is walked as a boustrophedon of its bounding box (the closing edge may be longer).
    """
    if not isinstance(topology, MeshTopology) or len(devices) < 3:
        return tuple(devices)
    coords = {topology.coord(d): d for d in devices}
    xs = sorted({c.x for c in coords})
    ys = sorted({c.y for c in coords})
    rows = [[coords[c] for c in sorted(coords, key=lambda c: c.x) if c.y == y] for y in ys]
    full = len(coords) == len(xs) * len(ys)
    if full and len(ys) % 2 == 0 and len(xs) >= 2:
        return _cycle(rows)
    if full and len(xs) % 2 == 0 and len(ys) >= 2:
        columns = [[r[i] for r in rows] for i in range(len(xs))]
        return _cycle(columns)
    return tuple(d for i, row in enumerate(rows) for d in (row[::-1] if i % 2 else row))


def _cycle(rows: list[list[int]]) -> tuple[int, ...]:
    """Hamiltonian cycle of a grid with an even number of rows: east on row 0, snake the rest
    over columns 1.., come back north along column 0."""
    ring = list(rows[0])
    for i, row in enumerate(rows[1:]):
        rest = row[1:]
        ring += rest[::-1] if i % 2 == 0 else rest
    ring += [row[0] for row in rows[:0:-1]]
    return tuple(ring)


def place(topology: Topology, strategy: Strategy) -> tuple[StagePlacement, ...]:
    """Devices and comm groups of every pipeline stage of a legal plan
    (:func:`simulator.legality.check_plan`)."""
    per_stage = strategy.tp * strategy.dp
    if strategy.stage_devices is not None:
        stages = strategy.stage_devices
    else:
        order = device_sequence(topology, strategy.placement)
        stages = tuple(tuple(order[i * per_stage:(i + 1) * per_stage]) for i in range(strategy.pp))
    return tuple(_stage(topology, tuple(s), strategy) for s in stages)


def _stage(topology: Topology, devices: tuple[int, ...], strategy: Strategy) -> StagePlacement:
    ordered = _oriented(topology, devices, strategy.group_order)
    tp, dp = strategy.tp, strategy.dp
    if strategy.group_layout == "compact":
        tp_groups = [ordered[i * tp:(i + 1) * tp] for i in range(dp)]
    else:
        tp_groups = [ordered[i::dp] for i in range(dp)]
    dp_groups = [tuple(g[r] for g in tp_groups) for r in range(tp)]
    return StagePlacement(
        devices=devices,
        tp_groups=tuple(ring_order(topology, tuple(g)) for g in tp_groups),
        dp_groups=tuple(ring_order(topology, g) for g in dp_groups),
    )


def _oriented(topology: Topology, devices: tuple[int, ...], group_order: str) -> list[int]:
    """The stage's devices walked x first (``tp-major``) or y first (``dp-major``)."""
    if not isinstance(topology, MeshTopology):
        return list(devices)
    def key(d: int) -> tuple[int, int]:
        c = topology.coord(d)
        return (c.y, c.x) if group_order == "tp-major" else (c.x, c.y)
    return sorted(devices, key=key)
