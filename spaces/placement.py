"""Placement of pipeline stages: the machine's named device orders and validated custom ones.

The simulator owns the orders (:meth:`simulator.network.topology.Topology.device_orders`: PALM's
``line`` and ``s-shape``, §V-B Fig. 8, and on a mesh the mirrored and transposed s-shapes, row and
column snakes and a generalized Hilbert curve, :mod:`simulator.network.mesh`); this module only
picks a name. A name whose order equals an earlier one on this machine is not offered (e.g.
``row-snake`` equals ``s-shape`` on a single die). User placements (a study file's
``[placements]``) are validated here and proposed as ``explicit`` device lists.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import optuna

from simulator import WAFER_STAGES, Hardware, InputError
from simulator.legality import wafer_straddle
from simulator.network import topology_of
from spaces._choices import suggest_among
from spaces.parallelism import ParallelDegrees

StageDevices = tuple[tuple[int, ...], ...]


def placement_names(hardware: Hardware) -> tuple[str, ...]:
    """The machine's placement names, in the simulator's order, each order offered once."""
    orders: dict[str, Sequence[int]] = {}
    for name, order in topology_of(hardware).device_orders().items():
        if order not in orders.values():
            orders[name] = order
    return tuple(orders)


def canonical_placement(hardware: Hardware, name: str) -> str:
    """The name :func:`placement_names` offers for placement ``name``'s device order (e.g. ``line``
    for ``s-shape`` on a GPU cluster, whose orders coincide); ``name`` itself when it is not a
    named order of the machine (``explicit``)."""
    orders = topology_of(hardware).device_orders()
    if name not in orders:
        return name
    return next(n for n in placement_names(hardware) if orders[n] == orders[name])


def enumerate_placements(hardware: Hardware, degrees: ParallelDegrees) -> tuple[str, ...]:
    """The placement names for these degrees (:func:`placement_names`).

    Raises:
        InputError: the degrees need more devices than the machine has.
    """
    if degrees.tp * degrees.cp * degrees.pp * degrees.dp > hardware.num_devices:
        raise InputError(f"placement: `tp * cp * pp * dp` = {degrees.tp}*{degrees.cp}*{degrees.pp}*{degrees.dp}"
                         f" exceeds the machine's {hardware.num_devices} devices")
    return placement_names(hardware)


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
    """Validate user placements (name -> list of ``pp`` lists of ``tp * cp * dp`` device ids).

    Args:
        spec: e.g. a study file's ``[placements]`` table.
        hardware: the machine the ids refer to.
        degrees: if given, every placement must have exactly ``pp`` stages of ``tp * cp * dp`` ids.

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
            raise InputError(f"placement {name!r}: needs pp = {degrees.pp} stages of tp*cp*dp ="
                             f" {_per_stage(degrees)} ids, got {len(stages)} of {len(stages[0])}")
        placements[name] = stages
    return placements


def _per_stage(degrees: ParallelDegrees) -> int:
    """Devices of one pipeline stage: ``tp * cp * dp`` (as :attr:`simulator.Strategy.devices_per_stage`)."""
    return degrees.tp * degrees.cp * degrees.dp


def fits(stage_devices: StageDevices, degrees: ParallelDegrees) -> bool:
    """True if ``stage_devices`` has ``pp`` stages of ``tp * cp * dp`` devices."""
    return len(stage_devices) == degrees.pp and all(len(s) == _per_stage(degrees) for s in stage_devices)


def suggest_placement(trial: optuna.trial.Trial, hardware: Hardware, degrees: ParallelDegrees,
                      custom: Mapping[str, StageDevices] | None = None) -> dict[str, object]:
    """A placement as ``Strategy`` fields (``placement``, ``stage_devices``, ``wafer_stages``).

    The categorical ``placement`` has the machine's fixed names (:func:`placement_names`) then the
    custom ones (validated by :func:`custom_placements`, proposed as ``explicit``). Custom
    placements whose shape does not fit ``degrees`` are left out under the name
    ``placement|without=...`` (fixed per subset). On a machine of several wafers a named order
    is then cut over all wafers or wafer by wafer (categorical ``wafer_stages``, :func:`suggest_wafer_stages`).

    Raises:
        InputError: the degrees need more devices than the machine has.
    """
    named = enumerate_placements(hardware, degrees)
    custom = dict(custom or {})
    universe = [*named, *custom]
    valid = [*named, *(n for n, stages in custom.items() if fits(stages, degrees))]
    name = suggest_among(trial, "placement", universe, valid)
    if name in custom:
        return {"placement": "explicit", "stage_devices": custom[name]}
    return {"placement": name, "stage_devices": None, **suggest_wafer_stages(trial, hardware, degrees)}


def suggest_wafer_stages(trial: optuna.trial.Trial, hardware: Hardware, degrees: ParallelDegrees) -> dict[str, object]:
    """On a machine of several wafers, ``wafer_stages``: ``span`` always, ``within`` when no stage
    of these degrees would cross a wafer boundary (:func:`simulator.legality.wafer_straddle`; the
    categorical is ``wafer_stages|only=span`` otherwise). Nothing is asked on one wafer, so the
    spaces of one-wafer machines are unchanged."""
    if hardware.network.wafers == 1:
        return {}
    within = wafer_straddle(hardware, _per_stage(degrees), degrees.pp) is None
    valid = [s for s in WAFER_STAGES if s == "span" or within]
    return {"wafer_stages": suggest_among(trial, "wafer_stages", WAFER_STAGES, valid)}
