"""The loads of many XY routes on a mesh counted at once (numpy), not a route at a time.

A route on a mesh is a sequence of *runs*: the links of one row or one column crossed in one
direction (an XY leg is a row run then a column run, PALM §IV-C), and single resources (a link
between two wafers, a DRAM port). A run is four integers: where its resources sit in a lookup
table of the mesh's links by direction and then every resource by id (``base``), its first
device (``start``), the step between devices (``step``: 1 or -1 along a row, the mesh width
along a column; 0 for a single resource) and its length (``count``). :class:`Runs` gathers the
runs of every route, keyed by the route's position and the run's position in it, and expands
them all at once: the resources crossed come out in exactly the order a loop over the routes
would cross them, so the loads are summed in the same order (the same floats) and kept in the
order the routes first cross the resources (:meth:`~simulator.network.topology.Topology.route_loads`);
each route's resources come out too, for the mesh to keep
(:meth:`~simulator.network.mesh.MeshTopology.route_loads`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np

EAST, WEST, SOUTH, NORTH, SINGLE = range(5)
"""Blocks of the lookup table, each ``num_devices`` long but the last (every resource by id)."""


@dataclass
class Runs:
    """Runs of resources (see the module docstring) gathered from many routes, with the weight
    each adds to every resource it crosses (the share of an edge's bytes it carries)."""

    columns: list[tuple[np.ndarray, ...]] = field(default_factory=list)

    def add(self, route: np.ndarray, piece: int | np.ndarray, base: int | np.ndarray, start: np.ndarray,
            step: int | np.ndarray, count: int | np.ndarray, weight: np.ndarray) -> None:
        """Runs of routes ``route`` (their positions in the routes counted), each the ``piece``-th
        run of its route; the rest as the module docstring says (arrays of one length, or scalars)."""
        import numpy as np

        size = len(route)
        self.columns.append(tuple(c if isinstance(c, np.ndarray) else np.full(size, c) for c in
                                  (route, piece, base, start, step, count, weight)))

    def loads(self, table: np.ndarray, routes: int) -> tuple[dict[int, float], np.ndarray, list[int]]:
        """Each resource crossed and the weights of the runs crossing it summed, in the order of
        first crossing (routes in order, each route's runs in order, each run from its start);
        and every resource crossed in that order, with where each of the ``routes`` routes'
        resources end in it (a route's resources are those since the previous route's end)."""
        import numpy as np

        if not self.columns:
            return {}, np.zeros(0, dtype=np.int64), [0] * routes
        route, piece, base, start, step, count, weight = (np.concatenate(c) for c in zip(*self.columns, strict=True))
        order = np.lexsort((piece, route))
        route, base, start, step, count, weight = (route[order], base[order], start[order], step[order], count[order],
                                                   weight[order])
        run = np.repeat(np.arange(len(count)), count)
        offset = np.arange(len(run)) - np.repeat(np.cumsum(count) - count, count)
        crossed = table[base[run] + start[run] + step[run] * offset]
        sums = np.bincount(crossed, weights=weight[run])
        first = np.full(len(sums), len(crossed))
        np.minimum.at(first, crossed, np.arange(len(crossed)))  # where each resource is first crossed
        touched = np.flatnonzero(first < len(crossed))
        kept = touched[np.argsort(first[touched])]
        ends = np.cumsum(np.bincount(route, weights=count, minlength=routes)).astype(np.int64)
        return dict(zip(kept.tolist(), sums[kept].tolist(), strict=True)), crossed, ends.tolist()


Run = tuple["np.ndarray", "np.ndarray", "np.ndarray", "np.ndarray"]
"""A run's ``base, start, step, count``, one entry per route."""


def xy_runs(src: np.ndarray, dst: np.ndarray, width: int, num_devices: int) -> tuple[Run, Run]:
    """The row run then the column run (``base, start, step, count``) of the XY leg from each of
    ``src`` to the device of ``dst`` at the same position (devices of one wafer; ids run along x
    in steps of 1 and along y in steps of ``width``): east or west along ``src``'s row to the
    corner below or above ``dst``, then south or north down or up ``dst``'s column."""
    import numpy as np

    (ay, ax), (by, bx) = np.divmod(src, width), np.divmod(dst, width)
    corner = src + bx - ax
    east, south = bx >= ax, by >= ay
    row = (np.where(east, EAST, WEST) * num_devices, src, np.where(east, 1, -1), np.abs(bx - ax))
    column = (np.where(south, SOUTH, NORTH) * num_devices, corner, np.where(south, width, -width), np.abs(by - ay))
    return row, column


def die_crossings(src: np.ndarray, dst: np.ndarray, width: int, cores_x: int, cores_y: int) -> np.ndarray:
    """Die boundaries each XY leg from ``src`` to ``dst`` crosses (dies of ``cores_x x cores_y``
    cores tile the grid)."""
    import numpy as np

    (ay, ax), (by, bx) = np.divmod(src, width), np.divmod(dst, width)
    crossings: np.ndarray = np.abs(ax // cores_x - bx // cores_x) + np.abs(ay // cores_y - by // cores_y)
    return crossings


def all_pairs_links(group: np.ndarray, position: np.ndarray, x: np.ndarray,
                    y: np.ndarray) -> list[tuple[int, np.ndarray, np.ndarray]]:
    """The links crossed by the XY routes of every ordered pair of distinct devices of each group,
    counted in closed form rather than routed. Device ``d`` is the ``position[d]``-th of group
    ``group[d]`` (groups numbered from 0) at grid position ``(x[d], y[d])``, relative to the
    smallest of each; a group has at most one device per position. A pair's row leg runs along
    its source's row to its destination's column, so the link east of ``(c, r)`` carries the
    pairs from the group's sources of row ``r`` at or west of ``c`` to its destinations east of
    ``c`` (their counts multiply); its column leg runs down or up its destination's column, so
    the link south of ``(c, r)`` carries the pairs from the sources at or north of ``r`` to the
    destinations of column ``c`` south of ``r``; west and north alike.

    Returns, per direction (:data:`EAST`, :data:`WEST`, :data:`SOUTH`, :data:`NORTH`), the block
    of the lookup table (module docstring), the ``(x, y)`` of the device whose link it is, as an
    ``(n, 2)`` array, and an ``(n, 5)`` array of (group, pairs crossing it, and of the first of
    them in source-major order: source position, destination position, the link's place in its
    route), for the ``n`` (group, link) pairs crossed."""
    import numpy as np

    groups, width, height = int(group.max()) + 1, int(x.max()) + 1, int(y.max()) + 1
    big = int(position.max()) + 1  # above every position: "none"
    cell = np.full((groups, height, width), big, dtype=np.int64)
    cell[group, y, x] = position
    source_x, source_y = np.zeros((groups, big), dtype=np.int64), np.zeros((groups, big), dtype=np.int64)
    source_x[group, position], source_y[group, position] = x, y
    here = (cell < big).astype(np.int64)
    n = here.sum(axis=(1, 2))[:, None, None]
    west_of, north_of = np.cumsum(here, axis=2), np.cumsum(here, axis=1)  # in the row / column, at or before
    columns = np.cumsum(here.sum(axis=1), axis=1)[:, None, :]  # devices at or west of each column
    rows = np.cumsum(here.sum(axis=2), axis=1)[:, :, None]  # devices at or north of each row
    first_west, first_north = np.minimum.accumulate(cell, axis=2), np.minimum.accumulate(cell, axis=1)
    first_east = np.minimum.accumulate(cell[:, :, ::-1], axis=2)[:, :, ::-1]
    first_south = np.minimum.accumulate(cell[:, ::-1], axis=1)[:, ::-1]
    column_first, row_first = cell.min(axis=1)[:, None, :], cell.min(axis=2)[:, :, None]
    column_west = np.minimum.accumulate(column_first, axis=2)  # first device at or west of each column
    column_east = np.minimum.accumulate(column_first[:, :, ::-1], axis=2)[:, :, ::-1]
    row_north = np.minimum.accumulate(row_first, axis=1)
    row_south = np.minimum.accumulate(row_first[:, ::-1], axis=1)[:, ::-1]
    directions = (  # (block, pairs crossing, first source, first destination, link's device x and y offsets, sign)
        (EAST, west_of[:, :, :-1] * (n - columns[:, :, :-1]), first_west[:, :, :-1], column_east[:, :, 1:], 0, 0, 1),
        (WEST, (west_of[:, :, -1:] - west_of[:, :, :-1]) * columns[:, :, :-1], first_east[:, :, 1:],
         column_west[:, :, :-1], 1, 0, -1),
        (SOUTH, rows[:, :-1] * (north_of[:, -1:] - north_of[:, :-1]), row_north[:, :-1], first_south[:, 1:], 0, 0, 1),
        (NORTH, (n - rows[:, :-1]) * north_of[:, :-1], row_south[:, 1:], first_north[:, :-1], 0, 1, -1))
    found = []
    for block, count, source, destination, dx, dy, sign in directions:
        k, r, c = np.nonzero(count)
        s = np.broadcast_to(source, count.shape)[k, r, c]
        lx, ly, sx, sy = c + dx, r + dy, source_x[k, s], source_y[k, s]
        # the link's place in the first pair's route: along its row leg, or past it down its column leg
        place = sign * (lx - sx) if block in (EAST, WEST) else np.abs(lx - sx) + sign * (ly - sy)
        found.append((block, np.stack([lx, ly], axis=1),
                      np.stack([k, count[k, r, c], s, np.broadcast_to(destination, count.shape)[k, r, c], place],
                               axis=1)))
    return found
