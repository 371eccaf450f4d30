"""Placement of pipeline stages on the machine: built-in orders and named explicit ones.

PALM §V-B (Fig. 8) compares ``line`` and ``s-shape`` orders of stages over the wafer's dies. Beyond
those two built-ins (resolved by :func:`simulator.placement.device_sequence`), this module offers a
family of explicit orders of the whole mesh, each cut into ``pp`` consecutive stages of ``tp * dp``
devices:

* ``s-shape-transposed``: dies walked column by column as a boustrophedon, cores inside each die
  column-wise too (like the built-in s-shape, each die's walk starts at its own north-west core);
* ``s-shape-east`` / ``s-shape-south`` / ``s-shape-rotated``: the s-shape mirrored to start from the
  east, from the south, or both (rotated 180 degrees);
* ``row-snake`` / ``column-snake``: a boustrophedon over all cores of the mesh, ignoring dies;
* ``hilbert``: the generalized Hilbert curve of any rectangle (Červený, "gilbert", 2018,
  github.com/jakubcerveny/gilbert), which keeps each stage compact and stages adjacent.

An explicit order equal to an earlier one on this mesh is dropped (e.g. ``row-snake`` equals
``s-shape`` on a single die). Each stage's devices are stored sorted: the simulator re-orders them
for its groups (:func:`simulator.placement.place`). On a GPU cluster only ``line`` is offered.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence

import optuna

from simulator.errors import InputError
from simulator.hardware.spec import Hardware
from simulator.network.topology import MeshTopology, topology_of
from simulator.placement import device_sequence
from spaces._choices import suggest_among
from spaces.parallelism import ParallelDegrees

StageDevices = tuple[tuple[int, ...], ...]
BUILT_IN: tuple[str, ...] = ("line", "s-shape")


def _snake(width: int, height: int, *, transpose: bool = False) -> list[tuple[int, int]]:
    """(x, y) cells of a grid as a boustrophedon by rows (by columns if ``transpose``)."""
    if transpose:
        return [(x, y) for y, x in _snake(height, width)]
    return [(x if y % 2 == 0 else width - 1 - x, y) for y in range(height) for x in range(width)]


def _sgn(value: int) -> int:
    return (value > 0) - (value < 0)


def _gilbert(x: int, y: int, ax: int, ay: int, bx: int, by: int) -> Iterator[tuple[int, int]]:
    """Generalized Hilbert curve of the rectangle spanned by (ax, ay) and (bx, by) from (x, y).

    Červený's recursive construction: split the long side in two (long rectangles) or into
    three sub-rectangles (near-square), preferring even splits so that steps stay unit length.
    """
    w, h = abs(ax + ay), abs(bx + by)
    dax, day, dbx, dby = _sgn(ax), _sgn(ay), _sgn(bx), _sgn(by)
    if h == 1 or w == 1:
        step = (dax, day) if h == 1 else (dbx, dby)
        for i in range(max(w, h)):
            yield x + i * step[0], y + i * step[1]
        return
    ax2, ay2, bx2, by2 = ax // 2, ay // 2, bx // 2, by // 2
    if 2 * w > 3 * h:
        if abs(ax2 + ay2) % 2 and w > 2:
            ax2, ay2 = ax2 + dax, ay2 + day
        yield from _gilbert(x, y, ax2, ay2, bx, by)
        yield from _gilbert(x + ax2, y + ay2, ax - ax2, ay - ay2, bx, by)
        return
    if abs(bx2 + by2) % 2 and h > 2:
        bx2, by2 = bx2 + dbx, by2 + dby
    yield from _gilbert(x, y, bx2, by2, ax2, ay2)
    yield from _gilbert(x + bx2, y + by2, ax, ay, bx - bx2, by - by2)
    yield from _gilbert(x + (ax - dax) + (bx2 - dbx), y + (ay - day) + (by2 - dby),
                        -bx2, -by2, -(ax - ax2), -(ay - ay2))


def hilbert_cells(width: int, height: int) -> list[tuple[int, int]]:
    """All (x, y) cells of a ``width x height`` grid along the generalized Hilbert curve."""
    if width >= height:
        return list(_gilbert(0, 0, width, 0, 0, height))
    return list(_gilbert(0, 0, 0, height, width, 0))


def _transposed_s_shape(topology: MeshTopology) -> list[int]:
    """Dies column by column (boustrophedon), cores inside each die column-wise."""
    mesh = topology.mesh
    return [topology.device_at(die_x * mesh.cores_x + x, die_y * mesh.cores_y + y)
            for die_x, die_y in _snake(mesh.dies_x, mesh.dies_y, transpose=True)
            for x, y in _snake(mesh.cores_x, mesh.cores_y, transpose=True)]


def _mirrored(topology: MeshTopology, order: list[int], *, flip_x: bool, flip_y: bool) -> list[int]:
    """``order`` with every device reflected east-west and/or north-south."""
    width, height = topology.mesh.width, topology.mesh.height
    def reflect(device: int) -> int:
        c = topology.coord(device)
        return topology.device_at(width - 1 - c.x if flip_x else c.x, height - 1 - c.y if flip_y else c.y)
    return [reflect(d) for d in order]


def mesh_orders(topology: MeshTopology) -> dict[str, list[int]]:
    """Every named device order of the mesh (built-ins first), duplicates of earlier ones dropped."""
    mesh, s_shape = topology.mesh, device_sequence(topology, "s-shape")
    cells = {
        "row-snake": _snake(mesh.width, mesh.height),
        "column-snake": _snake(mesh.width, mesh.height, transpose=True),
        "hilbert": hilbert_cells(mesh.width, mesh.height),
    }
    candidates = {
        "line": device_sequence(topology, "line"),
        "s-shape": s_shape,
        "s-shape-transposed": _transposed_s_shape(topology),
        "s-shape-east": _mirrored(topology, s_shape, flip_x=True, flip_y=False),
        "s-shape-south": _mirrored(topology, s_shape, flip_x=False, flip_y=True),
        "s-shape-rotated": _mirrored(topology, s_shape, flip_x=True, flip_y=True),
        **{name: [topology.device_at(x, y) for x, y in c] for name, c in cells.items()},
    }
    orders: dict[str, list[int]] = {}
    for name, order in candidates.items():
        if name in BUILT_IN or order not in orders.values():
            orders[name] = order
    return orders


def cut_stages(order: Sequence[int], degrees: ParallelDegrees) -> StageDevices:
    """The first ``pp`` runs of ``tp * dp`` devices of ``order``, each sorted."""
    size = degrees.tp * degrees.dp
    return tuple(tuple(sorted(order[i * size:(i + 1) * size])) for i in range(degrees.pp))


def placement_names(hardware: Hardware) -> tuple[str, ...]:
    """The fixed list of placement names of a machine (independent of the degrees)."""
    topology = topology_of(hardware)
    if not isinstance(topology, MeshTopology):
        return ("line",)
    return tuple(mesh_orders(topology))


def enumerate_placements(hardware: Hardware, degrees: ParallelDegrees) -> dict[str, StageDevices | None]:
    """Named placements: ``None`` for the built-ins ``line`` / ``s-shape``, else ``stage_devices``.

    Raises:
        InputError: the degrees need more devices than the machine has.
    """
    if degrees.tp * degrees.pp * degrees.dp > hardware.num_devices:
        raise InputError(f"placement: `tp * pp * dp` = {degrees.tp}*{degrees.pp}*{degrees.dp} exceeds"
                         f" the machine's {hardware.num_devices} devices")
    topology = topology_of(hardware)
    if not isinstance(topology, MeshTopology):
        return {"line": None}
    return {name: None if name in BUILT_IN else cut_stages(order, degrees)
            for name, order in mesh_orders(topology).items()}


def placement_fields(name: str, stage_devices: StageDevices | None) -> dict:
    """``Strategy`` fields of a named placement (``placement`` and ``stage_devices``)."""
    if stage_devices is None:
        return {"placement": name, "stage_devices": None}
    return {"placement": "explicit", "stage_devices": stage_devices}


def _check_custom(name: str, groups: object, hardware: Hardware) -> StageDevices:
    """One custom placement as a tuple of tuples, or InputError."""
    where = f"placement {name!r}"
    if not isinstance(groups, (list, tuple)) or not groups:
        raise InputError(f"{where}: expected a non-empty list of lists of device ids, got {groups!r}")
    if any(not isinstance(g, (list, tuple)) for g in groups):
        raise InputError(f"{where}: every stage must be a list of device ids, got {groups!r}")
    ids = [d for g in groups for d in g]
    bad = [d for d in ids if not isinstance(d, int) or isinstance(d, bool) or not 0 <= d < hardware.num_devices]
    if bad:
        raise InputError(f"{where}: device id {bad[0]!r} is not in 0..{hardware.num_devices - 1}")
    if len(set(ids)) != len(ids):
        raise InputError(f"{where}: device id {next(d for d in ids if ids.count(d) > 1)} is used twice")
    if len({len(g) for g in groups}) != 1:
        raise InputError(f"{where}: all stages need the same number of devices, got {[len(g) for g in groups]}")
    return tuple(tuple(g) for g in groups)


def custom_placements(spec: Mapping[str, object], hardware: Hardware,
                      degrees: ParallelDegrees | None = None) -> dict[str, StageDevices]:
    """Validate user placements (name -> list of ``pp`` lists of ``tp * dp`` device ids).

    Args:
        spec: e.g. a study file's ``[placements]`` table.
        hardware: the machine the ids refer to.
        degrees: if given, every placement must have exactly ``pp`` stages of ``tp * dp`` ids.

    Raises:
        InputError: a name clashes with a built-in one, a stage is not a list, an id is out of
            range or repeated, stages differ in size, or the shape does not match ``degrees``.
    """
    placements = {}
    for name, groups in spec.items():
        if name in placement_names(hardware) or name == "explicit":
            raise InputError(f"placement {name!r}: the name is taken by a built-in placement")
        stages = _check_custom(name, groups, hardware)
        if degrees is not None and not fits(stages, degrees):
            raise InputError(f"placement {name!r}: needs pp = {degrees.pp} stages of tp*dp ="
                             f" {degrees.tp * degrees.dp} ids, got {len(stages)} of {len(stages[0])}")
        placements[name] = stages
    return placements


def fits(stage_devices: StageDevices, degrees: ParallelDegrees) -> bool:
    """True if ``stage_devices`` has ``pp`` stages of ``tp * dp`` devices."""
    return len(stage_devices) == degrees.pp and all(len(s) == degrees.tp * degrees.dp for s in stage_devices)


def suggest_placement(trial: optuna.trial.Trial, hardware: Hardware, degrees: ParallelDegrees,
                      custom: Mapping[str, StageDevices] | None = None) -> dict:
    """A placement as ``Strategy`` fields (``placement``, ``stage_devices``).

    The categorical ``placement`` has the machine's fixed names (:func:`placement_names`) then the
    custom ones (validated by :func:`custom_placements`). Custom placements whose shape does not
    fit ``degrees`` are left out under the name ``placement|without=...`` (fixed per subset).
    """
    named = enumerate_placements(hardware, degrees)
    custom = dict(custom or {})
    universe = [*named, *custom]
    valid = [*named, *(n for n, stages in custom.items() if fits(stages, degrees))]
    name = suggest_among(trial, "placement", universe, valid)
    return placement_fields("explicit", custom[name]) if name in custom else placement_fields(name, named[name])
